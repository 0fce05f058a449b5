"""Which machine (and boot) a run was measured on, and on which device, from its env.json:
what decides whether idle runs may be compared with each other (``factors_idle``) and
calibrate another run's ``gpu_wake`` (``wake_source``). No torch here.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from h2dlab.recording.env import describe

__all__ = ["MACHINE_KEYS", "describe_runs", "machine_of", "missing_keys", "off_gpu", "on_cuda"]

#: The env.json fields that name a run's machine (and boot): runs that differ in one were
#: measured on another machine or boot, and a pause's cost is compared within one.
MACHINE_KEYS = ("gpu_name", "hostname", "platform")


def missing_keys(env: Any) -> list[str]:
    """The :data:`MACHINE_KEYS` a run's env.json does not name (a non-blank string); all of
    them when ``env`` is not a dict."""
    env = env if isinstance(env, dict) else {}
    return [k for k in MACHINE_KEYS if not (isinstance(env.get(k), str) and env[k].strip())]


def machine_of(env: Any) -> tuple[str, ...] | None:
    """A run's machine from its env.json (:data:`MACHINE_KEYS`), None when it lacks one."""
    return None if missing_keys(env) else tuple(env[k] for k in MACHINE_KEYS)


def on_cuda(env: Any) -> bool:
    """Whether a run's env.json says it timed copies to a CUDA GPU (``spec.device``)."""
    spec = env.get("spec") if isinstance(env, dict) else None
    device = spec.get("device") if isinstance(spec, dict) else None
    return isinstance(device, str) and device.startswith("cuda")


def off_gpu(env: Any) -> bool:
    """Whether a run's env.json names a device that is not a CUDA GPU (``--device cpu``)."""
    spec = env.get("spec") if isinstance(env, dict) else None
    return isinstance(spec, dict) and isinstance(spec.get("device"), str) and not on_cuda(env)


def describe_runs(df: pd.DataFrame) -> str | None:
    """One line for the runs of ``df`` (``attrs["envs"]``, else ``attrs["env"]``):
    ``env.describe`` of their env.json where they agree, else ``"N setups: A; B"`` (each
    distinct one, in run order); None without any env.json."""
    envs = df.attrs.get("envs") if isinstance(df.attrs.get("envs"), dict) else {}
    found = [e for e in envs.values() if isinstance(e, dict) and e]
    one = df.attrs.get("env")
    found = found or ([one] if isinstance(one, dict) and one else [])
    lines = list(dict.fromkeys(describe(e) for e in found))
    if not lines:
        return None
    return lines[0] if len(lines) == 1 else f"{len(lines)} setups: " + "; ".join(lines)
