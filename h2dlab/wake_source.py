"""Which idle runs may calibrate ``gpu_wake`` for a table, and the calibration they make.

``datasets.load`` attaches to each kind of a recording the calibration its ``idle`` runs
make (``attrs["wake_calibration"]``). An idle run only speaks for the table's GPU when it
timed copies to a CUDA GPU (``spec.device`` ``cuda...``; ``measure --device cpu --pause``
copies within host memory) on the same machine: the same ``gpu_name``, ``hostname`` and
``platform`` (kernel and boot image) in its env.json as every run of the table. A table
whose runs lack those, or come from several machines, gets no calibration. No torch here.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from h2dlab.causes_wake import WakeCalibration
from h2dlab.factors_idle import wake_calibration

__all__ = ["MACHINE_KEYS", "calibrating_runs", "calibration", "machine_of", "on_cuda"]

#: The env.json fields an idle run must share with a table's runs to calibrate it.
MACHINE_KEYS = ("gpu_name", "hostname", "platform")


def machine_of(env: Any) -> tuple[str, ...] | None:
    """A run's machine from its env.json (:data:`MACHINE_KEYS`), None when it lacks one."""
    if not isinstance(env, dict):
        return None
    values = tuple(env.get(k) for k in MACHINE_KEYS)
    return values if all(isinstance(v, str) and v.strip() for v in values) else None


def on_cuda(env: Any) -> bool:
    """Whether a run's env.json says it timed copies to a CUDA GPU (``spec.device``)."""
    spec = env.get("spec") if isinstance(env, dict) else None
    device = spec.get("device") if isinstance(spec, dict) else None
    return isinstance(device, str) and device.startswith("cuda")


def calibrating_runs(table: pd.DataFrame, idle_runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``idle_runs`` that may calibrate ``gpu_wake`` for ``table``.

    Parameters
    ----------
    table
        The runs to explain (their env.json in ``attrs["envs"]``).
    idle_runs
        Runs measured with ``--pause`` (their env.json in ``attrs["envs"]``).

    Returns
    -------
    pandas.DataFrame
        The idle runs measured on a CUDA GPU of the one machine every run of ``table``
        was measured on (no rows when the table's runs do not name one machine);
        ``attrs["envs"]`` holds theirs only.
    """
    machines = {machine_of(e) for e in (table.attrs.get("envs") or {}).values()}
    machine = machines.pop() if len(machines) == 1 else None
    envs = idle_runs.attrs.get("envs")
    envs = envs if isinstance(envs, dict) else {}
    keep = [r for r, e in envs.items() if machine is not None and on_cuda(e) and machine_of(e) == machine]
    out = idle_runs[idle_runs["run_id"].isin(keep)]
    out.attrs = {**idle_runs.attrs, "envs": {r: envs[r] for r in keep}}
    return out


def calibration(table: pd.DataFrame, idle_runs: pd.DataFrame, label: str) -> WakeCalibration | None:
    """``factors_idle.wake_calibration`` of the idle runs that may calibrate ``table``
    (:func:`calibrating_runs`), named ``label``; None when they hold fewer than two pauses."""
    runs = calibrating_runs(table, idle_runs)
    runs.attrs["dataset"] = label
    try:
        return wake_calibration(runs)
    except ValueError:
        return None
