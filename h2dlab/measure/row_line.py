"""One row of a measurement table as one CSV line, written by hand: the partial file gets
a line per timed copy, and pandas' ``DataFrame([row]).to_csv()`` took about 1 ms of host
work between two timed copies (issue #30). The line is the one pandas writes."""

from __future__ import annotations

import csv
import io
from typing import Any

import numpy as np

__all__ = ["csv_line"]


def _cell(v: Any) -> Any:
    """One value as pandas' ``to_csv`` writes it: missing (None, NaN) empty, floats by
    their shortest round-trip repr, booleans as True/False, numpy scalars as Python's."""
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "True" if v else "False"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return "" if f != f else repr(f)
    return v


def csv_line(values: list[Any]) -> str:
    """One CSV line (``\\n``-terminated, minimal quoting) of ``values`` as
    ``pandas.DataFrame([values]).to_csv(index=False, header=False)`` would write it."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([_cell(v) for v in values])
    return buf.getvalue()
