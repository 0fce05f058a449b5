"""linefit.fit_lines (the bootstrap's many fits at once) against model.fit_line (scipy's
least_squares, one fit): the same Huber minimum, on synthetic (made-up) samples."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from h2dlab.explain import model
from h2dlab.explain.linefit import fit_lines


def _scipy_fit(size, ms):
    """The reference: scipy's least_squares with the Huber loss, as fit_line did before."""
    from scipy.optimize import least_squares

    ly = np.log(ms)
    order = np.argsort(size)
    a0 = max(float(np.median(ms[order[: max(1, len(ms) // 10)]])), 1e-6)
    big = order[-max(1, len(ms) // 10) :]
    b0 = max(float(np.median(ms[big] / size[big])), 1e-15)
    sol = least_squares(
        lambda p: np.log(np.exp(p[0]) + size * np.exp(p[1])) - ly,
        x0=[np.log(a0), np.log(b0)],
        loss="huber",
        f_scale=0.05,
    )
    return tuple(np.exp(sol.x))


def _sample(rng, overhead_ms, gbps, n=120, outliers=0.1):
    size = 2.0 ** rng.integers(10, 31, n)
    ms = (overhead_ms + size / (gbps * 1e6)) * np.exp(rng.normal(0, 0.03, n))
    slow = rng.random(n) < outliers
    ms[slow] *= rng.uniform(2, 20, slow.sum())  # spikes, as a real run has
    return size, ms


def _loss(p, size, ms, c=0.05):
    # scipy's "huber" on the log residuals, written out: quadratic inside c, linear outside
    a = np.abs(np.log(p[0] + size * p[1]) - np.log(ms)) / c
    return float(np.where(a <= 1, a * a, 2 * a - 1).sum())


@settings(max_examples=25, deadline=None)
@given(
    overhead_ms=st.floats(0.005, 2.0),
    gbps=st.floats(1.0, 60.0),
    outliers=st.floats(0.0, 0.3),
    seed=st.integers(0, 2**16),
)
@example(
    overhead_ms=1.5, gbps=23.0, outliers=0.265625, seed=4552
)  # scipy stuck (see below); found by hypothesis
def test_same_minimum_as_least_squares(overhead_ms, gbps, outliers, seed):
    rng = np.random.default_rng(seed)
    size, ms = _sample(rng, overhead_ms, gbps, outliers=outliers)
    a, b = _scipy_fit(size, ms)
    mine = model.fit_line(size, ms)  # the point fit, now without scipy
    assert _loss(mine, size, ms) <= _loss((a, b), size, ms) * (1 + 1e-6) and mine[1] == pytest.approx(
        b, rel=1e-3
    )
    idx = rng.integers(0, len(ms), (12, len(ms)))
    got = fit_lines(size[idx], np.log(ms[idx]), start=(a, b))
    for k, i in enumerate(idx):
        ref = _scipy_fit(size[i], ms[i])
        # Never a worse fit than scipy's; the same parameters where both reach the same
        # minimum. Where ours is clearly lower, scipy stopped short (seed 4552's resample 7:
        # scipy's slope 2e-15 at loss 5675, ours 4.4e-8 at 3544), and its parameters are no oracle.
        mine_loss, ref_loss = _loss(got[k], size[i], ms[i]), _loss(ref, size[i], ms[i])
        assert mine_loss <= ref_loss * (1 + 1e-6)
        if mine_loss >= ref_loss * (1 - 1e-6):
            assert got[k][1] == pytest.approx(ref[1], rel=1e-3)


def test_recovers_a_known_line_from_a_far_start():
    size = 2.0 ** np.arange(10, 31)
    ms = 0.05 + size / 25e6  # 50 us + 25 GB/s, exact
    got = fit_lines(np.tile(size, (3, 1)), np.tile(np.log(ms), (3, 1)), start=(5.0, 1e-5))
    np.testing.assert_allclose(got[:, 0], 0.05, rtol=1e-6)
    np.testing.assert_allclose(1 / got[:, 1] / 1e6, 25.0, rtol=1e-6)


def test_one_size_is_no_line_and_bad_input_is_refused():
    size = np.array([[1024.0] * 5, [1024.0, 2048.0, 4096.0, 8192.0, 16384.0]])
    got = fit_lines(size, np.log(0.01 + size / 1e7), start=(0.01, 1e-7))
    assert np.isnan(got[0]).all() and np.isfinite(got[1]).all()
    with pytest.raises(ValueError, match="same"):
        fit_lines(size, np.zeros((2, 4)), start=(0.01, 1e-7))
    with pytest.raises(ValueError, match="positive"):
        fit_lines(size, np.zeros((2, 5)), start=(0.0, 1e-7))


def test_long_tables_are_fitted_in_blocks_with_the_same_result(monkeypatch):
    rng = np.random.default_rng(3)
    size, ms = _sample(rng, 0.1, 20.0, n=200)
    idx = rng.integers(0, 200, (9, 200))
    whole = fit_lines(size[idx], np.log(ms[idx]), start=(0.1, 5e-8))
    import h2dlab.explain.linefit as lf

    monkeypatch.setattr(lf, "_CHUNK", 450)  # two fits per block
    np.testing.assert_array_equal(fit_lines(size[idx], np.log(ms[idx]), start=(0.1, 5e-8)), whole)
