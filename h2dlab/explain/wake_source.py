"""Which idle runs may calibrate ``gpu_wake`` for each run of a table, and the calibration they make.

``datasets.load`` notes, for each kind of a recording, the ``idle`` kind beside it
(``attrs["idle_runs"]``); :func:`attach` adds, per run, the calibration those idle runs
make (``attrs["wake_calibrations"]``, :func:`calibrations`) when a table is explained. An idle run
only speaks for a run's GPU when it timed copies to a CUDA GPU (``spec.device``
``cuda...``; ``measure --device cpu --pause`` copies within host memory) on the same
machine: the same ``gpu_name``, ``hostname`` and ``platform`` (kernel and boot image) in
its env.json as that run. A run that lacks those, or whose machine no idle run shares,
gets no calibration; where the recording's idle runs come from another machine or boot,
or the run does not name its machine, it gets a sentence saying so instead, which the
copies' idle-gap check quotes (``causes_wake.wake_check``). No torch here.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from h2dlab.escape import terminal_text
from h2dlab.explain.causes_wake import WakeCalibration
from h2dlab.explain.idle import wake_calibration
from h2dlab.explain.rows import check_values
from h2dlab.recording.machines import MACHINE_KEYS, machine_of, missing_keys, off_gpu, on_cuda

__all__ = [
    "MACHINE_KEYS",
    "Wake",
    "attach",
    "calibrating_runs",
    "calibration",
    "calibrations",
    "machine_of",
    "of_attrs",
    "of_table",
    "on_cuda",
    "per_run",
    "shared",
    "unreadable",
]

#: What one run's calibration may be: a :class:`~h2dlab.explain.causes_wake.WakeCalibration`, or
#: a sentence saying why the recording's idle runs cannot calibrate it.
Wake = WakeCalibration | str


def _envs(df: pd.DataFrame) -> dict:
    envs = df.attrs.get("envs")
    return envs if isinstance(envs, dict) else {}


def _runs_of(machine: tuple[str, ...] | None, idle_runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``idle_runs`` measured on a CUDA GPU of ``machine`` (none for None)."""
    envs = _envs(idle_runs)
    keep = [r for r, e in envs.items() if machine is not None and on_cuda(e) and machine_of(e) == machine]
    out = idle_runs[idle_runs["run_id"].isin(keep)]
    out.attrs = {**idle_runs.attrs, "envs": {r: envs[r] for r in keep}}
    return out


def calibrating_runs(table: pd.DataFrame, idle_runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``idle_runs`` that may calibrate ``gpu_wake`` for every run of ``table``.

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
        ``attrs["envs"]`` holds theirs only. :func:`calibrations` matches run by run.
    """
    machines = {machine_of(e) for e in _envs(table).values()}
    return _runs_of(machines.pop() if len(machines) == 1 else None, idle_runs)


def _calibrate_or_why(runs: pd.DataFrame, label: str) -> Wake:
    """``factors_idle.wake_calibration`` of ``runs``, else why they cannot make one (its
    message, as a clause naming ``label`` and this run's machine)."""
    runs.attrs["dataset"] = label
    try:
        return wake_calibration(runs)
    except ValueError as exc:
        why = str(exc).removeprefix("wake_calibration: ").rstrip(".")
        why = why[:1].lower() + why[1:]
        return why.replace("the idle runs", f"the idle runs of this run's machine ({label})", 1)


def _calibrate(runs: pd.DataFrame, label: str) -> WakeCalibration | None:
    cal = _calibrate_or_why(runs, label)
    return cal if isinstance(cal, WakeCalibration) else None


def calibration(table: pd.DataFrame, idle_runs: pd.DataFrame, label: str) -> WakeCalibration | None:
    """``factors_idle.wake_calibration`` of the idle runs that may calibrate ``table``
    (:func:`calibrating_runs`), named ``label``; None when they hold fewer than two pauses."""
    return _calibrate(calibrating_runs(table, idle_runs), label)


def _unusable(idle_runs: pd.DataFrame, label: str) -> str | None:
    """Why no idle run of ``idle_runs`` can calibrate any run (none timed a CUDA GPU, or
    those that did name no machine), in words; None when the table carries no env.json."""
    envs = _envs(idle_runs)
    if not envs:
        return None
    if not any(on_cuda(e) for e in envs.values()):
        return (
            f"the recording's idle runs ({label}) timed no CUDA GPU (their env.json's spec.device), so they "
            f"cannot tell what a pause costs on one"
        )
    return (
        f"the recording's idle runs ({label}) that timed a CUDA GPU do not name their machine "
        f"({', '.join(MACHINE_KEYS)} in their env.json), so they cannot be matched to this run's"
    )


def _elsewhere(machine: tuple[str, ...], others: list[tuple[str, ...]], label: str, unnamed: bool) -> str:
    """Why idle runs of ``others`` (machines) cannot calibrate a run of ``machine``: the keys
    in which the nearest of them differs, with both values (``unnamed``: some CUDA idle runs
    name no machine, so the sentence speaks of those that do)."""
    nearest = min(sorted(others), key=lambda m: sum(a != b for a, b in zip(m, machine, strict=True)))
    differ = ", ".join(
        f"{k} {theirs} where this run's is {ours}"
        for k, theirs, ours in zip(MACHINE_KEYS, nearest, machine, strict=True)
        if theirs != ours
    )
    where = "another machine or boot" if len(others) == 1 else f"{len(others)} other machines or boots"
    nearest_of = "" if len(others) == 1 else "the nearest: "
    return (
        f"the recording's idle runs{' that name their machine' if unnamed else ''} ({label}) were measured on "
        f"{where} ({nearest_of}{differ}), so they cannot "
        f"tell what a pause costs on this one"
    )


def calibrations(table: pd.DataFrame, idle_runs: pd.DataFrame, label: str) -> dict[object, Wake]:
    """Per run of ``table``, the calibration of the idle runs measured on a CUDA GPU of its
    own machine, or why the idle runs cannot make one for it.

    Parameters
    ----------
    table
        The runs to explain (their env.json in ``attrs["envs"]``, run_id to dict).
    idle_runs
        Runs measured with ``--pause`` (their env.json in ``attrs["envs"]``).
    label
        What the calibrations name as their idle runs (``WakeCalibration.source``), e.g.
        ``"h200/idle"``.

    Returns
    -------
    dict
        run_id to ``factors_idle.wake_calibration`` of the CUDA idle runs of the run's
        machine (:data:`MACHINE_KEYS`), made once per machine; or, where some idle runs
        timed a CUDA GPU of a named machine but none of this run's, a sentence saying that
        the idle runs come from another machine or boot (naming each key that differs
        from the nearest such machine, with both values), or that the run's env.json does
        not name its machine, or that it timed no CUDA GPU (``spec.device`` another device);
        where its machine's idle runs cannot make one (fewer than two
        pauses, or no strategy timed after every pause), what they lack; where no idle run
        timed a CUDA GPU of a named machine, that (every run the same sentence). Empty
        when ``idle_runs`` carries no env.json (``attrs["envs"]``).

    Raises
    ------
    TypeError
        ``table`` or ``idle_runs`` is not a DataFrame, or ``label`` not a str.
    ValueError
        ``idle_runs`` lacks a column a model reads (``rows.check_values``).
    """
    for name, df in (("table", table), ("idle_runs", idle_runs)):
        if not isinstance(df, pd.DataFrame):
            raise TypeError(
                f"{name} must be a measurement table (a pandas DataFrame), not {type(df).__name__}"
            )
    if not isinstance(label, str):
        raise TypeError(f"label must be a str naming the idle runs, not {type(label).__name__}")
    check_values(idle_runs)
    idle_machines = sorted({m for e in _envs(idle_runs).values() if on_cuda(e) and (m := machine_of(e))})
    if not idle_machines:
        why = _unusable(idle_runs, label)
        return dict.fromkeys(_envs(table), why) if why is not None else {}
    made: dict[tuple[str, ...], Wake] = {}
    out: dict[object, Wake] = {}
    for run, env in _envs(table).items():
        machine = machine_of(env)
        if off_gpu(env):  # host-memory copies: no GPU to wake
            out[run] = (
                f"this run timed no CUDA GPU (its env.json's spec.device is {env['spec']['device']}), so the "
                f"recording's idle runs ({label}) do not speak for its copies"
            )
        elif machine is None:
            lacks = ", ".join(missing_keys(env))
            named = f"names no {lacks}" if isinstance(env, dict) else "is missing"
            out[run] = (
                f"this run's env.json {named}, so the recording's idle runs ({label}) cannot be matched to "
                f"its machine"
            )
        elif machine not in idle_machines:
            unnamed = any(on_cuda(e) and machine_of(e) is None for e in _envs(idle_runs).values())
            out[run] = _elsewhere(machine, idle_machines, label, unnamed)
        else:
            if machine not in made:
                made[machine] = _calibrate_or_why(_runs_of(machine, idle_runs), label)
            out[run] = made[machine]
    return out


def unreadable(table: pd.DataFrame, label: str) -> dict[object, Wake]:
    """Per run of ``table``, the sentence that the recording's idle runs (``label``) cannot be
    read (:func:`attach` warns once with the reason)."""
    why = f"the recording's idle runs ({label}) cannot be read, so they cannot tell what a pause costs here"
    return dict.fromkeys(_envs(table), why)


def shared(wake: Mapping[object, Wake], run_ids: Iterable[object]) -> WakeCalibration | None:
    """The one calibration every run of ``run_ids`` has in ``wake`` (:func:`calibrations`),
    else None (a run without one, or runs of two machines). TypeError when ``wake`` is not
    a mapping."""
    if not isinstance(wake, Mapping):
        raise TypeError(
            f"wake must be a mapping run_id -> calibration or sentence, not {type(wake).__name__}"
        )
    found = [wake.get(r) for r in run_ids]
    first = found[0] if found else None
    return first if isinstance(first, WakeCalibration) and all(c == first for c in found) else None


def attach(table: pd.DataFrame) -> pd.DataFrame:
    """Attach to ``table`` (in place; returned) the calibrations of the idle runs of its
    recording, which ``datasets.load`` names in ``attrs["idle_runs"]``: per run under
    ``attrs["wake_calibrations"]`` (:func:`calibrations`), and the one every run shares under
    ``attrs["wake_calibration"]`` (:func:`shared`; None when they share none). A table
    without ``idle_runs``, or that already carries calibrations, is left as it is. Idle runs
    that cannot be read give each run a sentence saying so (:func:`unreadable`) and one
    warning."""
    from h2dlab.recording.datasets import read_runs
    from h2dlab.recording.folder import run_tables

    idle = table.attrs.get("idle_runs")
    if not isinstance(idle, Mapping) or "wake_calibrations" in table.attrs:
        return table
    folder = Path(idle["folder"])
    label = f"{folder.parent.name}/idle"
    try:
        runs = read_runs(run_tables(folder), "")
    except (ValueError, TypeError, KeyError, OSError) as exc:  # SchemaError is a ValueError
        warnings.warn(
            terminal_text(f"{folder}: the idle runs cannot be read ({exc}); gpu_wake is off"), stacklevel=2
        )
        cals = unreadable(table, label)
    else:
        cals = calibrations(table, runs, label)
    table.attrs["wake_calibrations"] = cals
    table.attrs["wake_calibration"] = shared(cals, table.attrs.get("envs") or {})
    return table


def of_table(table: pd.DataFrame) -> WakeCalibration | Mapping[object, Wake] | None:
    """The calibration(s) for ``table``'s runs: :func:`of_attrs` of its ``attrs`` once
    :func:`attach` has added those of its recording's idle runs."""
    return of_attrs(attach(table).attrs)


def of_attrs(attrs: Mapping[str, Any]) -> WakeCalibration | Mapping[object, Wake] | None:
    """The calibration(s) a table's ``attrs`` carry: ``attrs["wake_calibrations"]`` (per
    run) where set, else ``attrs["wake_calibration"]`` (one for every run), else None."""
    per = attrs.get("wake_calibrations")
    return per if isinstance(per, Mapping) else attrs.get("wake_calibration")


def per_run(wake: WakeCalibration | Mapping[object, Wake] | None, run_ids: pd.Series) -> pd.Series:
    """Per row, its run's calibration (or the sentence why it has none; None where neither).

    Parameters
    ----------
    wake
        One calibration for every run, a mapping run_id to calibration or sentence
        (:func:`calibrations`; runs it lacks get None), or None.
    run_ids
        The rows' ``run_id``.

    Returns
    -------
    pandas.Series
        Objects on ``run_ids``'s index.

    Raises
    ------
    TypeError
        ``wake`` is neither a ``WakeCalibration``, a mapping nor None, or the mapping holds
        a value that is neither a ``WakeCalibration``, a str nor None.
    ValueError
        The mapping holds a blank sentence.
    """
    if isinstance(wake, Mapping):
        for run, v in wake.items():
            if not (v is None or isinstance(v, (WakeCalibration, str))):
                raise TypeError(
                    f"wake[{run!r}] must be a WakeCalibration, a sentence why the run has none, or None; "
                    f"not {type(v).__name__}"
                )
            if isinstance(v, str) and not v.strip():
                raise ValueError(
                    f"wake[{run!r}] is a blank sentence: say why the run has no calibration, or give None"
                )
        values = [wake.get(r) for r in run_ids]
    elif wake is None or isinstance(wake, WakeCalibration):
        values = [wake] * len(run_ids)
    else:
        raise TypeError(
            f"wake must be a WakeCalibration or a mapping run_id -> one, not {type(wake).__name__}"
        )
    return pd.Series(values, index=run_ids.index, dtype=object)
