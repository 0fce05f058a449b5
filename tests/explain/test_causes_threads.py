"""The ``other_threads`` rule (h2dlab.explain.causes_threads) on rows and neighbours built by hand
(synthetic: made-up numbers, not measured): its readers of the other threads' CPU time,
each threshold at its boundary and its evidence sentences word for word."""

import numpy as np
import pandas as pd
import pytest

from h2dlab.explain.causes_threads import MIN_OTHERS_RATIO, others_cause, others_ms, others_share, usual_share

#: The candidates both sentences name.
CANDIDATES = (
    "PyTorch's intra-op threads, which can run the host side of pin_memory(), torch.cat and CPU "
    "tensor copies, and CUDA's own threads"
)


def _case(**kw) -> tuple[pd.Series, pd.Series, float]:
    """A synthetic flagged copy at both thresholds: 10 ms expected, 20 ms measured (wall 20),
    the other threads 42 ms of CPU over a 21 ms window (2.0 CPUs' worth, twice the usual
    1.0 of its size; 1.0 CPU beyond it for 20 ms covers the 10 ms extra). Keyword
    arguments replace fields of the row or the neighbours; None drops the field."""
    row = {
        "expected_ms": 10.0, "wall_ms": 20.0, "cpu_ms": 20.0, "proc_cpu_ms": 62.0,
        "others_cpu_ms": 42.0, "others_window_ms": 21.0, "busiest_cpu_ms": 30.0,
        "busiest_thread": "worker-3", "run_delay_ms": 0.0,
    }  # fmt: skip
    ctx = {"others_cell": 1.0, "others_typ": 0.5}
    val = kw.pop("val", 20.0)
    for k, v in kw.items():
        (row if k in row else ctx)[k] = v
    row = {k: v for k, v in row.items() if v is not None}
    ctx = {k: v for k, v in ctx.items() if v is not None}
    return pd.Series(row), pd.Series(ctx, dtype=float), val


def _said(**kw) -> str | None:
    row, ctx, val = _case(**kw)
    found = others_cause(row, ctx, val, "SLOW")
    assert found is None or found[0] == "other_threads"
    return None if found is None else found[1]


def test_exact_clocks_sentence_word_for_word():
    assert MIN_OTHERS_RATIO == 2.0
    assert _said() == (
        "SLOW; other threads of the process ran 42.00 ms of CPU in the 21.00 ms around it (each thread's "
        "own CPU clock, read just before and just after the copy's 20.00 ms), 2.0 CPUs' worth, where for "
        "copies of this size they run 1.0 CPUs' worth (median); the busiest, a thread named 'worker-3', "
        f"ran 30.00 ms of it: the copy ran while they were far busier than usual ({CANDIDATES} run in "
        "this process)"
    )


def test_process_clock_sentence_word_for_word():
    # No exact clocks (schema 3): the process clock less the timing thread's, 40 ms over wall.
    said = _said(others_cpu_ms=None, others_window_ms=None, busiest_cpu_ms=None, busiest_thread=None)
    assert said == (
        "SLOW; other threads of the process ran during the copy: the process's CPU clock, less the "
        "timing thread's, advanced 42.00 ms in its 20.00 ms by the host clock, 2.1 CPUs' worth, where "
        "for copies of this size it advances 1.0 CPUs' worth (median); Linux adds another thread's "
        "running time to that clock at a scheduler tick or when the thread stops running, so the amount "
        "can include time from before the copy, and a longer copy is likelier to span a tick; which "
        f"threads, the table cannot say ({CANDIDATES} are candidates)"
    )
    # A window recorded beside the process clock is not its window: still over wall.
    assert "42.00 ms in its 20.00 ms by the host clock, 2.1 CPUs' worth" in _said(
        others_cpu_ms=np.nan, others_window_ms=10.0
    )


def test_the_usual_share_is_of_this_size_else_the_group():
    assert "where for its neighbours they run 0.5 CPUs' worth (median)" in _said(others_cell=np.nan)
    assert "where for its neighbours they run 0.5 CPUs' worth (median)" in _said(others_cell=None)
    assert _said(others_cell=np.nan, others_typ=np.nan) is None
    assert usual_share(pd.Series({"others_cell": 3.0, "others_typ": 2.0})) == (3.0, "copies of this size")
    got = usual_share(pd.Series(dtype=float))
    assert np.isnan(got[0]) and got[1] == "its neighbours"


def test_twice_the_usual_share_boundary():
    assert _said() is not None and _said(others_cell=1.001) is None  # rate 2.0 = 2 x 1.0
    assert _said(others_cpu_ms=41.99) is None


def test_cpu_beyond_the_usual_covers_the_extra_boundary():
    # 1.0 CPU beyond the usual share for the 20 ms wall: 20 ms, so an extra of 20 ms.
    assert _said(val=30.0) is not None and _said(val=30.01) is None


def test_no_other_thread_cpu_is_never_the_cause():
    # Nothing ran beside it: not the cause, even against a usual share of 0 and no extra.
    assert _said(others_cpu_ms=0.0, others_cell=0.0, val=10.0) is None
    assert _said(others_cpu_ms=np.nan, proc_cpu_ms=np.nan) is None


def test_span_is_the_window_where_it_is_recorded():
    # A window of 0 or unknown: the exact CPU time over wall (42 / 20 = 2.1 CPUs' worth).
    for window in (0.0, np.nan, None):
        assert "ran 42.00 ms of CPU in the 20.00 ms around it" in _said(others_window_ms=window)
        assert "20.00 ms), 2.1 CPUs' worth" in _said(others_window_ms=window)
    # Over its 21 ms window it is 2.0, exactly twice the usual: over wall it is more.
    assert _said(others_window_ms=0.0, others_cell=1.04) is not None
    assert _said(others_cell=1.04) is None


def test_the_sentence_names_the_busiest_and_the_wait_only_when_known():
    assert "(median); the busiest, a thread named 'worker-3', ran 30.00 ms of it: " in _said()
    for kw in ({"busiest_thread": ""}, {"busiest_thread": None}, {"busiest_cpu_ms": np.nan}):
        assert "1.0 CPUs' worth (median): the copy ran while" in _said(**kw), kw
    waited = "ran 30.00 ms of it; the timing thread itself waited 1.50 ms to run: the copy ran"
    assert waited in _said(run_delay_ms=1.5)
    assert "ran 30.00 ms of it; the timing thread itself waited 0.50 ms to run: the copy" in _said(
        run_delay_ms=0.5
    )
    for rd in (0.0, np.nan, None):
        assert "waited" not in _said(run_delay_ms=rd)
    inexact = _said(others_cpu_ms=None, run_delay_ms=1.5)
    assert (
        "it advances 1.0 CPUs' worth (median); the timing thread itself waited 1.50 ms to run; Linux"
        in inexact
    )


def test_others_ms_reads_the_exact_clock_first():
    assert others_ms(pd.Series({"others_cpu_ms": 3.0, "proc_cpu_ms": 9.0, "cpu_ms": 1.0})) == (3.0, True)
    assert others_ms(pd.Series({"others_cpu_ms": np.nan, "proc_cpu_ms": 9.0, "cpu_ms": 1.5})) == (7.5, False)
    assert others_ms(pd.Series({"proc_cpu_ms": 1.0, "cpu_ms": 1.5})) == (0.0, False)  # at least 0
    for row in ({"proc_cpu_ms": 9.0}, {"cpu_ms": 1.0}, {}):
        got = others_ms(pd.Series(row, dtype=float))
        assert np.isnan(got[0]) and got[1] is False, row


def test_others_share_per_row():
    df = pd.DataFrame(
        {
            "wall_ms": [2.0, 2.0, 2.0, 2.0, 2.0],
            "cpu_ms": [1.0, 1.0, 3.0, 1.0, np.nan],
            "proc_cpu_ms": [5.0, 5.0, 2.0, 9.0, 9.0],
            "others_cpu_ms": [6.0, np.nan, np.nan, 4.0, np.nan],
            "others_window_ms": [3.0, 3.0, np.nan, 0.0, np.nan],
        }
    )
    got = others_share(df)
    assert got.tolist()[:3] == [2.0, 2.0, 0.0]  # exact over window; else (proc - cpu) / wall, >= 0
    assert got[3:].isna().all()  # a window of 0; no CPU time of the timing thread
    assert others_share(df[["wall_ms", "cpu_ms", "proc_cpu_ms"]]).tolist()[:3] == [2.0, 2.0, 0.0]
    assert others_share(df[["wall_ms"]]).isna().all()
    assert got.index.equals(df.index)


def test_others_share_keeps_the_tables_labels():
    df = pd.DataFrame({"wall_ms": [4.0], "cpu_ms": [1.0], "proc_cpu_ms": [3.0]}, index=[7])
    assert others_share(df).to_dict() == {7: pytest.approx(0.5)}
