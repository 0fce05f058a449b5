"""A recording folder on disk: whether a folder is one (:func:`is_recording`, the one
test every reader uses), its ``recording.json`` (:data:`MANIFEST`), which of its runs are
whole, and where a new one goes.

``h2dlab record`` writes the manifest as it starts and after every experiment (status,
wall time, exit code); ``session`` reads it to find and date recordings. No torch here.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from h2dlab.places import runs_dir
from h2dlab.record_plan import KINDS, PLAN, PLAN_VERSION, experiment_from_dict

__all__ = [
    "MANIFEST",
    "default_folder",
    "finished",
    "is_kind_folder",
    "is_recording",
    "kinds_in",
    "load_manifest",
    "new_manifest",
    "read_manifest",
    "run_tables",
    "write_manifest",
]

#: The file that makes a folder a recording.
MANIFEST = "recording.json"


def run_tables(folder: str | Path) -> list[Path]:
    """The tables in ``folder`` (``tableio.SUFFIXES``), sorted: whole runs and runs stopped
    early, not a ``.partial.csv`` (a run still being written); ``[]`` for no folder."""
    from h2dlab.tableio import SUFFIXES, suffix_of

    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.iterdir()
        if suffix_of(p) in SUFFIXES and not p.name.endswith(".partial.csv") and p.is_file()
    )


def kinds_in(folder: str | Path) -> list[str]:
    """The kinds (``record_plan.KINDS``, in that order) of which ``folder`` holds a
    ``<kind>/<run>`` table (:func:`run_tables`: finished or stopped early)."""
    return [k for k in KINDS if run_tables(Path(folder) / k)]


def is_recording(folder: str | Path) -> bool:
    """Whether ``folder`` is a recording: a folder holding a recording.json that reads as a
    JSON object (:func:`read_manifest`; a damaged one reads as none), or a ``<kind>/<run>``
    table of at least one kind (:func:`kinds_in`; a kind folder holding only ``.partial.csv``
    files, or a folder of another name, makes none). ``session``, ``datasets``, ``sources``
    and ``h2dlab record`` all ask this, so a folder gets one answer everywhere."""
    folder = Path(folder)
    return folder.is_dir() and (read_manifest(folder) is not None or bool(kinds_in(folder)))


def is_kind_folder(folder: str | Path) -> bool:
    """Whether ``folder`` is a kind's folder of a recording (``<recording>/<kind>``, which
    may not exist yet): whatever table lies in it is read as one more run of that kind."""
    folder = Path(folder)
    return folder.name in KINDS and is_recording(folder.parent)


def read_manifest(folder: str | Path) -> dict[str, Any] | None:
    """The recording.json of ``folder``, or None if it has none, or one that is unreadable or
    not a JSON object (such a folder reads as one without recording.json)."""
    p = Path(folder) / MANIFEST
    try:
        m = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) else None


def _problem(m: Any) -> str | None:
    """What makes ``m`` unusable as a recording.json to resume, or None."""
    if not isinstance(m, dict):
        return f"a JSON object was expected, not {type(m).__name__}"
    device, runs = m.get("device"), m.get("experiments")
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        return f"device {device!r} is not cpu, cuda or cuda:N"
    if not isinstance(runs, list) or not runs:
        return "no list of experiments"
    commands = {e.args[0] for e in PLAN}  # what `h2dlab record` ever runs
    for i, r in enumerate(runs):
        try:
            e = experiment_from_dict(r)
            float(r.get("seconds", 0.0))
            dict(r.get("env") or {})
        except (ValueError, TypeError, AttributeError) as exc:
            return f"experiment {i}: {exc}"
        if not e.args or e.args[0] not in commands:
            return f"experiment {i} runs {' '.join(e.args[:1]) or 'nothing'!r}, not one of {', '.join(sorted(commands))}"
        if not isinstance(r.get("status"), str):
            return f"experiment {i} has no status"
    return None


def load_manifest(folder: str | Path) -> dict[str, Any]:
    """The recording.json of ``folder``, checked so that the recording can be resumed.

    Raises
    ------
    UsageError
        When ``folder`` is not a folder, holds no recording.json, or one that is not valid
        JSON or lacks what a resume needs (the device, each experiment's kind, run, command
        and status); the message names the file and the problem.
    """
    from h2dlab.errors import UsageError

    folder = Path(folder)
    if not folder.is_dir():
        what = "is a file, not a recording folder" if folder.exists() else "does not exist"
        raise UsageError(f"{folder} {what}: give the folder that `h2dlab record` wrote")
    p = folder / MANIFEST
    if not p.exists():
        raise UsageError(f"{folder} holds no {MANIFEST}: not a recording that `h2dlab record` started")
    try:
        m = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"{p} cannot be read ({exc}): it cannot be resumed; record into a new folder"
        ) from None
    problem = _problem(m)
    if problem:
        raise UsageError(f"{p} is damaged ({problem}): it cannot be resumed; record into a new folder")
    return m


def write_manifest(folder: str | Path, manifest: Mapping[str, Any]) -> Path:
    """Write recording.json atomically (a reader never sees half a file)."""
    from h2dlab.tableio import atomic_write

    p = Path(folder) / MANIFEST
    text = json.dumps(manifest, indent=2, default=str) + "\n"
    atomic_write(p, lambda q: Path(q).write_text(text))
    return p


def default_folder(gpu_name: str | None, root: str | Path | None = None) -> Path:
    """A new recording's folder: ``<root>/<host>-<gpu>-<date>`` (``-2``, ``-3`` ... when taken);
    ``root`` defaults to ``places.runs_dir()``."""
    from h2dlab.errors import UsageError

    if root is None:  # the runs folder: refused here when no folder can be made there
        root = runs_dir()
        above = next((p for p in (root, *root.parents) if p.exists()), None)
        if above is not None and not above.is_dir():
            chosen = os.environ.get("H2DLAB_RUNS", "").strip()
            where = (
                f"H2DLAB_RUNS={chosen} names where recordings go" if chosen else f"recordings go in {root}"
            )
            raise UsageError(f"{where}, but {above} is a file: point it at a folder (or give record --out)")
    root = Path(root)
    slug = re.sub(r"[^a-z0-9]+", "-", f"{platform.node()}-{gpu_name or 'cpu'}".lower()).strip("-")
    base = root / f"{slug}-{_dt.date.today().isoformat()}"
    folder, k = base, 1
    while folder.exists():
        k += 1
        folder = base.with_name(f"{base.name}-{k}")
    return folder


def finished(table: str | Path) -> bool:
    """Whether the table at ``table`` is a whole run: it exists and its env.json does not
    say it was stopped early (``measured_rows`` < ``planned_rows``, as a stopped run keeps).
    An env.json that cannot be read vouches for nothing: False."""
    from h2dlab.schema import SchemaError
    from h2dlab.tableio import read_env

    p = Path(table)
    if not p.exists():
        return False
    try:
        env = read_env(p) or {}
    except SchemaError:
        return False
    measured, planned = env.get("measured_rows"), env.get("planned_rows")
    return measured is None or planned is None or int(measured) >= int(planned)


def new_manifest(
    runs: list[dict[str, Any]], *, quick: bool, device: str, gpus: int, gpu_name: str | None, command: str
) -> dict[str, Any]:
    """A new recording's recording.json: the machine, the date and every run to make
    (each as :meth:`Experiment.to_dict` plus ``name`` and ``status``)."""
    from h2dlab import __version__

    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return {
        "format": 1,
        "plan_version": PLAN_VERSION,
        "quick": bool(quick),
        "device": device,
        "hostname": platform.node(),
        "gpu_name": gpu_name,
        "gpu_count": gpus,
        "created": now,
        "updated": now,
        "h2dlab_version": __version__,
        "command": command,
        "status": "incomplete",
        "experiments": runs,
    }
