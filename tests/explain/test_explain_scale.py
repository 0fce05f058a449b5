"""``explain`` on long tables: the same answers, in time about linear in the rows (issue #35).

Before: PELT over a whole timeline (its pruning fails where the level rarely changes, the
usual case), the host-pace test over the whole run per candidate stretch and a bootstrap of
every row made ``explain`` quadratic (100,000 rows 51.7 s, 1,000,000 unfinished after
23 min). The times are stated in benchmarks/bench_explain.py; here, that the faster ways
give the exact way's answers. Series and tables are SYNTHETIC (seeded).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.explain import episodes, model


def _series(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3000, 8000))
    r = rng.normal(0, 0.05, n)
    r[rng.random(n) < rng.choice([0.002, 0.01, 0.03])] += rng.uniform(0.3, 2)
    for _ in range(int(rng.integers(0, 4))):
        a, length = int(rng.integers(0, n - 400)), int(rng.integers(4, 300))
        r[a : a + length] += rng.uniform(0.3, 1.5)
    return r


@pytest.mark.parametrize("seed", range(12))
def test_the_windowed_search_finds_the_exact_searchs_stretches(seed, monkeypatch):
    r = _series(seed)
    sigma = episodes.noise_scale(r, 0.02)
    exact = episodes.stretches(r, sigma)
    monkeypatch.setattr(episodes, "EXACT_MAX", 0)  # every series windowed
    assert episodes.stretches(r, sigma) == exact


def test_a_long_series_is_windowed_and_keeps_its_episode():
    rng = np.random.default_rng(7)
    n = 300_000
    r = rng.normal(0, 0.05, n)
    r[rng.random(n) < 0.005] += 1.0
    r[123_456 : 123_456 + 250] += 0.8
    found = episodes.stretches(r, 0.05)
    assert (123_456, 123_706) in found
    assert all(b - a >= 4 for a, b in found)


@pytest.mark.parametrize("n", [20, 1000])
def test_tie_pruning_keeps_the_least_cost(n):
    rng = np.random.default_rng(n)
    x = np.round(rng.normal(0, 0.05, n), 1)
    x[n // 2 : n // 2 + n // 10] += 1.0
    pen = 0.3

    def cost(ends):
        starts = [0, *ends[:-1]]
        return sum(((x[a:b] - x[a:b].mean()) ** 2).sum() + pen for a, b in zip(starts, ends, strict=True))

    exact, tied = episodes.pelt_l2(x, pen), episodes.pelt_l2(x, pen, prune_ties=True)
    assert cost(tied) == pytest.approx(cost(exact), rel=1e-9, abs=1e-9)


def test_the_bootstrap_of_a_large_group_is_m_out_of_n_with_the_plain_spread(monkeypatch):
    rng = np.random.default_rng(3)
    n = 60_000
    size = rng.choice(2 ** np.arange(10, 31, 2), n).astype(float)
    ms = (0.012 + size / 50e6) * np.exp(rng.normal(0, 0.05, n))
    df = pd.DataFrame({"run_id": "synthetic", "strategy": "pinned_reuse", "size_bytes": size.astype(int),
                       "warmup": False, "error": "", "wall_ms": ms, "event_ms": ms})  # fmt: skip
    sampled = model.fit(df, n_boot=100).iloc[0]
    monkeypatch.setattr(model, "BOOT_MAX_ROWS", 10**9)
    plain = model.fit(df, n_boot=100).iloc[0]
    assert sampled["gbps"] == plain["gbps"] and sampled["overhead_us"] == plain["overhead_us"]
    for col in ("gbps", "overhead_us"):
        w_s, w_p = sampled[f"{col}_hi"] - sampled[f"{col}_lo"], plain[f"{col}_hi"] - plain[f"{col}_lo"]
        assert 0.6 < w_s / w_p < 1.6, (col, w_s, w_p)
        assert sampled[f"{col}_lo"] < sampled[col] < sampled[f"{col}_hi"]
    assert 49.0 < sampled["gbps_lo"] and sampled["gbps_hi"] < 51.0  # the synthetic 50 GB/s


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from([0.5, 1.0, 1.0, 2.0, 3.5, float("inf")]) | st.floats(0.1, 10), min_size=1, max_size=40
    ),
    st.data(),
)
def test_the_median_of_the_rest_is_numpys(values, data):
    from h2dlab.explain.host_pace import _median_without

    x = np.array(values, float)
    a = data.draw(st.integers(0, len(x)))
    b = data.draw(st.integers(a, len(x)))
    rest = np.concatenate([x[:a], x[b:]])
    got = _median_without(np.sort(x), x[a:b])
    want = float(np.median(rest)) if len(rest) else float("nan")
    assert (np.isnan(got) and np.isnan(want)) or got == want
