"""The measurement table: schema checks, save/read (.csv, .csv.gz, .parquet, .xlsx),
and the recorded datasets, loadable by name.

A run is a table plus its fingerprint, ``<stem>.env.json`` beside it.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from h2dlab import SCHEMA_VERSION

#: The table's columns and their dtypes, in order (DESIGN.md).
COLUMNS: dict[str, str] = {
    "run_id": "str",
    "order": "int",
    "strategy": "str",
    "size_bytes": "int",
    "shape": "str",
    "dtype": "str",
    "rep": "int",
    "warmup": "bool",
    "t_s": "float",
    "wall_ms": "float",
    "event_ms": "float",
    "host_allocs": "float",
    "device_allocs": "float",
    "empty_cache": "bool",
    "error": "str",
}
#: Columns a multi-GPU run adds; optional elsewhere.
OPTIONAL_COLUMNS: dict[str, str] = {"gpu": "int", "world": "int"}

SUFFIXES = (".csv", ".csv.gz", ".parquet", ".xlsx")
DATA_DIR = Path(__file__).resolve().parent.parent / "data"


class SchemaError(ValueError):
    """A file or frame is not a measurement table; the message says what is wrong."""


def suffix_of(path: str | Path) -> str:
    name = str(path).lower()
    for s in sorted(SUFFIXES, key=len, reverse=True):
        if name.endswith(s):
            return s
    return Path(name).suffix


def env_path(path: str | Path) -> Path:
    """Where the fingerprint of the table at ``path`` lives: ``<stem>.env.json``."""
    p = Path(path)
    suf = suffix_of(p)
    stem = p.name[: -len(suf)] if suf and p.name.lower().endswith(suf) else p.stem
    return p.with_name(stem + ".env.json")


def _coerce(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    for col, kind in {**COLUMNS, **OPTIONAL_COLUMNS}.items():
        if col not in out:
            continue
        if kind == "str":
            v = out[col].astype(object)
            out[col] = v.where(v.notna(), "").astype(str)
        elif kind == "int":
            out[col] = pd.to_numeric(out[col], errors="raise").astype("int64")
        elif kind == "float":
            out[col] = pd.to_numeric(out[col], errors="raise").astype("float64")
        elif kind == "bool":
            v = out[col]
            if v.dtype != bool:
                v = v.map(lambda s: str(s).strip().lower() in ("true", "1", "1.0"))
            out[col] = v.astype(bool)
    return out


def validate(df: pd.DataFrame, *, source: str = "table") -> pd.DataFrame:
    """Check ``df`` against the schema and return it with the schema's dtypes.

    Raises
    ------
    SchemaError
        Naming the missing columns or the column that holds wrong values.
    """
    if not isinstance(df, pd.DataFrame):
        raise SchemaError(f"{source}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise SchemaError(
            f"{source} is not an h2dlab measurement table: missing column(s) {', '.join(missing)}"
        )
    try:
        out = _coerce(df)
    except (ValueError, TypeError) as exc:
        raise SchemaError(f"{source}: a column holds values of the wrong type ({exc})") from None
    if (out["size_bytes"] < 0).any():
        raise SchemaError(f"{source}: size_bytes must not be negative")
    ok = out["error"] == ""
    if (out.loc[ok, "wall_ms"].isna()).any():
        raise SchemaError(f"{source}: a row without an error has no wall_ms")
    return out


def atomic_write(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=path.name, dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; a table is not a secret
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save(df: pd.DataFrame, path: str | Path, env: dict[str, Any] | None = None) -> Path:
    """Write a table (write to a temporary file, then rename: never a half file).

    The format follows the extension: .csv, .csv.gz, .parquet or .xlsx. With
    ``env``, the fingerprint is written beside it as ``<stem>.env.json``.
    """
    path = Path(path)
    suf = suffix_of(path)
    if suf not in SUFFIXES:
        raise SchemaError(f"cannot write {path.name}: use one of {', '.join(SUFFIXES)}")
    df = validate(df, source=str(path))
    cols = list(COLUMNS) + [c for c in OPTIONAL_COLUMNS if c in df.columns]
    df = df[cols]
    if suf in (".csv", ".csv.gz"):
        writer = lambda p: df.to_csv(p, index=False, compression="gzip" if suf == ".csv.gz" else None)  # noqa: E731
    elif suf == ".parquet":
        writer = lambda p: df.to_parquet(p, index=False)  # noqa: E731
    else:
        writer = lambda p: df.to_excel(p, index=False, engine="openpyxl")  # noqa: E731
    try:
        atomic_write(path, writer)
    except ImportError as exc:
        raise SchemaError(f"cannot write {suf} here ({exc}); install h2dlab[notebooks] or use .csv") from None
    if env is not None:
        write_env(env, env_path(path))
    return path


def write_env(env: dict[str, Any], path: str | Path) -> None:
    text = json.dumps(env, indent=2, sort_keys=True, default=str) + "\n"
    atomic_write(Path(path), lambda p: Path(p).write_text(text))


def read_env(path: str | Path) -> dict[str, Any] | None:
    """The fingerprint beside a table, or None if there is none."""
    p = env_path(path)
    if not p.exists():
        return None
    try:
        return json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SchemaError(f"{p}: not a readable env.json ({exc})") from None


def read(path: str | Path) -> pd.DataFrame:
    """Read and validate a table; its fingerprint (if any) is in ``df.attrs['env']``.

    A CSV whose last line was cut off mid-write (an interrupted run) is read up to
    the last whole line.

    Raises
    ------
    SchemaError
        If the file is missing, unreadable, not a measurement table, or written by a
        different schema version.
    """
    path = Path(path)
    if not path.exists():
        raise SchemaError(f"{path}: no such file")
    suf = suffix_of(path)
    try:
        if suf in (".csv", ".csv.gz"):
            df = pd.read_csv(io.StringIO(_whole_lines(path, suf)), keep_default_na=True)
        elif suf == ".parquet":
            df = pd.read_parquet(path)
        elif suf == ".xlsx":
            df = pd.read_excel(path, engine="openpyxl")
        else:
            raise SchemaError(f"{path}: unknown extension; h2dlab reads {', '.join(SUFFIXES)}")
    except SchemaError:
        raise
    except ImportError as exc:
        raise SchemaError(f"{path}: cannot read {suf} here ({exc}); install h2dlab[notebooks]") from None
    except Exception as exc:  # noqa: BLE001 - any parser failure is a bad file, said in one line
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SchemaError(f"{path}: not a readable {suf} table ({first})") from None
    env = read_env(path)
    if env is not None and env.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
        raise SchemaError(
            f"{path}: written with table schema version {env.get('schema_version')}, "
            f"this h2dlab reads version {SCHEMA_VERSION}; re-run the measurement"
        )
    df = validate(df, source=str(path))
    df.attrs["env"] = env
    return df


def _whole_lines(path: Path, suf: str) -> str:
    """The CSV text up to its last newline: a row cut off mid-write is dropped."""
    if suf == ".csv.gz":
        with gzip.open(path, "rt", newline="") as fh:
            text = fh.read()
    else:
        with open(path, newline="") as fh:
            text = fh.read()
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    return text


# --- recorded datasets -------------------------------------------------------------

#: name -> (folder under data/, one-line description)
DATASETS: dict[str, tuple[str, str]] = {
    "forum_a100": (
        "forum_a100",
        "the forum thread's published A100 table (210 sizes x 3 columns, host clock, one shot each)",
    ),
    "h200_forum": (
        "h200_forum",
        "the forum protocol re-run by `h2dlab forum` on an H200: 3 runs in size order, 1 shuffled",
    ),
    "h200_sweep": (
        "h200_sweep",
        "every strategy, 1 KiB - 4 GiB plus the forum's sizes, shuffled, repeated, on an H200",
    ),
    "h200x2_concurrent": (
        "h200x2_concurrent",
        "1 then 2 H200s copying at once on a 2-GPU host: pinned_reuse, pageable, staged, 64 MiB - 1 GiB",
    ),
    "h200_allocator": (
        "h200_allocator",
        "allocator experiments on an H200: host cache warm/emptied, cudaHostRegister conf, empty_cache",
    ),
}


#: Recorded timelines (not measurement tables): name -> (folder, description)
TIMELINES: dict[str, tuple[str, str]] = {
    "h200_overlap": (
        "h200_overlap",
        "timelines of a 256 MiB copy beside bf16 matrix products on an H200 (one vs two streams, pinned vs pageable)",
    ),
}


def timeline(name: str) -> pd.DataFrame:
    """Load an overlap timeline by name or folder; its fingerprint is in ``attrs['env']``."""
    folder = DATA_DIR / TIMELINES[name][0] if name in TIMELINES else Path(name)
    paths = sorted(folder.glob("*.csv*")) if folder.is_dir() else [folder]
    if not paths or not paths[0].exists():
        raise SchemaError(f"no timeline at {folder}")
    df = pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)
    need = {"scenario", "rep", "op", "start_ms", "end_ms", "host_return_ms"}
    if not need <= set(df.columns):
        raise SchemaError(
            f"{folder}: not an overlap timeline (missing {', '.join(sorted(need - set(df.columns)))})"
        )
    df.attrs["env"] = read_env(paths[0])
    df.attrs["dataset"] = name
    return df


def names() -> dict[str, str]:
    """Recorded datasets that are present, with a one-line description each."""
    found = {
        n: desc
        for n, (folder, desc) in {**DATASETS, **TIMELINES}.items()
        if (DATA_DIR / folder).is_dir() and any(_tables(DATA_DIR / folder))
    }
    return found


def _tables(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if suffix_of(p) in SUFFIXES)


def load(name: str) -> pd.DataFrame:
    """Load a recorded dataset by name, or any table or folder of tables by path.

    Every run's fingerprint is in ``df.attrs['envs']`` (run_id -> env dict), and the
    dataset name in ``df.attrs['dataset']``.

    Raises
    ------
    SchemaError
        For an unknown name (the message lists the valid ones) or a bad file.
    """
    if name == "forum_a100":
        return load_forum_a100()
    if name in DATASETS:
        folder = DATA_DIR / DATASETS[name][0]
        if not folder.is_dir() or not _tables(folder):
            raise SchemaError(f"dataset {name!r} has not been recorded in {folder}")
    else:
        folder = Path(name)
        if not folder.exists():
            known = ", ".join(n for n in names() if n not in TIMELINES) or "none"
            raise SchemaError(f"unknown dataset {name!r}: give a recorded dataset ({known}) or a path")
    paths = [folder] if folder.is_file() else _tables(folder)
    if not paths:
        raise SchemaError(f"{folder}: holds no measurement table ({', '.join(SUFFIXES)})")
    frames, envs, run_names = [], {}, {}
    for p in paths:
        df = read(p)
        for rid in df["run_id"].unique():
            envs[rid] = df.attrs.get("env")
            run_names[rid] = p.name[: -len(suffix_of(p))]
        frames.append(df)
    out = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    out.attrs["envs"] = envs
    out.attrs["run_names"] = run_names
    out.attrs["dataset"] = name
    return out


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
    """``benchmarks/results/<name>.json`` as written by benchmarks/bench_transfer.py."""
    p = DATA_DIR.parent / "benchmarks" / "results" / f"{name}.json"
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


def empty_table() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})
