"""Where the kit's files are: the package, the checkout it may sit in, the bundled datasets,
the benchmark results, and the folder new recordings go to (:func:`runs_dir`).

Every path is found from the ``h2dlab`` package itself, so it holds wherever in the package
a module lives. No torch, no pandas here: the recording folder and the table readers use it.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import h2dlab

__all__ = ["BENCHMARK_DIR", "CHECKOUT", "DATA_DIR", "PACKAGED", "PACKAGE_DIR", "runs_dir"]

#: The ``h2dlab`` package's folder.
PACKAGE_DIR = Path(h2dlab.__file__).resolve().parent
#: The folder above the package: a source checkout's root (where ``pyproject.toml`` is), or
#: site-packages for an installed wheel.
CHECKOUT = PACKAGE_DIR.parent


def _data_dirs() -> tuple[Path, Path, bool]:
    """(datasets, benchmark results, whether they are the installed package's copy)."""
    inside = Path(str(resources.files("h2dlab") / "data"))
    if inside.is_dir():  # an installed wheel: the build mapped data/ in
        return inside, inside / "benchmarks", True
    return CHECKOUT / "data", CHECKOUT / "benchmarks" / "results", False  # a source checkout


#: The bundled datasets; read-only (recordings go to ``runs_dir()``).
DATA_DIR, BENCHMARK_DIR, PACKAGED = _data_dirs()


def runs_dir() -> Path:
    """The default folder for recordings made on this machine (never site-packages).

    ``$H2DLAB_RUNS`` if set; in a source checkout ``data/runs`` (ignored by git);
    otherwise ``h2dlab-runs`` in the current folder.
    """
    chosen = os.environ.get("H2DLAB_RUNS", "").strip()
    if chosen:
        return Path(chosen).expanduser()
    return Path.cwd() / "h2dlab-runs" if PACKAGED else DATA_DIR / "runs"
