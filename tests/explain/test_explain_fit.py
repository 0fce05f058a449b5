"""explain's "the straight line fits poorly" warning (cli_explain.judged_fits): the far test
compares the measured GB/s at a run's largest size with the GB/s the fitted line predicts
at that size (overhead included), never with the line's asymptotic bandwidth, which a run
of small copies cannot reach. Synthetic tables are named synthetic; the recorded ones pin
which runs data/h200/idle and data/h200/sweep warn about."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.cli.explain import FAR_FROM_MEASURED, POOR_FIT_ERR, judged_fits, load_source
from tests.explain.test_outliers_synthetic import timed_columns

MIB = 2**20


def synthetic(sizes, ms_of, reps: int = 5, noise=None) -> pd.DataFrame:
    """A synthetic pinned_reuse run: ``reps`` copies of each size, ``ms_of(size)`` ms each,
    times ``1 + noise[i]`` for row i when ``noise`` is given."""
    size = np.tile(np.asarray(sizes, np.int64), reps)
    ms = np.array([ms_of(float(s)) for s in size])
    if noise is not None:
        ms = ms * (1 + np.asarray(noise, float))
    strategy = np.full(len(size), "pinned_reuse", dtype=object)
    t_s = np.cumsum(ms) / 1e3
    return pd.DataFrame(timed_columns("synthetic", strategy, size, t_s, ms, ms))


def line(overhead_us: float, gbps: float):
    return lambda s: overhead_us / 1e3 + s / (gbps * 1e6)


def one(df) -> pd.Series:
    f = judged_fits(df, n_boot=0)
    assert len(f) == 1
    return f.iloc[0]


def test_a_perfect_line_with_a_small_largest_size_is_not_warned():
    # idle's shape: sizes up to 1 MiB, 44 us of overhead, 50 GB/s: 1 MiB moves at ~16 GB/s.
    f = one(synthetic([2**k for k in range(10, 21)], line(44, 50)))
    assert f.gbps == pytest.approx(50, rel=1e-6) and f.overhead_us == pytest.approx(44, rel=1e-6)
    want = MIB / (44e-6 + MIB / 50e9) / 1e9  # 16.14 GB/s
    assert f.measured_gbps == pytest.approx(want, rel=1e-9)
    assert f.predicted_gbps == pytest.approx(want, rel=1e-6)
    assert f.largest_size_bytes == MIB and f.measured_gbps < f.gbps / 3
    assert not f.poor_fit and f.warning == ""


def test_large_copies_far_below_the_line_are_warned_though_the_median_error_is_small():
    sizes = [2**k for k in range(10, 31, 2)]  # 1 KiB .. 1 GiB, 11 sizes
    good = line(20, 50)
    f = one(synthetic(sizes, lambda s: good(s) * (3 if s == 2**30 else 1)))
    assert f.median_abs_rel_err <= POOR_FIT_ERR  # so the far test is what warns
    assert f.measured_gbps == pytest.approx(2**30 / good(2**30) / 1e6 / 3, rel=1e-9)
    assert f.predicted_gbps / f.measured_gbps > FAR_FROM_MEASURED
    assert f.poor_fit
    assert (
        f"the fitted line predicts {f.predicted_gbps:.1f} GB/s at 1 GiB, measured {f.measured_gbps:.1f} GB/s"
        in f.warning
    )
    assert f.warning.startswith("synthetic pinned_reuse: the straight line fits poorly (")


def test_constant_timings_are_not_warned_with_0_percent_error():
    # A zero slope: the line's bandwidth is enormous, but at each size it predicts what was measured.
    f = one(synthetic([2**k for k in range(10, 21)], lambda s: 0.05))
    assert f.median_abs_rel_err < 1e-4 and f.gbps > 1e4
    assert f.predicted_gbps == pytest.approx(MIB / 0.05e-3 / 1e9, rel=1e-4)
    assert f.measured_gbps == pytest.approx(MIB / 0.05e-3 / 1e9, rel=1e-12)
    assert not f.poor_fit and f.warning == ""


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 2**33), min_size=2, max_size=8, unique=True),
    overhead_us=st.floats(1, 2000),
    gbps=st.floats(0.5, 500),
    noise=st.lists(st.floats(-0.05, 0.05), min_size=24, max_size=24),
)
def test_a_line_plus_small_noise_is_never_warned(sizes, overhead_us, gbps, noise):
    f = one(synthetic(sizes, line(overhead_us, gbps), reps=3, noise=noise[: 3 * len(sizes)]))
    assert f.median_abs_rel_err < POOR_FIT_ERR
    assert 1 / FAR_FROM_MEASURED < f.measured_gbps / f.predicted_gbps < FAR_FROM_MEASURED
    assert not f.poor_fit and f.warning == ""


def warned(source: str) -> pd.DataFrame:
    f = judged_fits(load_source(source), n_boot=0)
    return f[f.poor_fit].set_index(["run", "strategy"])


def test_h200_idle_warns_exactly_the_runs_whose_median_error_is_above_10_percent():
    f = judged_fits(load_source("data/h200/idle"), n_boot=0)
    assert len(f) == 8 and set(f.largest_size_bytes) == {MIB}
    # At 1 MiB every line predicts what was measured (within 3 %), below its asymptote: only
    # the median error can make these fits poor (the recording at 250f304: 5 of 8 runs' lines
    # missed their small copies by a median 10.2-12.7 %; the one at b95e09d: 1 of 8, 13 %; the
    # one at 66f20f2: 7 of 8, 12-28 %). The pinned runs' 1 MiB copies are far below their
    # asymptote (under half of it at 66f20f2 and 5cb3034); the pageable runs' came within 1.33x
    # of theirs at 5cb3034 (1.43x and more at 66f20f2).
    assert ((f.measured_gbps / f.predicted_gbps - 1).abs() < 0.03).all()
    assert (f.measured_gbps < f.gbps / 1.3).all()
    pinned = f.strategy == "pinned_reuse"
    assert (f.measured_gbps[pinned] < f.gbps[pinned] / 2).all()
    w = f[f.poor_fit]
    assert set(zip(w.run, w.strategy, strict=True)) == set(
        zip(
            f.run[f.median_abs_rel_err > POOR_FIT_ERR],
            f.strategy[f.median_abs_rel_err > POOR_FIT_ERR],
            strict=True,
        )
    )
    assert len(w) >= 1
    for r in w.itertuples():  # each warning states its run's own figures
        assert (
            f"({r.median_abs_rel_err:.0%} median error; the fitted line predicts {r.predicted_gbps:.1f} GB/s "
            f"at 1 MiB, measured {r.measured_gbps:.1f} GB/s)" in r.warning
        )


def test_h200_sweep_still_warns_staged_whose_large_copies_beat_the_line():
    f = judged_fits(load_source("data/h200/sweep"), n_boot=0)
    w = f[f.poor_fit].set_index(["run", "strategy"])
    far = (f.predicted_gbps / f.measured_gbps).clip(lower=0)
    poor = (f.median_abs_rel_err > POOR_FIT_ERR) | (far > FAR_FROM_MEASURED) | (far < 1 / FAR_FROM_MEASURED)
    assert set(w.index) == set(zip(f.run[poor], f.strategy[poor], strict=True))
    # sweep/pow2 (cells shuffled) is retired; its staged line was 3.3x below at 2 GiB. In the
    # interleaved run the staged line's prediction at 2 GiB is its asymptote (within 1 %), well below
    # the measurement: the staged copy's rate climbs past what its small copies' line says.
    staged = w.loc[("pow2-interleaved", "staged")]
    assert staged.predicted_gbps == pytest.approx(staged.gbps, rel=0.01)
    # far enough below the measurement to be warned of (the recording at 66f20f2: 2.3x; d332ea1's: 1.79x)
    assert staged.measured_gbps / staged.predicted_gbps > FAR_FROM_MEASURED
    assert (
        f"the fitted line predicts {staged.predicted_gbps:.1f} GB/s at 2 GiB, measured {staged.measured_gbps:.1f} GB/s"
        in staged.warning
    )
    # The recording at b95e09d: every strategy of the interleaved run but pinned_reuse fits its
    # line by a median error above 10 % (pin_then_copy 22 %, staged 35 %; at 250f304 pinned_reuse
    # too, 16 %); the one at 66f20f2: all six, pinned_reuse 15 %.
    assert staged.median_abs_rel_err > POOR_FIT_ERR
