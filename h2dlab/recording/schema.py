"""The measurement table's schema: its columns, their defaults, and ``validate()``.

Version 1 tables (the first session's datasets) have the ``REQUIRED`` columns; version 2
adds the ``ADDED_V2`` columns, version 3 the ``ADDED_V3`` columns (scheduler evidence), 4 and
5 the ``ADDED_V4`` and ``ADDED_V5`` columns (the other threads' CPU clocks and waits), which a reader fills with ``DEFAULTS`` when a table lacks them or leaves a cell empty (a
partial CSV written before the value was known). Version 6 adds no column: it marks
``measure``'s loop with at most ~0.2 ms of host work between timed copies, whose
``sm_clock_mhz``, ``gpu_procs`` and other-thread columns are NaN unless its spec says
``evidence: full`` (``timing.EVIDENCE``).
"""

from __future__ import annotations

import unicodedata

import numpy as np
import pandas as pd

__all__ = [
    "ADDED_V2",
    "ADDED_V3",
    "ADDED_V4",
    "ADDED_V5",
    "COLUMNS",
    "DEFAULTS",
    "DIRECTIONS",
    "KEY",
    "OPTIONAL_COLUMNS",
    "REQUIRED",
    "SchemaError",
    "empty_table",
    "validate",
]

#: The version 1 columns, in order: every table must have them (DESIGN.md).
REQUIRED: dict[str, str] = {
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
#: Columns schema version 2 adds; a table without them (version 1) reads with ``DEFAULTS``.
ADDED_V2: dict[str, str] = {
    "direction": "str",  # "h2d" or "d2h"; bidirectional runs give one row per direction
    "n_tensors": "int",  # tensors moved in this copy (a batch); 1 otherwise
    "minflt": "float",  # minor page faults during the copy (getrusage); NaN if unknown
    "majflt": "float",  # major page faults during the copy; NaN if unknown
    "cpu_ms": "float",  # the timing thread's CPU time during the copy, beside wall_ms
    "gc_count": "float",  # Python GC collections during the copy
    "sm_clock_mhz": "float",  # NVML SM clock after the copy; NaN if unknown
    "gpu_procs": "float",  # other processes using the GPU; NaN if unknown
}
#: Columns schema version 3 adds: how the timing thread fared with the scheduler during
#: the copy, and when the host had issued it; a table without them reads NaN.
ADDED_V3: dict[str, str] = {
    "run_delay_ms": "float",  # time the timing thread waited on a run queue (schedstat); NaN if unknown
    "nivcsw": "float",  # involuntary context switches of the timing thread (getrusage)
    "nvcsw": "float",  # voluntary context switches: the thread slept (a lock, I/O, a wait)
    "cpu_moved": "float",  # 1.0 if the thread ended the copy on another CPU than it began it on
    "proc_cpu_ms": "float",  # CPU time of every thread of the process (workers, CUDA's threads)
    "proc_faults": "float",  # page faults (minor + major) of every thread of the process
    "issue_ms": "float",  # host time until the timed call returned, before the final sync
    "gc_ms": "float",  # time in Python GC collections that ended during the copy (any thread)
}
#: Columns schema version 4 adds: what the process's other threads ran during the copy,
#: each from its own CPU clock (exact, where ``proc_cpu_ms`` lumps at scheduler ticks).
ADDED_V4: dict[str, str] = {
    "others_cpu_ms": "float",  # CPU time of every other thread of the process during the copy
    "others_window_ms": "float",  # host time the others_cpu_ms reads span (the copy and a little more)
    "busiest_cpu_ms": "float",  # ... of the one that ran most
    "busiest_thread": "str",  # its name (/proc/self/task/<tid>/comm); "" if none ran or unknown
    "n_threads": "float",  # how many other threads the process had
}
#: Columns schema version 5 adds: how long the other threads waited on a run queue during
#: the copy (a worker of a parallel copy that lost its CPU holds the copy open). Read just
#: around others_window_ms; the first schema-5 recording (data/h200, 2026-12-02) read them
#: inside it, which made that window about 0.35 ms longer on the H200.
ADDED_V5: dict[str, str] = {
    "others_wait_ms": "float",  # run-queue wait of every other thread around the copy (schedstat)
    "longest_wait_ms": "float",  # ... of the one other thread that waited longest
}
#: Every stored column and its kind, in the order tables are written.
COLUMNS: dict[str, str] = {**REQUIRED, **ADDED_V2, **ADDED_V3, **ADDED_V4, **ADDED_V5}
#: What a missing or empty version 2, 3 or 4 cell means.
DEFAULTS: dict[str, object] = {
    "direction": "h2d",
    "n_tensors": 1,
    **{c: np.nan for c, kind in {**ADDED_V2, **ADDED_V3, **ADDED_V4, **ADDED_V5}.items() if kind == "float"},
    "busiest_thread": "",
}
#: Columns a multi-GPU run adds; optional elsewhere.
OPTIONAL_COLUMNS: dict[str, str] = {"gpu": "int", "world": "int"}
DIRECTIONS = ("h2d", "d2h")
#: One timed copy per key: no two rows of a table may share these values (plus ``gpu``
#: and ``world`` where present: a multi-GPU run has one row per GPU for each copy).
KEY = ("run_id", "direction", "strategy", "size_bytes", "n_tensors", "rep", "warmup")

_TEXT_CHECKED = ("run_id", "strategy", "shape", "dtype", "direction", "busiest_thread")  # printable only
_BOOL_WORDS = {"true": True, "false": False, "1": True, "0": False, "1.0": True, "0.0": False}


class SchemaError(ValueError):
    """A file or frame is not a measurement table; the message says what is wrong (a file
    name or text in it shown, never obeyed: ``escape.terminal_text``, as ``UsageError``)."""

    def __init__(self, *args: object) -> None:
        from h2dlab.escape import terminal_text

        super().__init__(*(terminal_text(a) if isinstance(a, str) else a for a in args))


def _reject(source: str, raw: pd.Series, bad, problem: str, hint: str) -> None:
    """Raise naming the first offending row (0-based, header not counted) and column."""
    bad = np.asarray(bad, dtype=bool)
    if not bad.any():
        return
    i = int(np.flatnonzero(bad)[0])
    n = int(bad.sum())
    more = f" ({n - 1} more row{'s' if n > 2 else ''} like it)" if n > 1 else ""
    raise SchemaError(f"{source}: row {i}, column {raw.name}: {_show(raw.iloc[i])} {problem}{more}; {hint}")


def _not_a_number(raw: pd.Series) -> str:
    """The kind of a column that pandas would turn into numbers wrongly ("" if none): a time
    span or a date (parquet or Excel keep them typed). Booleans read as 1 and 0, which flag
    columns such as ``cpu_moved`` mean."""
    if pd.api.types.is_timedelta64_dtype(raw):
        return "time span"
    return "date" if pd.api.types.is_datetime64_any_dtype(raw) else ""


def _unprintable(text: str) -> bool:
    """Whether ``text`` holds a control character (C0, DEL, C1) or a Unicode format
    character (category Cf: a right-to-left override turns what follows around on screen)."""
    return any(unicodedata.category(c) in _HIDDEN and c != "\u200d" for c in text)


def _unprintable_each(v: pd.Series) -> dict[str, bool]:
    """:func:`_unprintable` of each distinct value of ``v``: a column of a million rows holds
    a few names, each looked at once."""
    return {text: _unprintable(text) for text in pd.unique(v)}


#: Control, format (but the zero-width joiner that joins emoji), line and paragraph separators.
_HIDDEN = ("Cc", "Cf", "Zl", "Zp")


def _show(v: object) -> str:
    text = repr(v.item() if isinstance(v, np.generic) else v)
    return text if len(text) <= 60 else text[:57] + "..."


def is_blank(v: pd.Series) -> np.ndarray:
    if v.dtype.kind in "fiub":  # numbers: only NaN is blank
        return v.isna().to_numpy()
    return (v.isna() | v.astype(str).str.strip().eq("")).to_numpy()


def as_bool(v: object) -> bool | None:
    """``v`` as a boolean (True/False, 1/0, their words in any case), or None when it is none."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, float, np.integer, np.floating)) and v in (0, 1):
        return bool(v)
    if isinstance(v, str):
        return _BOOL_WORDS.get(v.strip().lower())
    return None


def _coerce(out: pd.DataFrame, col: str, kind: str, source: str) -> None:
    raw = out[col]
    if kind == "str":
        v = raw.astype(object)
        v = v.where(v.notna(), "").astype(str)
        if col in DEFAULTS:
            v = v.where(v.str.strip() != "", DEFAULTS[col])
        if col in _TEXT_CHECKED:
            _reject(
                source,
                raw,
                v.map(_unprintable_each(v)),
                "holds a control character or an invisible format character",
                "a name is printable text: fix or drop that row",
            )
        if col == "strategy":  # printed as the row's name: "" or spaces would show as nothing
            _reject(
                source,
                raw,
                v.str.strip() == "",
                "is blank",
                "name the strategy (NA, null, nan read as missing)",
            )
        out[col] = v
    elif kind == "bool":
        if raw.dtype == bool:
            return
        v = raw.map(as_bool)
        _reject(source, raw, v.isna(), "is not a boolean", "write True or False (or 1 or 0)")
        out[col] = v.astype(bool)
    else:
        typed = _not_a_number(raw)  # to_numeric would read a timedelta as ns, a date as ns since 1970
        _reject(
            source, raw, np.full(len(raw), bool(typed)), f"is a {typed}, not a number", "store plain numbers"
        )
        x = pd.to_numeric(raw.where(~is_blank(raw), np.nan), errors="coerce")
        _reject(source, raw, x.isna() & ~is_blank(raw), "is not a number", "fix or drop that row")
        x = x.astype("float64")
        if col in DEFAULTS:
            x = x.fillna(DEFAULTS[col])
        _reject(source, raw, np.isinf(x), "is infinite", "a measurement is finite")
        _reject(source, raw, x < 0, "is negative", f"{col} cannot be below 0")
        if kind == "int":
            _reject(source, raw, x.isna(), "is empty", f"every row needs a {col}")
            _reject(source, raw, x != np.round(x), "is not a whole number", f"{col} counts")
            _reject(source, raw, x >= 2**53, "is too large", f"{col} is not a measurement")
            out[col] = x.astype("int64")
        else:
            out[col] = x


def validate(df: pd.DataFrame, *, source: str = "table") -> pd.DataFrame:
    """Check ``df`` against the schema and return a copy with the schema's dtypes.

    Tables of versions 1 to 4 are accepted: missing version 2, 3 and 4 columns (and empty
    cells in them) take ``DEFAULTS``. Columns outside the schema are kept as they are.

    Parameters
    ----------
    df
        A measurement table.
    source
        What to call it in messages (a file name).

    Returns
    -------
    pandas.DataFrame
        Every ``COLUMNS`` column present, with dtypes str, int64, float64 or bool.

    Raises
    ------
    SchemaError
        Naming the missing columns, or the row (0-based) and column of a value that
        cannot be a measurement: a time or counter that is negative or infinite, a
        boolean that is neither True nor False, a size that is not positive, a name
        with control characters, an unknown direction, a row that repeats another, or
        two rows for the same copy (``KEY``).
    """
    if not isinstance(df, pd.DataFrame):
        raise SchemaError(f"{source}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise SchemaError(
            f"{source} is not an h2dlab measurement table: missing column(s) {', '.join(missing)}"
        )
    out = df.copy()
    out.attrs = {}  # pandas deep-copies attrs on every operation: put them back at the end
    for col, default in DEFAULTS.items():
        if col not in out:
            out[col] = default
    for col, kind in {**COLUMNS, **OPTIONAL_COLUMNS}.items():
        if col in out:
            _coerce(out, col, kind, source)
    _reject(
        source,
        out["direction"],
        ~out["direction"].isin(DIRECTIONS),
        "is not a direction",
        f"use one of {', '.join(DIRECTIONS)}",
    )
    _reject(source, out["size_bytes"], out["size_bytes"] <= 0, "is not positive", "a copy moves bytes")
    _reject(source, out["n_tensors"], out["n_tensors"] < 1, "is below 1", "a copy moves a tensor")
    ok = out["error"] == ""
    _reject(
        source,
        out["wall_ms"],
        ok & out["wall_ms"].isna(),
        "is empty in a row without an error",
        "a successful copy has a wall time (or say why in error)",
    )
    _check_duplicates(out, source)
    out = out[list(COLUMNS) + [c for c in out.columns if c not in COLUMNS]]
    out.attrs = dict(df.attrs)
    return out


def _check_duplicates(out: pd.DataFrame, source: str) -> None:
    stored = [c for c in {**COLUMNS, **OPTIONAL_COLUMNS} if c in out]
    key = list(KEY) + [c for c in OPTIONAL_COLUMNS if c in out]
    twin = out.duplicated(subset=key, keep="first").to_numpy()
    if not twin.any():  # the key is among the stored columns: no row repeats them all either
        return
    same = out.duplicated(subset=stored, keep="first").to_numpy()
    for dup, what in ((same, "repeats row {j} in every column"), (twin, "is the same copy as row {j}")):
        if dup.any():
            i = int(np.flatnonzero(dup)[0])
            cols = stored if dup is same else key
            first = (out[cols] == out[cols].iloc[i]) | (out[cols].isna() & out[cols].iloc[i].isna())
            j = int(np.flatnonzero(first.all(axis=1).to_numpy())[0])
            ident = ", ".join(f"{c}={_show(out[c].iloc[i])}" for c in key)
            raise SchemaError(
                f"{source}: row {i} {what.format(j=j)} ({ident}); "
                "a table holds each timed copy once: drop the repeated row"
            )


def empty_table() -> pd.DataFrame:
    """A table with every column and no rows."""
    return pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})
