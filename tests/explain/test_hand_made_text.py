"""A table built by hand (not read by datasets, which refuses text in a number column)
with text in a column: outliers.explain reads text in an evidence column as not measured,
as check_values documents, where it raised pandas' 'could not convert string to float';
text in a time or size column is refused naming the column, where it raised a TypeError
from a comparison. Synthetic tables only (tests/explain/test_outliers_crowded.py's builder)."""

import numpy as np
import pytest

from h2dlab.explain import outliers, rows
from tests.explain.test_outliers_crowded import synthetic_crowded_run

EVIDENCE = ("others_cpu_ms", "others_window_ms", "busiest_cpu_ms", "issue_ms", "run_delay_ms", "cpu_ms",
            "gpu_procs", "proc_cpu_ms")  # fmt: skip


@pytest.fixture(scope="module")
def run():
    df, _ = synthetic_crowded_run(1)
    return df, outliers.explain(df)


@pytest.mark.parametrize("col", EVIDENCE)
def test_text_in_an_evidence_column_reads_as_not_measured(run, col):
    df, _ = run
    with_text, with_nan = df.copy(), df.copy()
    with_text[col] = with_text[col].astype(object)
    with_text.loc[5, col] = "n/a"
    with_nan.loc[5, col] = np.nan
    got, want = outliers.explain(with_text), outliers.explain(with_nan)
    assert list(got["cause"]) == list(want["cause"]) and list(got["evidence"]) == list(want["evidence"])


def test_column_reads_text_and_a_missing_column_as_nan(run):
    df, _ = run
    d = df[["wall_ms"]].astype(object)
    d.loc[3, "wall_ms"] = "x"
    got = rows.column(d, "wall_ms")
    assert got.dtype == float and np.isnan(got[3]) and got.drop(3).notna().all()
    assert rows.column(d, "nope").isna().all() and len(rows.column(d, "nope")) == len(d)


@pytest.mark.parametrize("col", ["wall_ms", "event_ms", "size_bytes"])
def test_text_in_a_time_or_size_is_refused_naming_the_column(run, col):
    df, _ = run
    d = df.copy()
    d[col] = d[col].astype(object)
    d.loc[7, col] = "fast"
    want = rf"^column '{col}' holds 1 value\(s\) that are not numbers in rows without an error \(first at index 7: 'fast'\)"
    with pytest.raises(ValueError, match=want):
        outliers.explain(d)
    d.loc[7, col] = " "  # blank: not measured, as NaN
    rows.check_values(d)
