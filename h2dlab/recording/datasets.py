"""The recorded datasets, loadable by name, and every table function in one place.

``load(name)`` reads a bundled dataset or any table or folder of tables. The schema
(``h2dlab.recording.schema``) and the file functions (``h2dlab.recording.tableio``: save, read, env.json)
are re-exported here, so ``datasets.read``, ``datasets.COLUMNS`` ... keep working. The
bundled datasets ship inside the package (a wheel maps the checkout's ``data/`` to
``h2dlab/data``); in a source checkout they are read from ``data/`` directly."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from h2dlab.recording.catalog import DATASETS, TIMELINES
from h2dlab.recording.folder import is_kind_folder, is_recording, kinds_in
from h2dlab.recording.folder import run_tables as _tables
from h2dlab.recording.places import BENCHMARK_DIR, DATA_DIR, PACKAGED, runs_dir
from h2dlab.recording.schema import (
    ADDED_V2,
    ADDED_V3,
    ADDED_V4,
    COLUMNS,
    DEFAULTS,
    KEY,
    OPTIONAL_COLUMNS,
    REQUIRED,
    SchemaError,
    empty_table,
    validate,
)
from h2dlab.recording.tableio import (
    SUFFIXES,
    atomic_write,
    check_unpacked_size,
    env_path,
    read,
    read_env,
    save,
    suffix_of,
    write_env,
)

__all__ = [
    "ADDED_V2",
    "ADDED_V3",
    "ADDED_V4",
    "BENCHMARK_DIR",
    "COLUMNS",
    "DATASETS",
    "DATA_DIR",
    "DEFAULTS",
    "KEY",
    "OPTIONAL_COLUMNS",
    "PACKAGED",
    "REQUIRED",
    "SUFFIXES",
    "SchemaError",
    "TIMELINES",
    "atomic_write",
    "empty_table",
    "env_path",
    "load",
    "load_benchmark",
    "load_forum_a100",
    "names",
    "read",
    "read_env",
    "read_runs",
    "run_env",
    "run_named",
    "runs_dir",
    "save",
    "suffix_of",
    "timeline",
    "validate",
    "write_env",
]


# --- recorded datasets -------------------------------------------------------------


def timeline(name: str) -> pd.DataFrame:
    """Load an overlap timeline by name or folder; its fingerprint is in ``attrs['env']``."""
    folder = DATA_DIR / TIMELINES[name][0] if name in TIMELINES else Path(name)
    paths = (
        sorted(p for p in folder.glob("*.csv*") if suffix_of(p) in (".csv", ".csv.gz"))
        if folder.is_dir()
        else [folder]
    )
    if not paths or not paths[0].exists():
        raise SchemaError(f"no timeline at {folder}")
    for p in paths:  # a .csv.gz that unpacks past the limit is refused before it is read
        check_unpacked_size(p)
    df = pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)
    need = {"scenario", "rep", "op", "start_ms", "end_ms", "host_return_ms"}
    if not need <= set(df.columns):
        raise SchemaError(
            f"{folder}: not an overlap timeline (missing {', '.join(sorted(need - set(df.columns)))})"
        )
    ids = df["run_id"].astype(str).unique() if "run_id" in df.columns else None
    df.attrs["env"] = read_env(paths[0], run_ids=ids)  # another run's env.json is not this one's
    df.attrs["dataset"] = name
    return df


def names() -> dict[str, str]:
    """Recorded datasets that are present, with a one-line description each."""
    return {
        n: desc for n, (folder, desc) in {**DATASETS, **TIMELINES}.items() if _present(n, DATA_DIR / folder)
    }


def _present(name: str, folder: Path) -> bool:
    """Whether the dataset ``name`` has been recorded in ``folder``. forum_a100 is the forum's
    table in its own columns (:func:`load_forum_a100` reads it), which a folder's reading passes
    over as no measurement table (``record_folder.not_a_table``): its file is what counts."""
    if name == "forum_a100":
        return (folder / "forum_a100.csv").is_file()
    return folder.is_dir() and any(_tables(folder))


def _where(name: str | os.PathLike[str]) -> Path:
    """The folder or file a ``load()`` argument that is not a dataset name points to."""
    if not isinstance(name, (str, os.PathLike)) or isinstance(os.fspath(name), bytes):
        raise TypeError(f"load() takes a dataset name or a path, not {type(name).__name__}")
    text = os.fspath(name)
    known = ", ".join(n for n in names() if n not in TIMELINES) or "none"
    if not text.strip():
        raise ValueError(f"empty dataset name: give a recorded dataset ({known}) or a table's path")
    if "\x00" in text or text != text.strip():
        raise ValueError(f"{text!r} has a NUL byte or spaces around it: give the name or path exactly")
    if isinstance(name, str) and name in TIMELINES:
        raise ValueError(f"{name!r} is a recorded timeline, not a measurement table: use timeline({name!r})")
    where = Path(text)
    only_dots = all(part in (".", "..") for part in where.parts)  # ".", "..", "../.."
    data = DATA_DIR.resolve()
    if only_dots or where.resolve() in (Path.cwd().resolve(), data, *data.parents):
        raise ValueError(
            f"{text!r} is the current folder, a folder above it, or the data folder: "
            f"give a recorded dataset ({known}) or the path of a table or of a folder of tables"
        )
    if not where.exists():
        if suffix_of(where) in SUFFIXES or re.search(r"[/\\]", text):
            raise SchemaError(f"{text}: no such file or folder")
        raise SchemaError(f"unknown dataset {text!r}: give a recorded dataset ({known}) or a path")
    if not (where.is_file() or where.is_dir()):  # reading /dev/null fails; a pipe waits forever
        raise SchemaError(f"{text}: neither a file nor a folder (a device or a pipe): give a table's path")
    return where


def load(name: str | os.PathLike[str]) -> pd.DataFrame:
    """Load a recorded dataset by name, or any table or folder of tables by path.

    Every run's fingerprint is in ``df.attrs['envs']`` (run_id -> env dict), and the
    dataset name in ``df.attrs['dataset']``. A kind of a recording (its folder, or one of
    its tables; ``record_folder.is_kind_folder``) whose recording has an ``idle`` kind with
    tables gets ``df.attrs['idle_runs']``: ``{"folder": that idle kind's folder}``, from which
    the explaining side calibrates ``gpu_wake`` (``wake_source.attach``). Reading a table
    runs no analysis.

    Raises
    ------
    SchemaError
        For an unknown name (the message lists the valid ones), a missing file, a bad
        file, or a recording's folder (``record_folder.is_recording``: give a kind of it).
    ValueError
        For an empty name, or a path to the current folder, the data folder or a
        folder above them (none of which is one run).
    TypeError
        For anything but a string or a path.
    """
    if isinstance(name, str) and name == "forum_a100":
        return load_forum_a100()
    if isinstance(name, str) and name in DATASETS:
        folder = DATA_DIR / DATASETS[name][0]
        if not folder.is_dir() or not _tables(folder):
            raise SchemaError(f"dataset {name!r} has not been recorded in {folder}")
    else:
        folder = _where(name)
    if is_recording(folder):  # its tables are one level down, one folder per kind
        kinds = kinds_in(folder)
        raise SchemaError(
            f"{folder} is a recording: give one of its kinds, e.g. {folder / kinds[0]} (it has {', '.join(kinds)})"
            if kinds
            else f"{folder} is a recording that holds no table yet: give a table or a folder of tables"
        )
    paths = [folder] if folder.is_file() else _tables(folder)
    if not paths:
        subs = sorted(k.name for k in folder.iterdir() if k.is_dir() and _tables(k))
        more = f": give one of its folders, e.g. {folder / subs[0]} ({', '.join(subs)})" if subs else ""
        raise SchemaError(f"{folder}: holds no measurement table ({', '.join(SUFFIXES)}){more}")
    out = read_runs(paths, os.fspath(name))
    idle = _idle_beside(folder)
    if idle is not None:
        out.attrs["idle_runs"] = {"folder": str(idle)}
    return out


def read_runs(paths: list[Path], label: str) -> pd.DataFrame:
    """The tables at ``paths`` as one, with each run's env and name (its file's, or its run_id
    where one file holds several runs) in ``attrs``."""
    frames, envs, run_names, where = [], {}, {}, {}
    for p in paths:
        df = read(p)
        several = df["run_id"].nunique() > 1
        for rid in df["run_id"].unique():
            if rid in where:  # a copy of a table, or explain's --out beside its source
                raise SchemaError(
                    f"run {rid} is in both {where[rid].name} and {p.name} of {p.parent}: a run's rows would "
                    "count twice; keep one of the two files (or give one file)"
                )
            where[rid] = p
            env = df.attrs.get("env")  # a file of several runs: its env.json speaks for its own
            envs[rid] = env if env is None or env.get("run_id") in (None, rid) else None
            run_names[rid] = str(rid) if several else p.name[: -len(suffix_of(p))]
        frames.append(df)
    out = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    out.attrs["envs"] = envs
    out.attrs["run_names"] = run_names
    out.attrs["dataset"] = label
    return out


def _idle_beside(where: Path) -> Path | None:
    """The ``idle`` kind of the recording a kind folder (or one of its tables) lies in,
    when that recording has one with tables; else None."""
    kind = where.parent if where.is_file() else where
    idle = kind.parent / "idle"
    return idle if is_kind_folder(kind) and _tables(idle) else None


FORUM_COLUMNS = {
    "pin-memory(ms)": "pin_memory",
    "pinned->cuda(ms)": "pinned_to_cuda",
    "direct to cuda(ms)": "direct_to_cuda",
}


def load_forum_a100(folder: Path | None = None) -> pd.DataFrame:
    """The forum's A100 table in the measurement-table schema (630 rows).

    ``order`` is the published row index, ``wall_ms`` the published figure (host
    clock, one shot each), ``event_ms`` and the allocator counters NaN (not
    measured). The forum's loop called ``empty_cache()`` after each size and before
    each direct copy, so ``empty_cache`` is True for ``direct_to_cuda`` and for
    every ``pin_memory`` row but the first.
    """
    folder = Path(folder) if folder is not None else DATA_DIR / "forum_a100"
    raw = pd.read_csv(folder / "forum_a100.csv")
    rows = []
    for _, r in raw.iterrows():
        dims = [int(d) for d in str(r["shape"]).strip("()").split(",")]
        size = int(np.prod(dims)) * 2  # float16
        for col, strategy in FORUM_COLUMNS.items():
            rows.append(
                {
                    "run_id": "forum_a100",
                    "order": int(r["row"]),
                    "strategy": strategy,
                    "size_bytes": size,
                    "shape": str(tuple(dims)),
                    "dtype": "float16",
                    "rep": 0,
                    "warmup": False,
                    "t_s": np.nan,
                    "wall_ms": float(r[col]),
                    "event_ms": np.nan,
                    "host_allocs": np.nan,
                    "device_allocs": np.nan,
                    "empty_cache": strategy == "direct_to_cuda"
                    or (strategy == "pin_memory" and int(r["row"]) > 0),
                    "error": "",
                }
            )
    df = validate(pd.DataFrame(rows), source="forum_a100")
    env = json.loads((folder / "forum_a100.env.json").read_text())
    df.attrs["env"] = env
    df.attrs["envs"] = {"forum_a100": env}
    df.attrs["run_names"] = {"forum_a100": "forum_a100"}
    df.attrs["dataset"] = "forum_a100"
    return df


def run_named(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """The rows of the run whose file was ``<name>.csv.gz`` (see ``attrs['run_names']``)."""
    ids = [rid for rid, n in (df.attrs.get("run_names") or {}).items() if n == name]
    if not ids:
        raise SchemaError(
            f"no run named {name!r}; runs: {', '.join((df.attrs.get('run_names') or {}).values())}"
        )
    out = df[df["run_id"].isin(ids)].copy()
    out.attrs = {**df.attrs, "env": (df.attrs.get("envs") or {}).get(ids[0])}
    return out


def load_benchmark(name: str = "h200") -> dict[str, Any]:
    """``benchmarks/results/<name>.json`` as written by benchmarks/bench_transfer.py.

    Raises
    ------
    SchemaError
        If there is no such result; ``ValueError`` for a name that is not a plain file
        name (a path would reach outside the results folder).
    """
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*", name):
        raise ValueError(f"{name!r} is not a benchmark result name (letters, digits, _ . -)")
    p = BENCHMARK_DIR / f"{name}.json"
    if not p.exists():
        raise SchemaError(f"no benchmark result {p}")
    return json.loads(p.read_text())


def run_env(df: pd.DataFrame) -> dict[str, Any]:
    """The fingerprint of the (first) run in ``df``, or an empty dict."""
    if df.attrs.get("env"):
        return df.attrs["env"]
    envs = df.attrs.get("envs") or {}
    for env in envs.values():
        if env:
            return env
    return {}
