"""model.fit, advice.advice and outliers.detect/explain, on real recorded tables and on synthetic
tables with anomalies injected at known positions."""

import numpy as np
import pandas as pd
import pytest

from h2dlab.explain import model, outliers
from h2dlab.recording import datasets
from tests.explain.test_outliers_synthetic import back_to_back_t_s

GiB = 1024**3


def synthetic_run(seed, *, reps=10, n_sizes=21, spikes=5, episode_len=15, noise=0.03):
    """A synthetic (made-up, not measured) run: latency = 10 us + bytes / 50 GB/s with
    lognormal noise, rows in random time order, with isolated spikes (x2-x10) and one
    decaying episode (x5 falling towards x1) injected. Copies run back to back, each
    0.3-1.8 ms after the previous one ended (too soon for a GPU wake-up). Returns the
    table and the injected factor per row."""
    rng = np.random.default_rng(seed)
    if reps == 1:
        sizes = np.unique(np.round(np.logspace(10, 30, n_sizes, base=2)).astype(np.int64))
    else:
        sizes = 2 ** np.arange(10, 10 + n_sizes)
    size = np.repeat(sizes, reps)
    rng.shuffle(size)
    n = len(size)
    base = 0.010 + size / 50e6
    factor = np.ones(n)
    start = int(rng.integers(n // 4, n - episode_len - 1))
    factor[start : start + episode_len] = 1 + 4 * np.exp(-np.arange(episode_len) / 4)
    free = np.setdiff1d(np.arange(n), np.arange(start - 2, start + episode_len + 2))
    for i in rng.choice(free, spikes, replace=False):
        factor[i] = rng.uniform(2, 10)
    ms = base * factor * np.exp(rng.normal(0, noise, n))
    df = pd.DataFrame(
        {
            "run_id": f"synthetic-{seed}",
            "order": np.arange(n),
            "strategy": "synthetic",
            "size_bytes": size,
            "shape": "",
            "dtype": "uint8",
            "rep": pd.Series(size).groupby(size).cumcount().to_numpy(),
            "warmup": False,
            "t_s": back_to_back_t_s(ms * 1.01, seed),
            "wall_ms": ms * 1.01,
            "event_ms": ms,
            "host_allocs": 0.0,
            "device_allocs": 0.0,
            "empty_cache": False,
            "error": "",
        }
    )
    return datasets.validate(df), factor, (start, start + episode_len)


@pytest.mark.parametrize("reps,n_sizes", [(10, 21), (1, 200)])
def test_precision_recall_on_synthetic_runs(reps, n_sizes):
    """Truth: a row is anomalous when its injected factor is >= 1.6 (clearly past the
    1.5x flagging floor plus noise); a flag on a row injected with < 1.2 is false."""
    tp = fp = fn = 0
    for seed in range(8):
        df, factor, _ = synthetic_run(seed, reps=reps, n_sizes=n_sizes)
        flagged = outliers.detect(df)["is_outlier"].to_numpy()
        must = factor >= 1.6
        tp += int((flagged & must).sum())
        fn += int((~flagged & must).sum())
        fp += int((flagged & (factor < 1.2)).sum())
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    assert precision >= 0.95, (precision, tp, fp)
    assert recall >= 0.95, (recall, tp, fn)


def test_decaying_episode_is_one_episode():
    hits = 0
    for seed in range(8):
        df, factor, (a, b) = synthetic_run(seed)
        e = outliers.explain(df)
        inside = e.iloc[a:b]
        ids = inside.loc[inside["episode"] >= 0, "episode"]
        # The strongly slowed rows of the stretch carry one episode id and that cause.
        strong = inside[factor[a:b] >= 1.6]
        if len(ids) and ids.nunique() == 1 and (strong["cause"] == "episode").mean() >= 0.8:
            hits += 1
        # Isolated spikes outside it are not episodes.
        out = e[(e.index < a) | (e.index >= b)]
        assert (out.loc[out.is_outlier, "cause"] == "unexplained").all()
    assert hits >= 7


def test_clean_synthetic_run_flags_nothing():
    df, _, _ = synthetic_run(3, spikes=0, episode_len=0)
    assert outliers.detect(df)["is_outlier"].sum() == 0


def test_fit_recovers_synthetic_model():
    df, _, _ = synthetic_run(1, spikes=0, episode_len=0)
    f = model.fit(df, n_boot=50).iloc[0]
    assert f["gbps"] == pytest.approx(50, rel=0.03)
    assert f["overhead_us"] == pytest.approx(10, rel=0.1)
    assert f["gbps_lo"] <= f["gbps"] <= f["gbps_hi"]


# --- real tables -----------------------------------------------------------------------


def test_forum_a100_causes():
    e = outliers.explain(datasets.load("forum_a100"))
    pin = e[(e.strategy == "pin_memory") & e.is_outlier].sort_values("order")
    # The rows where the pinned request first needed a bigger power-of-two block:
    # seq 6, 11, 26, 46, 86, 171, 346, 686 -> rows 1, 2, 5, 9, 17, 34, 69, 137.
    growth = pin[pin.cause == "host_alloc_growth"]["order"].tolist()
    assert growth == [1, 2, 5, 9, 17, 34, 69, 137]
    assert pin[pin.cause == "context_init"]["order"].tolist() == [0]
    assert len(pin) <= 12  # few other pin_memory rows
    # The slowly decaying stretches come out as episodes.
    for strategy, (a, b) in [
        ("pinned_to_cuda", (89, 101)),
        ("pinned_to_cuda", (180, 200)),
        ("direct_to_cuda", (180, 202)),
    ]:
        g = e[(e.strategy == strategy) & e.order.between(a, b)]
        assert (g["episode"] >= 0).mean() >= 0.9, (strategy, a, b)
        assert g["episode"][g["episode"] >= 0].nunique() == 1
    # Isolated 100 ms spikes are not passed off as something they are not.
    assert e.loc[(e.strategy == "pinned_to_cuda") & (e.order == 19), "cause"].item() == "unexplained"


def test_h200_forum_pin_spikes_have_counter_evidence():
    e = outliers.explain(datasets.load("h200_forum"))
    pin = e[(e.strategy == "pin_memory") & e.is_outlier]
    growth = pin[pin.cause == "host_alloc_growth"]
    assert len(growth) == 4 * 8  # 8 block sizes outgrown per run, 4 runs
    assert (growth["host_allocs"] > 0).all()
    assert growth["evidence"].str.contains("num_host_alloc rose").all()
    # Every other flagged pin_memory row says what the counter showed.
    rest = pin[~pin.cause.isin(["host_alloc_growth", "context_init"])]
    assert rest["evidence"].str.contains("no new pinned block").all()
    assert (pin[pin.cause == "context_init"]["wall_ms"] > 50).all()


def test_h200_clean_pinned_reuse_sweep_flags_at_most_one_percent():
    e = outliers.detect(datasets.load("h200_sweep"))
    t = e[(e.strategy == "pinned_reuse") & ~e.warmup]
    assert len(t) > 1000
    assert t["is_outlier"].mean() <= 0.01


def test_h200_allocator_host_allocs_exactly_where_pin_spiked():
    e = outliers.explain(datasets.load("h200_allocator"))
    pin = e[e.strategy == "pin_then_copy"]
    spiked = pin["is_outlier"]
    assert (pin.loc[spiked & (pin.cause == "host_alloc_growth"), "host_allocs"] > 0).all()
    # Conversely, a row that allocated is a flagged spike, apart from small blocks whose
    # cudaHostAlloc is too quick to stand out.
    alloc = pin[pin.host_allocs > 0]
    big = alloc[alloc.size_bytes >= 16 * 2**20]
    assert big["is_outlier"].mean() >= 0.95


def test_fit_h200_sweep_bandwidths():
    f = model.fit(datasets.load("h200_sweep"), n_boot=20)
    g = f.set_index("strategy")
    assert g.loc["pinned_reuse", "gbps"].max() > 50
    assert g.loc["pageable", "gbps"].min() < 15


def test_advice_h200():
    """The one advice engine on the bundled recording, read as the notebooks, the README and
    the workbook read it (advice.of_recording)."""
    from h2dlab.findings import advice
    from h2dlab.recording import session

    rec = session.Recorded("data/h200")
    t = advice.of_recording(rec, GiB)
    a = t[t.case == "one tensor to the GPU"].set_index("way")
    one = advice.best_way(t)  # one copy of a fresh pageable tensor
    assert one.values["way"] == "staged" and a.loc["staged", "vs_pageable"] > 3
    many = advice.best_way(t, 100)  # the same buffer copied again and again
    assert many.values["way"] == "pinned_reuse" and a.loc["pinned_in_place", "upfront_ms"] > 0
    # The first call of pin_memory() is weighed at its cold cost (a new pinned block).
    assert a.loc["pin_cold", "per_copy_ms"] > 10 * a.loc["staged", "per_copy_ms"]
    small = advice.of_recording(rec, 4096).set_index("way")
    assert small.loc["staged", "vs_pageable"] < 1.5
