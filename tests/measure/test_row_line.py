"""The partial file's rows are written by hand (``row_line.csv_line``), not by a one-row
DataFrame (about 1 ms of host work between two timed copies): the line must be the one
pandas writes, for every kind of value a row holds (Python and numpy 64-bit
numbers, booleans, None, text; the timer makes no float32)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.measure.row_line import csv_line

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**62), 2**62),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats().map(np.float64),
    st.integers(-1000, 1000).map(np.int64),
    st.booleans().map(np.bool_),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(VALUES, min_size=1, max_size=8))
def test_a_row_line_is_what_pandas_writes(values):
    assert csv_line(values) == pd.DataFrame([values], dtype=object).to_csv(index=False, header=False)


def test_a_row_line_quotes_commas_quotes_and_newlines():
    assert csv_line(["a,b", 'q"x', "two\nlines", np.nan, None, True, 0.1]) == (
        '"a,b","q""x","two\nlines",,,True,0.1\n'
    )
