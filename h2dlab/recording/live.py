"""Live mode's machine side: which machine this is, its recording found under
``datasets.runs_dir()`` or made once with ``h2dlab record --quick``.

No CUDA context is started here: the GPU is named by ``nvidia-smi`` (torch where that is
missing), and the recording runs in a child process (``python -m h2dlab record``).
:mod:`h2dlab.recording.session` re-exports every name.
"""

from __future__ import annotations

import os
import platform
import signal
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from h2dlab.errors import Unavailable, UsageError
from h2dlab.recording import datasets
from h2dlab.recording.folder import default_folder, read_manifest
from h2dlab.recording.places import CHECKOUT

__all__ = ["find_recording", "gpu_name", "live_recording", "record_failed", "same_machine", "this_machine"]


def gpu_name() -> str | None:
    """The first GPU's name, from ``nvidia-smi`` (no CUDA context in this process), else
    from torch; None without a GPU. Recordings name their GPU as torch does; the two agree."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def this_machine() -> dict[str, Any]:
    """``hostname``, ``gpu_name`` and ``gpu_count`` of this machine (GPU fields None/0 without CUDA)."""
    import torch

    cuda = torch.cuda.is_available()
    return {
        "hostname": platform.node(),
        "gpu_name": gpu_name() if cuda else None,
        "gpu_count": torch.cuda.device_count() if cuda else 0,
    }


def same_machine(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Same host and same GPU model (names compared without case or spacing differences)."""

    def norm(name: Any) -> str:
        return " ".join(str(name or "").lower().split())

    return a.get("hostname") == b.get("hostname") and norm(a.get("gpu_name")) == norm(b.get("gpu_name"))


def find_recording(machine: Mapping[str, Any], root: str | Path | None = None) -> Path | None:
    """The newest recording of ``machine`` (same host and GPU) under ``root``
    (default ``datasets.runs_dir()``): a complete one if any, else an unfinished one."""
    root = Path(root) if root is not None else datasets.runs_dir()
    if not root.is_dir():
        return None
    found = []
    for d in root.iterdir():
        m = read_manifest(d) if d.is_dir() else None
        if m and same_machine(m, machine):
            found.append((m.get("status") == "complete", str(m.get("created", "")), d))
    return max(found)[2] if found else None


#: Set to 1 to let live mode resume an unfinished recording it finds in the runs folder.
RESUME_VAR = "H2DLAB_RESUME"


def live_recording(
    echo: Callable[[str], object] = print,
    machine: Mapping[str, Any] | None = None,
    resume: bool | None = None,
) -> tuple[Path, bool]:
    """This machine's recording: found in ``datasets.runs_dir()``, or made now with
    ``h2dlab record --quick``. Returns (folder, made now).

    An unfinished recording found there is resumed only when asked (``resume``, or
    ``H2DLAB_RESUME=1``): the runs folder may hold a recording.json someone else wrote,
    and resuming runs what it names; unasked, a UsageError says how to resume it.

    Parameters
    ----------
    echo
        Receives the recorder's output line by line (a notebook shows it).
    machine
        This machine as :func:`this_machine` describes it (default: asked now).
    resume
        Whether an unfinished recording may be resumed (default: ``H2DLAB_RESUME`` is 1).

    Raises
    ------
    UsageError
        When the recorder refused its command (exit 2: e.g. an unfinished recording whose
        recording.json is damaged); ``Unavailable`` when it failed or was stopped. One line
        each, ending with the recorder's own error line.
    """
    here = dict(machine) if machine is not None else this_machine()
    found = find_recording(here)
    if found is not None and (read_manifest(found) or {}).get("status") == "complete":
        return found, False
    if found is not None:
        if not (resume if resume is not None else os.environ.get(RESUME_VAR, "").strip() == "1"):
            raise UsageError(
                f"an unfinished recording of this machine is in {found}: finish it with "
                f"`h2dlab record --resume {found}` (or set {RESUME_VAR}=1 to let live mode resume it), "
                "or move it out of the runs folder to record anew"
            )
        args = ["--resume", str(Path(found).resolve())]
    else:
        found = default_folder(here["gpu_name"])
        args = ["--quick", "--out", str(Path(found).resolve())]
    from h2dlab.recording.run import python_command

    cmd = [*python_command(), "-m", "h2dlab.cli.main", "record", *args]
    echo(f"recording this machine once: h2dlab record {' '.join(args)}")
    kit = str(CHECKOUT)  # the recorder runs this very kit
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [kit, os.environ.get("PYTHONPATH")]))}
    last = ""  # the recorder's last line: its own one-line error when it fails
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=kit
    ) as proc:
        try:
            for line in proc.stdout or []:
                echo(line.rstrip())
                last = line.strip() or last
        except KeyboardInterrupt:  # a notebook's stop button: the recorder keeps what it has
            proc.send_signal(signal.SIGINT)
            proc.wait()
            raise
        rc = proc.wait()
    if rc != 0:
        raise record_failed(rc, last, found, args)
    return found, True


def record_failed(rc: int, said: str, folder: Path, args: list[str]) -> UsageError:
    """The one-line error for a recorder that exited with ``rc`` (its last line ``said``):
    a ``UsageError`` when it refused what it was given (exit 2), else ``Unavailable`` (this
    machine's recording failed or was stopped; what it kept is resumed next time)."""
    what = f"h2dlab record {' '.join(args)} exited with {rc}"
    said = said.removeprefix("h2dlab: error: ").strip() or "it printed nothing"
    log = folder / "record.log"
    see = f" (its log: {log})" if log.is_file() else ""
    if rc == 2:
        return UsageError(f"recording this machine was refused ({what}): {said}")
    how = "stopped" if rc == 130 else "failed"
    return Unavailable(
        f"recording this machine {how} ({what}): {said}{see}; finish it with h2dlab record --resume "
        f"{folder} (or {RESUME_VAR}=1 lets live mode resume it), "
        "or use replay mode (H2DLAB_MODE=replay) to read the recorded data"
    )
