"""A recording folder on disk: its ``recording.json`` (:data:`MANIFEST`), which of its
runs are whole, and where a new one goes.

``h2dlab record`` writes the manifest as it starts and after every experiment (status,
wall time, exit code); ``session`` reads it to find and date recordings. No torch here.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["MANIFEST", "default_folder", "finished", "new_manifest", "read_manifest", "write_manifest"]

#: The file that makes a folder a recording.
MANIFEST = "recording.json"


def read_manifest(folder: str | Path) -> dict[str, Any] | None:
    """The recording.json of ``folder``, or None if it has none (or an unreadable one)."""
    p = Path(folder) / MANIFEST
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def write_manifest(folder: str | Path, manifest: Mapping[str, Any]) -> Path:
    """Write recording.json atomically (a reader never sees half a file)."""
    from h2dlab.tableio import atomic_write

    p = Path(folder) / MANIFEST
    text = json.dumps(manifest, indent=2, default=str) + "\n"
    atomic_write(p, lambda q: Path(q).write_text(text))
    return p


def default_folder(gpu_name: str | None, root: str | Path | None = None) -> Path:
    """A new recording's folder: ``<root>/<host>-<gpu>-<date>`` (``-2``, ``-3`` ... when taken);
    ``root`` defaults to ``datasets.runs_dir()``."""
    from h2dlab.datasets import runs_dir

    root = Path(root) if root is not None else runs_dir()
    slug = re.sub(r"[^a-z0-9]+", "-", f"{platform.node()}-{gpu_name or 'cpu'}".lower()).strip("-")
    base = root / f"{slug}-{_dt.date.today().isoformat()}"
    folder, k = base, 1
    while folder.exists():
        k += 1
        folder = base.with_name(f"{base.name}-{k}")
    return folder


def finished(table: str | Path) -> bool:
    """Whether the table at ``table`` is a whole run: it exists and its env.json does not
    say it was stopped early (``measured_rows`` < ``planned_rows``, as a stopped run keeps)."""
    from h2dlab.tableio import read_env

    p = Path(table)
    if not p.exists():
        return False
    env = read_env(p) or {}
    measured, planned = env.get("measured_rows"), env.get("planned_rows")
    return measured is None or planned is None or int(measured) >= int(planned)


def new_manifest(
    runs: list[dict[str, Any]], *, quick: bool, device: str, gpus: int, gpu_name: str | None, command: str
) -> dict[str, Any]:
    """A new recording's recording.json: the machine, the date and every run to make
    (each as :meth:`Experiment.to_dict` plus ``name`` and ``status``)."""
    from h2dlab import __version__
    from h2dlab.record_plan import PLAN_VERSION  # here: record_plan re-exports this module

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
