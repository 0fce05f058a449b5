"""model: fit_line, check_values, concurrency; and the one advice engine (advice.advice, which
replaced model.advise) reads only the tables it is given and refuses bad input in library terms
— on synthetic (made-up, not measured) tables."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.explain import model, outliers, rows
from h2dlab.findings import advice
from h2dlab.recording import datasets

MiB, GiB = 2**20, 2**30
#: Synthetic GB/s and overhead (ms) per strategy: made-up numbers.
SPEEDS = {
    "pageable": (5.0, 0.02),
    "pageable_non_blocking": (6.0, 0.02),
    "staged": (30.0, 0.05),
    "pin_then_copy": (20.0, 0.03),
    "host_register": (8.0, 0.5),
    "pinned_reuse": (50.0, 0.01),
}


def synthetic_table(strategies=SPEEDS, *, reps=3, run_id="synthetic-cpu", host_allocs=0.0, **extra):
    """Rows of latency = overhead + bytes / GB/s exactly (no noise), sizes 1 KiB..1 GiB."""
    rows = []
    for s in strategies:
        gbps, over = SPEEDS[s]
        for size in 2 ** np.arange(10, 31, 2):
            for rep in range(reps):
                ms = over + size / (gbps * 1e6)
                rows.append((s, int(size), rep, ms))
    df = pd.DataFrame(rows, columns=["strategy", "size_bytes", "rep", "event_ms"])
    df = df.assign(
        run_id=run_id,
        order=np.arange(len(df)),
        shape="",
        dtype="uint8",
        warmup=False,
        t_s=np.arange(len(df)) * 0.01,
        wall_ms=df["event_ms"] * 1.01,
        host_allocs=host_allocs,
        device_allocs=0.0,
        empty_cache=False,
        error="",
        **extra,
    )
    return datasets.validate(df)


def test_advice_uses_only_the_table_given():
    """A CPU run with two strategies: the advice engine times only those, with their own
    times, and says "not measured" (never "same as") for every other way (issue 29: the one
    engine, advice.advice, replaced model.advise)."""
    cpu = synthetic_table(["pageable", "staged"])
    a = advice.advice(cpu, GiB).set_index("way")
    measured = a[a["per_copy_ms"].notna()]
    assert set(measured.index) == {"pageable", "staged"}
    assert (a.loc[a["per_copy_ms"].isna(), "verdict"] == "not measured").all()
    one = a.loc["staged"]
    assert one["per_copy_ms"] == pytest.approx(0.05 + GiB / 30e6)
    assert a.loc["pageable", "per_copy_ms"] == pytest.approx(0.02 + GiB / 5e6)
    assert one["vs_pageable"] == pytest.approx(a.loc["pageable", "per_copy_ms"] / one["per_copy_ms"])
    assert one["gbps"] == pytest.approx(GiB / one["per_copy_ms"] / 1e6)
    assert one["upfront_ms"] == 0.0 and one["verdict"] == "faster than x.to()"
    assert advice.best_way(advice.advice(cpu, GiB)).values["way"] == "staged"


def test_advice_ways_and_upfront_cost():
    df = synthetic_table()
    t = advice.advice(df, 64 * MiB)
    assert list(t["way"]) == [w for w, _, _ in advice.WAYS]
    a = t.set_index("way")
    ms = {s: o + 64 * MiB / (g * 1e6) for s, (g, o) in SPEEDS.items()}
    assert a.loc["pinned_in_place", "upfront_ms"] == pytest.approx(ms["host_register"] - ms["pinned_reuse"])
    assert a.loc["pinned_in_place", "per_copy_ms"] == pytest.approx(ms["pinned_reuse"])
    assert a.loc["pin_cached", "per_copy_ms"] == pytest.approx(ms["pin_then_copy"])
    assert a.loc["staged", "per_copy_ms"] == pytest.approx(ms["staged"])
    assert (a.drop(index="pinned_in_place")["upfront_ms"] == 0.0).all()  # only pinning in place pays once
    # No row made a new pinned block and no cold table: the first call is not measured, not a guess.
    assert np.isnan(a.loc["pin_cold", "per_copy_ms"]) and a.loc["pin_cold", "verdict"] == "not measured"
    # One copy of a fresh tensor: the staged copy; many: pinning in place once, then pinned copies.
    assert advice.best_way(t, 1).values["way"] == "staged"
    many = advice.best_way(t, 100)
    assert many.values["way"] == "pinned_reuse" and "pinned() in place once" in many.verdict


def test_advice_first_call_uses_cold_pin_rows():
    df = synthetic_table(["pageable", "staged"])
    cold = synthetic_table(["pin_then_copy"], host_allocs=1.0, run_id="synthetic-cold")
    cold = cold.assign(event_ms=cold["event_ms"] * 2, wall_ms=cold["wall_ms"] * 2)
    a = advice.advice(df, GiB, cold=cold).set_index("way")
    assert a.loc["pin_cold", "per_copy_ms"] == pytest.approx(2 * (0.03 + GiB / 20e6))
    assert a.loc["pin_cold", "basis"] == "3 copies at this size"
    # Only rows that made a new pinned block count as cold.
    warm = synthetic_table(["pin_then_copy"], run_id="synthetic-warm").assign(
        order=lambda d: d["order"] + 10**6
    )
    mixed = pd.concat([cold, warm], ignore_index=True)
    b = advice.advice(df, GiB, cold=mixed).set_index("way")
    assert b.loc["pin_cold", "per_copy_ms"] == pytest.approx(a.loc["pin_cold", "per_copy_ms"])
    none = advice.advice(df, GiB, cold=synthetic_table(["pin_then_copy"])).set_index("way")
    assert np.isnan(none.loc["pin_cold", "per_copy_ms"]) and none.loc["pin_cold", "verdict"] == "not measured"


@pytest.mark.parametrize("bad", [-5, 0, float("nan"), float("inf"), -float("inf"), "1GiB", None, True])
def test_advice_refuses_sizes(bad):
    with pytest.raises(ValueError, match="size_bytes must be a positive whole number of bytes"):
        advice.advice(synthetic_table(["pageable"]), bad)


def test_advice_needs_its_data():
    with pytest.raises(TypeError):
        advice.advice(size_bytes=GiB)  # nothing is loaded behind the caller's back
    with pytest.raises(ValueError, match="no timed rows"):
        advice.advice(datasets.empty_table(), GiB)
    warm = synthetic_table(["pageable"]).assign(warmup=True)
    with pytest.raises(ValueError, match="no timed rows"):
        advice.advice(warm, GiB)
    with pytest.raises(TypeError, match="DataFrame"):
        advice.advice([1, 2], GiB)


@pytest.mark.parametrize("col", ["wall_ms", "event_ms", "size_bytes", "minflt", "cpu_ms", "sm_clock_mhz"])
@pytest.mark.parametrize("value", [-1.0, float("inf")])
def test_bad_values_are_named(col, value):
    df = synthetic_table(["pageable", "staged"], minflt=0.0, cpu_ms=0.01, sm_clock_mhz=1980.0)
    df[col] = df[col].astype(float)
    df.loc[7, col] = value
    for f in (model.fit, model.medians, outliers.detect, outliers.explain):
        with pytest.raises(ValueError, match=f"column '{col}' holds 1 negative or infinite value.*index 7"):
            f(df)
    # An error row may hold anything: it is not a measurement.
    df.loc[7, "error"] = "OOM"
    assert len(model.fit(df, n_boot=0)) == 2


def test_missing_columns_are_named():
    df = synthetic_table(["pageable"]).drop(columns=["error"])
    for f in (model.fit, outliers.explain):
        with pytest.raises(ValueError, match="missing column.*error"):
            f(df)


def test_check_values_messages_say_exactly_what_was_wrong():
    with pytest.raises(TypeError, match=r"^expected a pandas DataFrame \(a measurement table\), got list$"):
        rows.check_values([1, 2])
    df = synthetic_table(["pageable"]).drop(columns=["event_ms", "error"])
    with pytest.raises(ValueError, match=r"^not a measurement table: missing column\(s\) event_ms, error$"):
        rows.check_values(df)


def test_check_values_without_an_error_column_checks_every_row():
    """``required`` without ``error``: a table lacking it is taken, each of its rows is a
    measurement, so a negative value in any row is refused."""
    req = ("size_bytes", "wall_ms")
    df = synthetic_table(["pageable"]).drop(columns=["error"])
    assert rows.check_values(df, req) is None
    df.loc[4, "wall_ms"] = -1.0
    with pytest.raises(ValueError, match=r"column 'wall_ms' holds 1 negative or infinite value.*index 4"):
        rows.check_values(df, req)


def test_check_values_reads_each_measured_column_the_table_has():
    """A measured column the table lacks is skipped, not the end of the check; a value that
    is not a number (a table built by hand, not read by datasets, which refuses it) counts as
    not measured, like NaN: check_values refuses only negative or infinite numbers."""
    df = synthetic_table(["pageable"], cpu_ms=0.01).drop(columns=["host_allocs"])
    df["gpu_procs"] = "n/a"
    assert rows.check_values(df) is None
    df.loc[5, "cpu_ms"] = -0.5
    with pytest.raises(
        ValueError, match=r"column 'cpu_ms' holds 1 negative or infinite value.*index 5: .*-0\.5"
    ):
        rows.check_values(df)


@settings(max_examples=40, deadline=None)
@given(st.floats(1e-3, 1.0), st.floats(1.0, 100.0))
def test_fit_line_recovers_a_line(overhead_ms, gbps):
    size = 2.0 ** np.arange(10, 31)
    a, b = model.fit_line(size, overhead_ms + size / (gbps * 1e6))
    assert a == pytest.approx(overhead_ms, rel=1e-6)
    assert 1 / b / 1e6 == pytest.approx(gbps, rel=1e-6)


def test_fit_line_refuses_what_it_cannot_fit():
    with pytest.raises(ValueError, match="two distinct sizes"):
        model.fit_line(np.full(5, 1024.0), np.ones(5))
    with pytest.raises(ValueError, match="positive"):
        model.fit_line(np.array([1.0, 2.0]), np.array([1.0, -1.0]))


def test_fit_and_predict_synthetic():
    f = model.fit(synthetic_table(["staged"]), n_boot=0).iloc[0]
    assert f["gbps"] == pytest.approx(30, rel=1e-6) and f["overhead_us"] == pytest.approx(50, rel=1e-6)
    assert f["median_abs_rel_err"] < 1e-3 and f["n"] == 33 and f["sizes"] == 11
    assert float(model.predict(f, GiB)) == pytest.approx(0.05 + GiB / 30e6, rel=1e-6)


def synthetic_concurrent():
    """Made-up concurrent run: one GPU alone at 50 GB/s; two at once, 40 and 30 GB/s each."""
    rows = []
    for world, gbps in ((1, [50.0]), (2, [40.0, 30.0])):
        for gpu, g in enumerate(gbps):
            for rep in range(3):
                rows.append((world, gpu, rep, 0.01 + GiB / (g * 1e6)))
    df = pd.DataFrame(rows, columns=["world", "gpu", "rep", "event_ms"])
    return df.assign(
        run_id="synthetic-conc",
        strategy="pinned_reuse",
        size_bytes=GiB,
        warmup=False,
        wall_ms=df["event_ms"],
        error="",
    )


def test_concurrency_scaling():
    c = model.concurrency(synthetic_concurrent()).set_index("world")
    one_gb = GiB / (0.01 + GiB / 50e6) / 1e6
    two = [GiB / (0.01 + GiB / (g * 1e6)) / 1e6 for g in (40.0, 30.0)]
    assert c.loc[1, "scaling"] == pytest.approx(1.0, rel=1e-12)
    assert c.loc[2, "aggregate_gbps"] == pytest.approx(sum(two), rel=1e-12)
    assert c.loc[2, "per_gpu_gbps"] == pytest.approx(sum(two) / 2, rel=1e-12)
    assert c.loc[2, "single_gpu_gbps"] == pytest.approx(one_gb, rel=1e-12)
    assert c.loc[2, "scaling"] == pytest.approx(sum(two) / one_gb, rel=1e-12)
    assert c.loc[2, "gpus"] == 2
    with pytest.raises(ValueError, match="not a concurrent run"):
        model.concurrency(synthetic_table(["pageable"]))


def noisy_table(n_sizes=6, reps=4, seed=0, run_id="synthetic-noisy", strategy="staged"):
    """Made-up rows: 50 us + bytes / 30 GB/s with 5 % lognormal noise."""
    rng = np.random.default_rng(seed)
    size = np.repeat(2 ** np.arange(20, 20 + n_sizes), reps)
    ms = (0.05 + size / 30e6) * np.exp(rng.normal(0, 0.05, len(size)))
    return datasets.validate(
        pd.DataFrame(
            {
                "run_id": run_id,
                "order": np.arange(len(size)),
                "strategy": strategy,
                "size_bytes": size,
                "shape": "",
                "dtype": "uint8",
                "rep": np.tile(np.arange(reps), n_sizes),
                "warmup": False,
                "t_s": 0.0,
                "wall_ms": ms,
                "event_ms": ms,
                "host_allocs": 0.0,
                "device_allocs": 0.0,
                "empty_cache": False,
                "error": "",
            }
        )
    )


def test_fit_confidence_interval_is_the_bootstrap_percentile_interval():
    """95 % intervals: 2.5th and 97.5th percentiles of fit_line over n_boot resamples of
    the rows, drawn from numpy's default_rng(seed) -- recomputed here independently, one
    resample at a time (fit refits them all at once: equal within solver tolerance)."""
    df = noisy_table()
    f = model.fit(df, n_boot=30, seed=7).iloc[0]
    size, ms = df["size_bytes"].to_numpy(float), df["event_ms"].to_numpy(float)
    rng = np.random.default_rng(7)
    boots = []
    for _ in range(30):
        i = rng.integers(0, len(ms), len(ms))
        boots.append(model.fit_line(size[i], ms[i]))
    a, b = np.array(boots).T
    a0, b0 = model.fit_line(size, ms)
    assert f["overhead_us"] == pytest.approx(a0 * 1e3, rel=1e-6)
    assert f["gbps"] == pytest.approx(1 / b0 / 1e6, rel=1e-6)
    assert f["overhead_us_lo"] == pytest.approx(np.percentile(a, 2.5) * 1e3, rel=1e-6)
    assert f["overhead_us_hi"] == pytest.approx(np.percentile(a, 97.5) * 1e3, rel=1e-6)
    assert f["gbps_lo"] == pytest.approx(1 / np.percentile(b, 97.5) / 1e6, rel=1e-6)
    assert f["gbps_hi"] == pytest.approx(1 / np.percentile(b, 2.5) / 1e6, rel=1e-6)
    assert f["overhead_us_lo"] < f["overhead_us"] < f["overhead_us_hi"]
    assert f["gbps_lo"] < f["gbps"] < f["gbps_hi"]
    pred = a0 + size * b0
    assert f["median_abs_rel_err"] == pytest.approx(np.median(np.abs(ms / pred - 1)), rel=1e-6)
    # The defaults: 200 resamples, seed 0.
    d = model.fit(df).iloc[0]
    assert d["gbps_lo"] == model.fit(df, n_boot=200, seed=0).iloc[0]["gbps_lo"]
    assert d["gbps_lo"] != model.fit(df, n_boot=201, seed=0).iloc[0]["gbps_lo"]
    assert d["gbps_lo"] != model.fit(df, n_boot=200, seed=1).iloc[0]["gbps_lo"]


def test_fit_bootstraps_from_eight_rows_and_fits_from_two_sizes():
    eight = noisy_table(n_sizes=2, reps=4)
    f = model.fit(eight, n_boot=20).iloc[0]
    assert f["n"] == 8 and f["sizes"] == 2
    assert np.isfinite([f["gbps_lo"], f["gbps_hi"], f["overhead_us_lo"], f["overhead_us_hi"]]).all()
    seven = eight.iloc[:7]
    f = model.fit(seven, n_boot=20).iloc[0]
    assert np.isnan([f["gbps_lo"], f["gbps_hi"], f["overhead_us_lo"], f["overhead_us_hi"]]).all()
    assert np.isfinite(f["gbps"])


def test_fit_skips_one_size_groups_and_sorts_groups():
    one_size = noisy_table(n_sizes=1, run_id="synthetic-a")
    later = noisy_table(run_id="synthetic-b")
    first = noisy_table(run_id="synthetic-0")
    f = model.fit(pd.concat([later, one_size, first], ignore_index=True), n_boot=0)
    assert list(f["run_id"]) == ["synthetic-0", "synthetic-b"]
    assert list(model.fit(later, by=("strategy",), n_boot=0).columns[:2]) == ["strategy", "overhead_us"]
    with pytest.raises(ValueError, match="missing column.*gpu"):
        model.fit(later, by=("gpu",))


def test_predict_is_the_line():
    f = pd.Series({"overhead_us": 50.0, "gbps": 25.0})
    assert float(model.predict(f, GiB)) == pytest.approx(0.05 + GiB / 25e6, rel=1e-12)
    assert np.allclose(model.predict(f, [0, 1e6]), [0.05, 0.05 + 1e6 / 25e6], rtol=1e-12)


def test_concurrency_refuses_half_a_concurrent_table():
    c = synthetic_concurrent()
    for col in ("gpu", "world"):
        with pytest.raises(ValueError, match="not a concurrent run: the table has no gpu and world columns"):
            model.concurrency(c.drop(columns=[col]))
    with pytest.raises(ValueError, match="missing column.*strategy"):
        model.concurrency(c.drop(columns=["strategy"]))


def test_concurrency_without_a_one_gpu_figure():
    c = synthetic_concurrent()
    c = model.concurrency(c[c["world"] == 2])
    assert c["single_gpu_gbps"].dtype == float and c["scaling"].dtype == float
    assert np.isnan(c["single_gpu_gbps"]).all() and np.isnan(c["scaling"]).all()
    exact = GiB / (0.01 + GiB / 40e6) / 1e6 + GiB / (0.01 + GiB / 30e6) / 1e6
    assert c["aggregate_gbps"].iloc[0] == pytest.approx(exact, rel=1e-12)


def test_interpolate_ms_between_beside_and_beyond_measured_sizes():
    med = pd.DataFrame(
        {
            "strategy": "staged",
            "size_bytes": [1024, 4096, 16384, 65536],
            "median_ms": [0.01, 0.02, 0.08, 0.32],
        }
    )
    f = model.interpolate_ms
    assert f(med, "staged", 4096) == pytest.approx(0.02, rel=1e-12)
    assert f(med, "staged", 2048) == pytest.approx(math.sqrt(0.01 * 0.02), rel=1e-12)  # log-log midpoint
    assert f(med, "staged", 32768) == pytest.approx(math.sqrt(0.08 * 0.32), rel=1e-12)
    assert f(med, "staged", 512) == pytest.approx(0.01, rel=1e-12)  # constant time below
    assert f(med, "staged", 2 * 65536) == pytest.approx(0.64, rel=1e-12)  # constant GB/s beyond
    assert math.isnan(f(med, "pageable", 4096))
    assert f(med.iloc[::-1], "staged", 2048) == pytest.approx(math.sqrt(0.01 * 0.02), rel=1e-12)


def test_advice_smallest_sizes_and_anchored_messages():
    df = synthetic_table(["pageable", "staged"])
    a = advice.advice(df, 1)  # one byte is a size, measured nowhere near
    assert (a["size_bytes"] == 1).all()
    assert a["per_copy_ms"].isna().all() and (a["verdict"] == "not measured").all()
    assert (a["basis"] == "not measured").all()
    with pytest.raises(
        ValueError, match=r"^advice: the sweep has no timed rows \(every row a warm-up or an error\)"
    ):
        advice.advice(df.assign(warmup=True), GiB)
    with pytest.raises(
        ValueError, match=r"^advice: size_bytes must be a positive whole number of bytes, not '1'$"
    ):
        advice.advice(df, "1")
    for col in ("strategy", "size_bytes"):
        with pytest.raises(
            ValueError, match=f"^advice: sweep: not a measurement table: missing column.*{col}"
        ):
            advice.advice(df.drop(columns=[col]), GiB)
    with pytest.raises(ValueError, match="^advice: cold: not a measurement table: missing column.*strategy"):
        advice.advice(df, GiB, cold=df.drop(columns=["strategy"]))


def test_concurrency_messages_and_columns():
    c = synthetic_concurrent()
    with pytest.raises(ValueError, match=r"^not a concurrent run: .* \(measure on several GPUs at once\)$"):
        model.concurrency(c.drop(columns=["gpu"]))
    # It needs no run_id (one concurrent run per table).
    assert len(model.concurrency(c.drop(columns=["run_id"]))) == 2


def test_medians_quartiles_and_bandwidth():
    rows = synthetic_table(["staged"], reps=1)
    ms = np.array([1.0, 2.0, 4.0, 8.0, 100.0])  # one cell, five timed copies
    df = pd.concat([rows.iloc[[0]]] * 5, ignore_index=True).assign(
        rep=range(5), order=range(5), event_ms=ms, wall_ms=ms, size_bytes=2**20
    )
    df = pd.concat([df, df.iloc[[0]].assign(rep=5, order=5, event_ms=0.0, wall_ms=0.0)], ignore_index=True)
    m = model.medians(df).iloc[0]
    assert (m["strategy"], m["size_bytes"], m["n"]) == ("staged", 2**20, 5)  # the zero-time row is not timed
    assert (m["median_ms"], m["q1_ms"], m["q3_ms"]) == (4.0, 2.0, 8.0)
    assert m["gbps"] == pytest.approx(2**20 / 4.0 / 1e6, rel=1e-12)
    assert m["iqr_over_median"] == pytest.approx((8.0 - 2.0) / 4.0, rel=1e-12)
    assert len(model.timed(df)) == 5
    with pytest.raises(ValueError, match="missing column.*strategy"):
        model.medians(df.drop(columns=["strategy"]))
    assert len(model.medians(df.drop(columns=["run_id"]))) == 1  # medians needs no run_id


BUNDLED_SWEEP = "data/h200/sweep/pow2-interleaved.csv.gz"


def test_fit_and_advice_read_a_table_from_plain_pandas():
    """Issue 35: a bundled .csv.gz read with pd.read_csv (an empty error read as NaN, no attrs)
    gave an empty fit and "same as x.to()" for every way; it must give what datasets.read gives."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / BUNDLED_SWEEP
    plain, kit = pd.read_csv(path), datasets.read(path)
    assert plain["error"].isna().all()  # the case: no error text reads as NaN
    got, want = model.fit(plain, n_boot=20), model.fit(kit, n_boot=20)
    assert len(want) == 6
    pd.testing.assert_frame_equal(got, want)
    pd.testing.assert_frame_equal(model.medians(plain), model.medians(kit))
    a, b = advice.advice(plain, GiB), advice.advice(kit, GiB)
    pd.testing.assert_frame_equal(a, b)
    assert a["per_copy_ms"].notna().sum() >= 5 and "same as x.to()" not in set(
        a.loc[a.way != "pageable", "verdict"]
    )
    assert advice.registering_cost(plain, GiB).values["ms"] == advice.registering_cost(kit, GiB).values["ms"]


def test_fit_and_advice_say_in_one_line_what_a_plain_table_lacks():
    df = synthetic_table(["pageable", "staged"])
    twice = pd.concat([df, df.iloc[[0]]], ignore_index=True)  # a row repeated in every column
    for call in (lambda: model.fit(twice), lambda: advice.advice(twice, GiB)):
        with pytest.raises(ValueError, match="repeats an earlier row") as info:
            call()
        assert "\n" not in str(info.value)


@settings(max_examples=40, deadline=None)
@given(
    ways=st.sets(st.sampled_from(sorted(SPEEDS)), min_size=1),
    size=st.sampled_from([2**10, 2**20, 3 * 2**20, 2**30, 2**34]),
)
def test_advice_never_says_same_where_a_time_is_missing(ways, size):
    """'same as x.to()' only where both this way's time and x.to()'s were measured."""
    t = advice.advice(synthetic_table(sorted(ways)), size)
    same = t["verdict"].str.startswith("same as")
    assert (
        t.loc[same, "per_copy_ms"].notna()
        & t.loc[same, "baseline_ms" if "baseline_ms" in t else "vs_pageable"].notna()
    ).all()
    assert (t.loc[t["per_copy_ms"].isna(), "verdict"] == "not measured").all()
    if "pageable" not in ways:
        assert set(t.loc[t["per_copy_ms"].notna(), "verdict"]) <= {"x.to() not measured"}
