"""The rows an analysis may use: the columns it needs (``MODEL_COLUMNS``), the check
that refuses a table it cannot trust (``check_values``), the time per row (``value_ms``:
CUDA events, else the host clock) and the rows a model learns from (``timed``).

:mod:`h2dlab.explain.model` and every analysis module build on these; ``model`` re-exports them.
No torch here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from h2dlab.recording.schema import as_bool, is_blank

__all__ = [
    "MEASURED_COLUMNS",
    "MODEL_COLUMNS",
    "TIMING_COLUMNS",
    "check_values",
    "column",
    "normalised",
    "number",
    "timed",
    "value_ms",
]

#: Columns a model reads; fit() and medians() refuse a table without them.
MODEL_COLUMNS = ("run_id", "strategy", "size_bytes", "warmup", "wall_ms", "event_ms", "error")
#: Numeric columns every model reads: no measured row may hold text in them.
TIMING_COLUMNS = ("size_bytes", "wall_ms", "event_ms")
#: Numeric columns that no measured row may hold a negative or infinite value in.
MEASURED_COLUMNS = (
    "size_bytes",
    "wall_ms",
    "event_ms",
    "host_allocs",
    "device_allocs",
    "minflt",
    "majflt",
    "cpu_ms",
    "gc_count",
    "sm_clock_mhz",
    "gpu_procs",
)


def check_values(df: pd.DataFrame, required: tuple[str, ...] = MODEL_COLUMNS) -> None:
    """Refuse a table an analysis cannot trust, naming the column.

    Parameters
    ----------
    df
        The table to check.
    required
        Columns it must have (default :data:`MODEL_COLUMNS`).

    Raises
    ------
    TypeError
        ``df`` is not a DataFrame.
    ValueError
        A ``required`` column is missing, or a row without an error holds a negative or
        infinite value in one of ``MEASURED_COLUMNS`` (NaN means "not measured" and is
        allowed; so does a value that is not a number, except in ``TIMING_COLUMNS``).
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"expected a pandas DataFrame (a measurement table), got {type(df).__name__}")
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ValueError(f"not a measurement table: missing column(s) {', '.join(missing)}")
    ok = df["error"] == "" if "error" in df.columns else pd.Series(True, index=df.index)
    for col in MEASURED_COLUMNS:
        if col not in df.columns:
            continue
        raw = df.loc[ok, col]
        x = pd.to_numeric(raw, errors="coerce").astype(float)
        if pd.api.types.is_numeric_dtype(raw.dtype):  # no text to find (and no str copy)
            text = pd.Series(False, index=raw.index)
        else:
            text = x.isna() & raw.notna() & (raw.astype(str).str.strip() != "")
        if col in TIMING_COLUMNS and text.any():  # the times and sizes every model reads
            first = x.index[text.to_numpy()][0]
            raise ValueError(
                f"column {col!r} holds {int(text.sum())} value(s) that are not numbers in rows without an "
                f"error (first at index {first!r}: {raw[first]!r}): fix or drop those rows"
            )
        bad = np.isinf(x) | (x < 0)
        if bad.any():
            first = x.index[bad.to_numpy()][0]
            raise ValueError(
                f"column {col!r} holds {int(bad.sum())} negative or infinite value(s) in rows without "
                f"an error (first at index {first!r}: {x[first]!r}); a measurement cannot be negative "
                f"or infinite: fix or drop those rows"
            )


def value_ms(df: pd.DataFrame) -> pd.Series:
    """The timing to analyse per row: CUDA events where measured, else the host clock.

    Parameters
    ----------
    df
        A measurement table with ``event_ms`` and ``wall_ms``.

    Returns
    -------
    pandas.Series
        Milliseconds per row, indexed like ``df``.
    """
    return df["event_ms"].where(df["event_ms"].notna(), df["wall_ms"])


def timed(df: pd.DataFrame) -> pd.DataFrame:
    """Rows a model may learn from: not warm-ups, no error, a positive time.

    Parameters
    ----------
    df
        A measurement table with ``warmup``, ``error``, ``event_ms`` and ``wall_ms``.

    Returns
    -------
    pandas.DataFrame
        The rows of ``df`` that pass, unchanged.
    """
    v = value_ms(df)
    return df[(~df["warmup"]) & (df["error"] == "") & (v > 0)]


def number(x: object) -> float:
    """``x`` as a float; NaN when it is None, missing or not a number (an evidence column
    a table lacks, read with ``row.get(name)``, reads as NaN: its rule is then unavailable).

    Parameters
    ----------
    x
        A cell of a table row, or None.

    Returns
    -------
    float
    """
    try:
        return float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return np.nan


def column(df: pd.DataFrame, name: str) -> pd.Series:
    """A column of ``df`` as floats: NaN where the table lacks it, and where a value is
    not a number (a table built by hand; :func:`check_values` lets such a value through as
    not measured, like NaN, and so does :func:`number`).

    Parameters
    ----------
    df
        A measurement table.
    name
        The column.

    Returns
    -------
    pandas.Series
        float64, on ``df``'s index.
    """
    if name not in df.columns:
        return pd.Series(np.nan, index=df.index)
    return pd.to_numeric(df[name], errors="coerce").astype(float)


def normalised(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` as the analysis reads it, or a ValueError saying what to fix: a table built in
    pandas (``pd.read_csv``, ``pd.concat``) rather than read by ``datasets.read``.

    A missing ``error`` (NaN, as ``pd.read_csv`` reads an empty one, or its text "nan") means no error;
    ``warmup`` written as text (``"True"``/``"False"``, 1/0) and numbers stored as text
    in :data:`MEASURED_COLUMNS` are read as such. Refused: an index that is not unique
    flat labels, repeated column names, an ``error`` column of numbers, a ``warmup`` that
    is no boolean, sizes that are booleans, rows without a ``run_id``, and a row that
    repeats another in every column. A table that needs none of this is returned as is.
    """
    if not isinstance(df, pd.DataFrame):
        return df  # check_values says what it should be
    idx = df.index
    flat = not isinstance(idx, pd.MultiIndex) and idx.dtype != bool and not idx.hasnans
    if not flat or not idx.is_unique or (idx.dtype == object and any(isinstance(i, tuple) for i in idx)):
        why = "repeats" if flat and not idx.is_unique else "is not unique flat labels"
        raise ValueError(
            f"the table's index {why} (pd.concat of tables keeps each one's index): join them with "
            "pd.concat([...], ignore_index=True), or call df.reset_index(drop=True)"
        )
    if isinstance(df.columns, pd.MultiIndex):
        raise ValueError(
            "the table's columns have several levels: give one name per column (df.columns = [...])"
        )
    if not df.columns.is_unique:
        twice = sorted({str(c) for c in df.columns[df.columns.duplicated()]})
        raise ValueError(f"the table names column(s) {', '.join(twice)} twice: keep one of each")
    fixes: dict[str, pd.Series] = {}
    if "error" in df.columns:
        err = df["error"]
        if pd.api.types.is_numeric_dtype(err.dtype) or err.dtype == object:  # text dtypes hold none
            numeric = err.map(lambda v: isinstance(v, (int, float, np.number)) and not pd.isna(v)).astype(
                bool
            )
            if numeric.any():  # bools are ints too
                raise ValueError(
                    f"column 'error' holds numbers ({err[numeric].iloc[0]!r}): it holds each failed "
                    "copy's error text, empty for none"
                )
        text = err.astype(object).where(err.notna(), "").astype(str)
        none = text.str.strip().isin(["", "nan", "None", "<NA>"])  # what NaN turns into as text: no error
        if err.isna().any() or (none & (text != "")).any():
            fixes["error"] = text.where(~none, "")
    if "warmup" in df.columns and df["warmup"].dtype != bool:
        w = df["warmup"].map(as_bool)
        if w.isna().any():
            bad = df["warmup"][w.isna()].iloc[0]
            raise ValueError(f"column 'warmup' holds {bad!r}, not a boolean: write True or False")
        fixes["warmup"] = w.astype(bool)
    size = df["size_bytes"] if "size_bytes" in df.columns else pd.Series(dtype=float)
    if pd.api.types.is_bool_dtype(size.dtype) or (
        size.dtype == object and size.map(lambda v: isinstance(v, (bool, np.bool_))).astype(bool).any()
    ):
        raise ValueError("column 'size_bytes' holds booleans: it holds each copy's size in bytes")
    for col in MEASURED_COLUMNS:
        if col in df.columns and not pd.api.types.is_numeric_dtype(df[col].dtype):
            raw = df[col].where(~is_blank(df[col]))  # a blank cell is not measured
            x = pd.to_numeric(raw, errors="coerce")
            if (x.notna() | raw.isna()).all():  # every value a number (check_values names others)
                fixes[col] = x.astype(float)
    if "run_id" in df.columns and df["run_id"].isna().any():
        n = int(df["run_id"].isna().sum())
        raise ValueError(f"column 'run_id' is empty in {n} row(s): every copy belongs to a run")
    out = df.assign(**fixes) if fixes else df
    few = [c for c in ("run_id", "order") if c in out.columns]  # unique there: unique everywhere
    try:
        if few and not out.duplicated(subset=few, keep="first").any():
            return out
        same = out.duplicated(keep="first")
    except TypeError:  # a column of lists or dicts: compare their text
        same = out.astype(str).duplicated(keep="first")
    if same.any():
        i = out.index[same.to_numpy()][0]
        raise ValueError(
            f"row {i!r} repeats an earlier row in every column: a table holds each copy once "
            "(df.drop_duplicates())"
        )
    return out
