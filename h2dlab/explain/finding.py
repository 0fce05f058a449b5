"""The shape of a claim: :class:`Finding` (a ``verdict`` sentence, a ``holds`` flag, the
numbers with their spread, the supporting table) and the small helpers every findings
module uses to build one: ``spread`` of a column, each run's ``first_rows``, the
``run_names`` a table carries, and ``size_text`` for a size in a sentence. :mod:`h2dlab.findings.claims` (which re-exports them),
:mod:`h2dlab.findings.advice` and the other claim modules build on these. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from h2dlab.units import fmt_bytes

__all__ = ["Finding", "copies", "extra_text", "first_rows", "run_names", "size_text", "spread"]


@dataclass(frozen=True)
class Finding:
    """A computed claim: ``values`` (numbers and their spread), ``holds`` (the claim's
    truth on this data), ``verdict`` (one sentence that says so) and the supporting
    ``table``."""

    verdict: str
    holds: bool
    values: dict[str, Any] = field(default_factory=dict)
    table: pd.DataFrame = field(default_factory=pd.DataFrame)

    def __str__(self) -> str:
        return self.verdict

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def _repr_markdown_(self) -> str:  # a notebook cell ending in a Finding shows its verdict
        # names in a verdict come from tables anyone can edit: no raw HTML renders from them
        from h2dlab.escape import md_inert_html

        return md_inert_html(self.verdict)


def spread(x: pd.Series | np.ndarray) -> dict[str, float]:
    """Median, quartiles, min, max and n of ``x`` (NaNs dropped).

    Parameters
    ----------
    x
        Numbers (a column or an array).

    Returns
    -------
    dict
        ``median``, ``q1``, ``q3``, ``min``, ``max`` (NaN when ``x`` holds no number) and ``n``.
    """
    v = pd.Series(np.asarray(x, float)).dropna()
    if v.empty:
        return {k: float("nan") for k in ("median", "q1", "q3", "min", "max")} | {"n": 0}
    return {
        "median": float(v.median()),
        "q1": float(v.quantile(0.25)),
        "q3": float(v.quantile(0.75)),
        "min": float(v.min()),
        "max": float(v.max()),
        "n": int(len(v)),
    }


def first_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The first executed row of each run (ties in ``order``: table order).

    Parameters
    ----------
    df
        A measurement table with ``run_id`` and ``order``.

    Returns
    -------
    pandas.DataFrame
        One row per run, as in ``df``.
    """
    return df.sort_values("order", kind="stable").groupby("run_id", sort=False).head(1)


def run_names(df: pd.DataFrame) -> dict[str, str]:
    """The names of the table's runs (``run_id`` -> name), from ``df.attrs["run_names"]``.

    Parameters
    ----------
    df
        A table from ``datasets.load`` (which sets the names) or a live run.

    Returns
    -------
    dict
        Empty when the table carries no names.
    """
    return df.attrs.get("run_names") or {}


def copies(n: int) -> str:
    """``1`` -> ``'1 copy'``, ``5`` -> ``'5 copies'``: how many rows a figure rests on."""
    return f"{int(n)} cop{'y' if int(n) == 1 else 'ies'}"


def size_text(n: float) -> str:
    """``1073741824`` -> ``'1 GiB'`` (binary units; :func:`h2dlab.units.fmt_bytes`, compact).

    Parameters
    ----------
    n
        A number of bytes.

    Returns
    -------
    str
        The size as a verdict writes it.
    """
    return fmt_bytes(n, compact=True)


def extra_text(extra: pd.Series, sizes: pd.Series) -> str:
    """ "Their extra time runs from A to B ms, on copies of X to Y." (one value said once)."""
    lo, hi = f"{extra.min():.2f}", f"{extra.max():.2f}"
    small, large = fmt_bytes(int(sizes.min())), fmt_bytes(int(sizes.max()))
    if len(extra) == 1:
        return f"Its extra time is {lo} ms, on a copy of {small}."
    time = f"is {lo} ms each" if lo == hi else f"runs from {lo} to {hi} ms"
    return f"Their extra time {time}, on copies of {small if small == large else f'{small} to {large}'}."
