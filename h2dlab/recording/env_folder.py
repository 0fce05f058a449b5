"""A recording's own fingerprint: ``<folder>/env.json``, written when ``h2dlab record``
starts a recording and kept (with a ``resumed`` list) when ``--resume`` finishes it.

It is the kit's machine fingerprint (:func:`h2dlab.recording.env.collect_env`) taken by the
recorder itself, before any experiment runs, plus what the recording was asked for:
the ``record`` command line, the plan version, ``quick`` and the device. The GPU is
described from NVML, never through a CUDA context (one here would count as another
process on the GPU that every experiment measures). Each run keeps its own env.json
beside its table; this one says what the folder as a whole is, even where those are
missing.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import shlex
import warnings
from pathlib import Path
from typing import Any

from h2dlab.escape import json_text, terminal_text
from h2dlab.recording.env import collect_env
from h2dlab.recording.plan import PLAN_VERSION
from h2dlab.recording.tableio import ENV_MAX_BYTES, atomic_write, read_env_bytes

__all__ = ["FOLDER_ENV", "folder_env_path", "note_resume", "read_folder_env", "write_folder_env"]

#: The recording folder's own fingerprint, beside ``recording.json``.
FOLDER_ENV = "env.json"


def folder_env_path(folder: str | Path) -> Path:
    """Where the recording in ``folder`` keeps its fingerprint."""
    return Path(folder) / FOLDER_ENV


def read_folder_env(folder: str | Path) -> dict[str, Any] | None:
    """The recording's env.json, or None where it has none (or an unreadable one). One over
    ``tableio.ENV_MAX_BYTES`` (1 MiB) is not read whole and not used: a warning says so."""
    p = folder_env_path(folder)
    try:
        data = read_env_bytes(p, ENV_MAX_BYTES) if p.exists() else None
        if data is None:
            if p.exists():
                warnings.warn(
                    terminal_text(
                        f"{p} is over the {ENV_MAX_BYTES:,} bytes an env.json may hold, so it is not used: "
                        "this recording has no env.json of its own"
                    ),
                    stacklevel=2,
                )
            return None
        env = json_text(json.loads(data))  # a lone surrogate as text
    except (OSError, ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        return None
    return env if isinstance(env, dict) else None


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _write(folder: str | Path, env: dict[str, Any]) -> Path:
    p = folder_env_path(folder)
    text = json.dumps(env, indent=2, sort_keys=True, default=str) + "\n"
    atomic_write(p, lambda q: Path(q).write_text(text))
    return p


def write_folder_env(
    folder: str | Path, *, command: str, quick: bool, device: str, gpu_name: str | None = None
) -> Path:
    """Write ``<folder>/env.json`` for a recording that starts now.

    Parameters
    ----------
    folder
        The recording folder (it exists).
    command
        The ``h2dlab record ...`` command line, as one shell-quoted string.
    quick
        Whether the recording runs the ``--quick`` plan.
    device
        ``"cuda"``, ``"cuda:N"`` or ``"cpu"`` (no GPU fields then).
    gpu_name
        The GPU's name from elsewhere (``nvidia-smi``), used where NVML gives none.

    Returns
    -------
    pathlib.Path
        The file written.
    """
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise ValueError(f"device must be cuda, cuda:N or cpu, not {device!r}")
    index = int(device.split(":")[1]) if ":" in device else None
    env = collect_env(device_index=index, argv=shlex.split(command), gpu="nvml" if device != "cpu" else False)
    if device != "cpu" and not env.get("gpu_name") and gpu_name:
        env["gpu_name"] = gpu_name
    env.update(plan_version=PLAN_VERSION, quick=bool(quick), device=device, resumed=[])
    return _write(folder, env)


def note_resume(folder: str | Path, *, command: str, quick: bool, device: str) -> Path:
    """Add ``{"command", "date"}`` to the ``resumed`` list of ``<folder>/env.json``; the
    rest of it (the recording's start) stays as it was. A recording without one (made
    before the kit wrote it) gets one now, marked ``written_on_resume``.
    """
    env = read_folder_env(folder)
    if env is None:
        write_folder_env(folder, command=command, quick=quick, device=device)
        env = read_folder_env(folder) or {}
        env["written_on_resume"] = True
    resumed = env.get("resumed") if isinstance(env.get("resumed"), list) else []
    env["resumed"] = [*resumed, {"command": command, "date": _now()}]
    return _write(folder, env)
