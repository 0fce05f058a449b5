"""The advice table and the bandwidth findings, against plain pandas on the bundled sweep,
and on synthetic tables (named synthetic) where the verdict flips."""

import numpy as np
import pandas as pd
import pytest

from h2dlab.findings import advice
from h2dlab.findings import speed as findings_speed
from h2dlab.recording import datasets
from h2dlab.units import fmt_bytes

GiB, MiB, KiB = 2**30, 2**20, 2**10


@pytest.fixture(scope="module")
def inter():
    return datasets.run_named(datasets.load("h200_sweep"), "pow2-interleaved")


@pytest.fixture(scope="module")
def cold():
    return datasets.run_named(datasets.load("h200_allocator"), "pin-emptied")


def timed(df, strategy, size):
    d = df[(df.strategy == strategy) & (df.size_bytes == size) & ~df.warmup & (df.error == "")]
    return d.event_ms


def synthetic_sweep(ms):
    """A synthetic sweep: {strategy: {size: [event_ms, ...]}}."""
    rows = []
    for s, by in ms.items():
        for size, vals in by.items():
            for i, v in enumerate(vals):
                rows.append(
                    {
                        "run_id": "synthetic",
                        "order": len(rows),
                        "strategy": s,
                        "size_bytes": size,
                        "rep": i,
                        "warmup": False,
                        "wall_ms": v,
                        "event_ms": v,
                        "host_allocs": 0.0,
                        "device_allocs": 0.0,
                        "empty_cache": False,
                        "error": "",
                        "shape": "",
                        "dtype": "",
                        "t_s": 0.0,
                    }
                )
    return pd.DataFrame(rows)


def test_advice_rows_are_the_medians(inter, cold):
    t = advice.advice(inter, GiB, cold=cold).set_index("way")
    assert list(t.index) == [w for w, _, _ in advice.WAYS]
    assert t.loc["pageable", "per_copy_ms"] == pytest.approx(timed(inter, "pageable", GiB).median())
    assert t.loc["pinned_reuse", "per_copy_ms"] == pytest.approx(timed(inter, "pinned_reuse", GiB).median())
    assert t.loc["staged", "per_copy_ms"] == pytest.approx(timed(inter, "staged", GiB).median())
    pin = inter[(inter.strategy == "pin_then_copy") & (inter.size_bytes == GiB)]
    assert t.loc["pin_cached", "per_copy_ms"] == pytest.approx(
        pin[(pin.host_allocs == 0) & ~pin.warmup].event_ms.median()
    )
    assert t.loc["pin_cold", "per_copy_ms"] == pytest.approx(pin[pin.host_allocs > 0].event_ms.median())
    reg = timed(inter, "host_register", GiB).median() - timed(inter, "pinned_reuse", GiB).median()
    assert t.loc["pinned_in_place", "upfront_ms"] == pytest.approx(reg)
    assert t.loc["pageable", "verdict"] == "same as x.to()"
    assert t.loc["pin_cold", "verdict"] == "slower than x.to()"
    assert t.loc["pinned_reuse", "vs_pageable"] > 5


def test_advice_scales_cold_cost_from_neighbouring_sizes(inter, cold):
    t = advice.advice(inter, 64 * MiB, cold=cold).set_index("way")
    new = pd.concat(
        [cold[cold.host_allocs > 0], inter[(inter.strategy == "pin_then_copy") & (inter.host_allocs > 0)]]
    )
    near = new[new.size_bytes.between(16 * MiB, 256 * MiB)]
    gbps = (near.size_bytes / near.event_ms / 1e6).median()
    assert "scaled" in t.loc["pin_cold", "basis"]
    assert t.loc["pin_cold", "per_copy_ms"] == pytest.approx(64 * MiB / gbps / 1e6)


def test_pin_first_pays_says_when_the_first_call_is_scaled(inter, cold):
    # recomputed: does any first call (a new block) sit at exactly this size?
    new = pd.concat(
        [cold[cold.host_allocs > 0], inter[(inter.strategy == "pin_then_copy") & (inter.host_allocs > 0)]]
    )
    for size in (64 * MiB, GiB):
        f = advice.pin_first_pays(advice.advice(inter, size, cold=cold))
        timed_here = bool((new.size_bytes == size).any())
        assert ("made a new block; scaled from" in f.verdict) == (not timed_here)
    assert not (new.size_bytes == 64 * MiB).any() and (new.size_bytes == GiB).any()
    # where it was timed, the figure says how many copies it rests on (one, at 1 GiB)
    n = int((new.size_bytes == GiB).sum())
    assert (
        f"ms ({n} cop{'y' if n == 1 else 'ies'} at this size), "
        in advice.pin_first_pays(advice.advice(inter, GiB, cold=cold)).verdict
    )


def test_pin_first_pays_cached_yes_cold_no(inter, cold):
    f = advice.pin_first_pays(advice.advice(inter, GiB, cold=cold))
    assert f.holds and not f["cold_pays"]
    assert "At 1 GiB, the tutorial's warning holds exactly when a new pinned block is made" in f.verdict


def test_pin_first_pays_synthetic_never_flips():
    s = synthetic_sweep(
        {
            "pageable": {GiB: [10, 10, 10]},
            "pin_then_copy": {GiB: [20, 20, 20]},
            "pinned_reuse": {GiB: [5, 5, 5]},
        }
    )
    s.loc[s.strategy == "pin_then_copy", "host_allocs"] = [1.0, 0.0, 0.0]
    f = advice.pin_first_pays(advice.advice(s, GiB))
    assert not f.holds and "does not pay" in f.verdict


def test_best_way_once_and_many(inter, cold):
    t = advice.advice(inter, GiB, cold=cold)
    once = advice.best_way(t, 1)
    per = t.set_index("way")
    fresh = per.drop(index=["pinned_reuse", "pin_cached"]).once_ms
    assert once["way"] == fresh.idxmin() == "staged"
    many = advice.best_way(t, 100)
    assert many["way"] in ("pinned_reuse", "pinned_in_place")
    # a reused pinned buffer's own pinning is not counted: the verdict then names the fastest
    # way from a pageable tensor too, with its total (reader, session 29)
    totals = (per.upfront_ms + 100 * per.per_copy_ms).drop(index=["pinned_reuse", "pin_cached"])
    if many["way"] == "pinned_reuse":
        alt = per.loc[totals.idxmin()]
        assert "presumes the data already in pinned memory" in many.verdict
        assert f"the fastest is {alt.what} (`{alt.code}`), {totals.min():.1f} ms in all" in many.verdict
    else:
        assert "presumes" not in many.verdict


def test_registering_cost_one_number(inter):
    f = advice.registering_cost(inter, GiB)
    hr, pr = timed(inter, "host_register", GiB), timed(inter, "pinned_reuse", GiB)
    assert f["ms"]["median"] == pytest.approx((hr - pr.median()).median())
    assert f"{f['ms']['median']:.0f} ms" in f.verdict
    with pytest.raises(ValueError, match="host_register"):
        advice.registering_cost(inter, 3 * MiB)


def test_memory_kind_at_64_kib_is_not_overhead_only(inter):
    f = advice.memory_kind(inter, 64 * KiB)
    r = timed(inter, "pageable", 64 * KiB).median() / timed(inter, "pinned_reuse", 64 * KiB).median()
    assert f["ratio"] == pytest.approx(r) and r > 1.5
    assert f.holds and "matters" in f.verdict
    assert ("overlap" in f.verdict or "no faster" in f.verdict) == (f["ratio_lo"] <= 1)


def test_memory_kind_says_when_the_quartiles_overlap():
    # synthetic: pinned faster on the medians (1.5x) but its slow quartile meets pageable's fast one
    s = synthetic_sweep({"pageable": {KiB: [0.06, 0.09, 0.12]}, "pinned_reuse": {KiB: [0.02, 0.06, 0.10]}})
    f = advice.memory_kind(s, KiB)
    assert f.holds and f["ratio"] == pytest.approx(1.5) and f["ratio_lo"] <= 1
    assert "on the medians" in f.verdict and "no faster than the faster pageable ones" in f.verdict
    clear = synthetic_sweep(
        {"pageable": {KiB: [0.12, 0.12, 0.12]}, "pinned_reuse": {KiB: [0.06, 0.06, 0.06]}}
    )
    g = advice.memory_kind(clear, KiB)
    assert (
        g.holds
        and g["ratio_lo"] > 1
        and "no faster" not in g.verdict
        and "matters at this size." in g.verdict
    )
    # three copies each: the quartiles are hardly more than the values, and it says how few
    assert (
        "the quartiles of 3 copies each allow" in f.verdict and "the quartiles of 3 copies each" in g.verdict
    )
    many = synthetic_sweep({"pageable": {KiB: [0.12] * 6}, "pinned_reuse": {KiB: [0.06] * 6}})
    assert "(the quartiles allow 2.0–2.0x)" in advice.memory_kind(many, KiB).verdict


def test_memory_kind_synthetic_same_flips():
    s = synthetic_sweep({"pageable": {KiB: [0.05, 0.05, 0.05]}, "pinned_reuse": {KiB: [0.05, 0.05, 0.05]}})
    f = advice.memory_kind(s, KiB)
    assert not f.holds and "overhead" in f.verdict


def test_small_copy_floor_real_spread(inter):
    f = advice.small_copy_floor(inter)
    t = inter[(inter.size_bytes == KiB) & ~inter.warmup].groupby("strategy").event_ms.median() * 1e3
    assert f["lo_us"] == pytest.approx(t.min()) and f["hi_us"] == pytest.approx(t.max())
    assert not f.holds and "matters even here" in f.verdict
    assert t.idxmax() == "host_register"


def test_small_copy_floor_synthetic_same_flips():
    s = synthetic_sweep({"pageable": {KiB: [0.02] * 3}, "staged": {KiB: [0.021] * 3}})
    assert advice.small_copy_floor(s).holds


def test_bandwidth_peak_and_order(inter):
    f = advice.bandwidth(inter)
    t = inter[~inter.warmup].groupby(["strategy", "size_bytes"]).event_ms.median().reset_index()
    gbps = t.size_bytes / t.event_ms / 1e6
    assert f["peak_gbps"] == pytest.approx(gbps.max())
    assert f.holds and next(iter(f["at_largest"])) == "pinned_reuse"
    m = f.table[(f.table.strategy == "pinned_reuse") & (f.table.size_bytes == 128 * MiB)].iloc[0]
    assert m.gbps > 50  # the interleaved run has no 43 GB/s ordering dip at 128 MiB
    assert m.gbps_lo <= m.gbps <= m.gbps_hi


def test_bandwidth_synthetic_pageable_fastest_flips():
    s = synthetic_sweep({"pageable": {GiB: [10.0] * 3}, "pinned_reuse": {GiB: [20.0] * 3}})
    assert not advice.bandwidth(s).holds


def test_host_copy_ceiling():
    b = datasets.load_benchmark("h200")
    f = advice.host_copy_ceiling(b)
    rows = pd.DataFrame(b["rows"])
    td = rows[rows.method == "to_device"].set_index("size_bytes").gbps_median
    assert f["best_gbps"] == pytest.approx(td.max())
    # recomputed here: which host-copy "ceilings" to_device beat at their own size
    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    expect = []
    for key, v in b["ceilings"].items():
        if key.startswith("host_copy"):
            label = key.split("_")[2]
            if td[int(label[:-3]) * units[label[-3:]]] > v:
                expect.append(label)
    assert f["beaten_at"] == expect and f.holds == (not expect)
    # the host copy is "the wall" only where it was also slower than the pinned DMA of the same run
    peak = b["ceilings"]["pinned_reuse_peak_gbps"]
    above = [k for k, v in b["ceilings"].items() if k.startswith("host_copy") and v > peak]
    assert ("no ceiling" in f.verdict) == bool(expect)
    assert ("wall" in f.verdict) == (not expect and not above) and len(f["above_dma_at"]) == len(above)
    assert ("the DMA, not the memory copy" in f.verdict) == (not expect and bool(above))
    synthetic = {  # synthetic: to_device below the host copy, then above it
        "rows": [{"method": "to_device", "size_bytes": GiB, "gbps_median": 20.0}],
        "ceilings": {"host_copy_1GiB_gbps": 25.0, "pinned_reuse_peak_gbps": 50.0},
    }
    g = advice.host_copy_ceiling(synthetic)
    assert g.holds and "wall" in g.verdict and g["above_dma_at"] == []
    synthetic["ceilings"]["pinned_reuse_peak_gbps"] = 22.0  # synthetic: the DMA slower than the host copy
    g = advice.host_copy_ceiling(synthetic)
    assert g.holds and "wall" not in g.verdict and g["above_dma_at"] == ["1 GiB"]
    assert "outran the pinned DMA (22.0 GB/s" in g.verdict
    del synthetic["ceilings"]["pinned_reuse_peak_gbps"]  # synthetic: no DMA figure, no claim either way
    g = advice.host_copy_ceiling(synthetic)
    assert g.holds and "wall" not in g.verdict and "no pinned DMA peak" in g.verdict
    synthetic["rows"][0]["gbps_median"] = 30.0
    g = advice.host_copy_ceiling(synthetic)
    assert not g.holds and g["beaten_at"] == ["1GiB"] and "no ceiling" in g.verdict
    assert "30.0 GB/s at 1 GiB" in g.verdict  # a readable size, with its space
    synthetic["ceilings"] = {"host_copy_4GiB_gbps": 25.0}  # synthetic: no to_device row at 4 GiB
    g = advice.host_copy_ceiling(synthetic)
    assert g["beaten_at"] == [] and "at 4 GiB, where `to_device` was not timed" in g.verdict
    assert "30.0" not in g.verdict  # the 1 GiB row is not passed off as the 4 GiB one


def test_host_copy_ceiling_quotes_the_file():
    b = datasets.load_benchmark("h200")
    f = advice.host_copy_ceiling(b)
    rows = pd.DataFrame(b["rows"])
    td = rows[rows.method == "to_device"].set_index("size_bytes").gbps_median
    for key, v in b["ceilings"].items():
        if key.startswith("host_copy"):
            size = key.split("_")[2]
            n = int(size[:-3]) * {"MiB": 2**20, "GiB": 2**30}[size[-3:]]
            text = f"{v:.0f} GB/s alone against `to_device` {td[n]:.1f} GB/s at {size[:-3]} {size[-3:]}"
            assert text in f.verdict


def test_size_text():
    assert advice.size_text(GiB) == "1 GiB" and advice.size_text(64 * KiB) == "64 KiB"
    assert np.isfinite(advice.advice(datasets.run_named(datasets.load("h200_sweep"), "pow2"), GiB).gbps).all()


def test_pin_first_pays_without_cold_rows_says_not_measured(inter):
    t = advice.advice(inter, GiB)  # no cold table, and the sweep's new blocks are far from 1 GiB
    t.loc[t.way == "pin_cold", "per_copy_ms"] = np.nan
    f = advice.pin_first_pays(t)
    assert f.holds and "was not measured" in f.verdict and "tutorial" not in f.verdict


def synthetic_back_and_batch():
    """SYNTHETIC device-to-host rows at 1 GiB and batch rows (1 GiB in 1 or 256 tensors)."""
    d2h = synthetic_sweep(
        {"d2h_pageable": {GiB: [100.0, 110.0, 90.0]}, "d2h_pinned_reuse": {GiB: [20.0, 21.0, 19.0]}}
    )
    rows = synthetic_sweep(
        {
            "loop_to": {GiB: [60.0, 62.0, 58.0], 512 * MiB: [30.0, 30.0, 30.0]},
            "pinned_flat": {GiB: [25.0, 26.0, 24.0]},
        }
    )
    batch = rows.assign(n_tensors=np.where(rows.size_bytes == GiB, 256, 1))
    return d2h.assign(direction="d2h"), batch


def test_advice_adds_results_back_and_batches_against_their_own_plain_way(inter, cold):
    d2h, batch = synthetic_back_and_batch()
    plain = advice.advice(inter, GiB, cold=cold)
    t = advice.advice(inter, GiB, cold=cold, d2h=d2h, batch=batch)
    main = t[t.case == "one tensor to the GPU"].drop(columns="case")
    pd.testing.assert_frame_equal(main, plain.drop(columns="case"))  # the first case is unchanged
    back = t[t.case == "results back to the host"].set_index("way")
    assert back.loc["d2h_pinned_reuse", "per_copy_ms"] == pytest.approx(20.0)
    assert back.loc["d2h_pinned_reuse", "vs_pageable"] == pytest.approx(100.0 / 20.0)
    assert back.loc["d2h_pinned_reuse", "verdict"] == "faster than y.cpu()"
    bt = t[t.case == "a batch of 256 tensors, 1 GiB in all"].set_index("way")
    assert bt.loc["pinned_flat", "vs_pageable"] == pytest.approx(60.0 / 25.0)  # host clock medians
    assert bt.loc["loop_to", "verdict"] == "same as a loop of .to()"
    assert advice.best_way(t, case="results back to the host").values["way"] == "d2h_pinned_reuse"
    f = advice.best_way(t, case="a batch of 256 tensors, 1 GiB in all")
    assert f.holds and f.values["way"] == "pinned_flat" and "2.4x as fast as `a loop of .to()`" in f.verdict
    assert advice.best_way(t).verdict == advice.best_way(plain).verdict


def test_advice_extra_case_without_its_plain_way_gives_no_rows(inter):
    d2h, batch = synthetic_back_and_batch()
    t = advice.advice(
        inter, GiB, d2h=d2h[d2h.strategy != "d2h_pageable"], batch=batch[batch.strategy != "loop_to"]
    )
    assert set(t.case) == {"one tensor to the GPU"}


def test_staged_bounds_quotes_the_file_and_judges_from_1_gib():
    from h2dlab.findings import speed as findings_speed

    for name in ("h200", "h200x2"):
        b = datasets.load_benchmark(name)
        f = findings_speed.staged_bounds(b)
        for r in b["bounds"]:
            size = fmt_bytes(r["size_bytes"], compact=True)
            assert (
                f"At {size}, `to_device` ran at {r['to_device_gbps']:.1f} GB/s: {r['frac_of_upper']:.0%} of the upper bound"
                in f.verdict
            )
            assert f"{r['frac_of_lower']:.0%} of the lower bound {r['lower_gbps']:.1f}" in f.verdict
        under = [r for r in b["bounds"] if r["size_bytes"] >= GiB and r["frac_of_lower"] < 1]
        assert f.holds == (not under) and ("stayed under the lower bound" in f.verdict) == bool(under)
        # the bounds phase timed to_device again: the comparison rows' figures are named beside them
        comp = {r["size_bytes"]: r["gbps_median"] for r in b["rows"] if r["method"] == "to_device"}
        again = ", ".join(f"{comp[r['size_bytes']]:.1f}" for r in b["bounds"] if r["size_bytes"] in comp)
        assert f"the comparison's rows read {again} GB/s at these sizes." in f.verdict
    row = {  # synthetic: one size, the host copy the slower alone, the host copy under DMA the lower
        "size_bytes": GiB,
        "to_device_gbps": 30.0,
        "upper_gbps": 40.0,
        "lower_gbps": 25.0,
        "lower_is": "host_under_dma",
        "host_alone_gbps": 40.0,
        "dma_alone_gbps": 55.0,
        "frac_of_upper": 0.75,
        "frac_of_lower": 1.2,
    }
    g = findings_speed.staged_bounds({"bounds": [row]})
    assert g.holds and "(the host copy alone)" in g.verdict and "(the host copy under DMA)" in g.verdict
    g = findings_speed.staged_bounds({"bounds": [dict(row, frac_of_lower=0.9, size_bytes=2 * GiB)]})
    assert not g.holds and "stayed under the lower bound at 2 GiB" in g.verdict
    alone = findings_speed.staged_bounds(
        {"bounds": [dict(row, size_bytes=GiB // 4)]}
    )  # nothing from 1 GiB up
    assert not alone.holds and "No size from 1 GiB up was measured, so the target" in alone.verdict
    nan = findings_speed.staged_bounds({"bounds": [dict(row, frac_of_lower=float("nan"))]})
    assert not nan.holds and "stayed under the lower bound at 1 GiB" in nan.verdict
    small = findings_speed.staged_bounds({"bounds": [dict(row, frac_of_lower=0.5, size_bytes=GiB // 4), row]})
    assert (
        small.holds
        and "From 1 GiB up `to_device` reached the lower bound (under it at 256 MiB)." in small.verdict
    )
    assert "(under it at" not in findings_speed.staged_bounds({"bounds": [row]}).verdict
    both = findings_speed.staged_bounds(
        {"bounds": [dict(row, frac_of_lower=0.5, size_bytes=GiB // 4), dict(row, frac_of_lower=0.9)]}
    )
    assert (
        not both.holds
        and "stayed under the lower bound at 256 MiB, 1 GiB (the target judges 1 GiB up)" in both.verdict
    )
    with pytest.raises(ValueError, match="no bounds"):
        findings_speed.staged_bounds({"rows": []})


def test_pin_cached_pays_from_a_size_on():
    # synthetic: the cached pin is 2x pageable's time at 1 KiB and 64 KiB, 0.5x at 1 MiB and 16 MiB
    KiB, MiB = 2**10, 2**20
    f = advice.pin_cached_pays(
        synthetic_sweep(
            {
                "pin_then_copy": {KiB: [0.2], 64 * KiB: [0.2, 0.4], MiB: [0.5], 16 * MiB: [2.0]},
                "pageable": {KiB: [0.1], 64 * KiB: [0.15], MiB: [1.0], 16 * MiB: [4.0]},
            }
        )
    )
    assert f.holds and f["from_bytes"] == MiB and f["slower_sizes"] == [KiB, 64 * KiB]
    assert "took 0.50–0.50x the time of `x.to('cuda')` from 1 MiB up" in f.verdict
    assert "Below 1 MiB it was slower at 2 of 2 sizes, up to 2.0x" in f.verdict
    g = advice.pin_cached_pays(  # synthetic: faster everywhere
        synthetic_sweep({"pin_then_copy": {KiB: [0.05], MiB: [0.5]}, "pageable": {KiB: [0.1], MiB: [1.0]}})
    )
    assert not g.holds and g["from_bytes"] == KiB and "at every size measured (1 KiB up)" in g.verdict


def test_pin_cached_pays_on_the_bundled_sweep():
    from h2dlab.recording import session

    s = session.recording("h200").table("sweep", "pow2-interleaved")
    f = advice.pin_cached_pays(s)
    t = s[~s.warmup & (s.error == "")]
    pin = t[(t.strategy == "pin_then_copy") & (t.host_allocs == 0)].groupby("size_bytes").event_ms.median()
    page = t[t.strategy == "pageable"].groupby("size_bytes").event_ms.median()
    r = (pin / page).dropna()
    assert f["slower_sizes"] == [int(x) for x in r[r >= 1].index]
    assert (r[r.index >= f["from_bytes"]] < 1).all() and r[r.index < f["from_bytes"]].max() >= 1
    assert f.holds


def test_staged_timeline_busy_dma_and_its_rate():
    from h2dlab.findings import speed as findings_speed

    b = datasets.load_benchmark("h200")
    tl = b["timeline_256MiB"]
    f = findings_speed.staged_timeline(tl, b)
    c = pd.DataFrame(tl["chunks"])
    busy = (c.dma_end_ms - c.dma_start_ms).sum()
    assert f["busy_ms"] == pytest.approx(busy) and f["dma_gbps"] == pytest.approx(c.bytes.sum() / busy / 1e6)
    alone = next(r["dma_alone_gbps"] for r in b["bounds"] if r["size_bytes"] == tl["size_bytes"])
    assert f.holds == (busy / tl["wall_ms"] >= 0.85 and f["dma_gbps"] < 0.95 * alone)
    assert f"{tl['n_chunks']} chunks" in f.verdict and f"against {alone:.1f} GB/s" in f.verdict
    # synthetic: the same chunks inside a wall four times as long (the DMA mostly waited): no claim
    g = findings_speed.staged_timeline(dict(tl, wall_ms=4 * tl["wall_ms"]), b)
    assert not g.holds and "keeps the staged copy below" not in g.verdict
    h = findings_speed.staged_timeline(tl)  # no bounds to compare with
    assert not h.holds and h.verdict.endswith(
        f"median {((c.bytes / (c.dma_end_ms - c.dma_start_ms)) / 1e6).median():.1f})."
    )


def test_advice_and_pin_first_pays_refuse_what_they_cannot_judge(inter, cold):
    """Sizes nobody measured gave 'took nan ms, slower than ... (nan ms)' (helper attack)."""
    for size in (0, -5, 1.5, "1MiB", True):
        with pytest.raises(ValueError, match="size_bytes must be a positive whole number of bytes"):
            advice.advice(inter, size, cold=cold)
    for size in (1, 2**40):
        with pytest.raises(
            ValueError, match=r"pin_first_pays: no `x.to\('cuda'\)` copy was measured at or near"
        ):
            advice.pin_first_pays(advice.advice(inter, size, cold=cold))


def test_staged_bounds_says_what_its_lower_bound_is_before_a_copy_falls_under_it():
    """'stayed under the lower bound' reads as a contradiction unless the sentence says the lower
    bound is the target a perfectly overlapped staged copy reaches (reader, session 29)."""
    f = findings_speed.staged_bounds(datasets.load_benchmark("h200"))
    head = f.verdict.split(" At ")[0]
    assert "The lower bound is the slower of the two while the other runs" in head
    assert "so below it is a shortfall" in head
    g = advice.host_copy_ceiling(datasets.load_benchmark("h200"))
    if g.values["beaten_at"]:  # the 2026-12-03 run: to_device beat the host copy alone at 4 GiB
        assert "a host copy measured once and alone is no ceiling" in g.verdict
    else:
        assert "`pinned_reuse`'s peak in the same run" in g.verdict or "below the pinned DMA" in g.verdict


def test_a_staged_best_way_says_its_first_calls_make_the_ring_not_counted(inter, cold):
    t = advice.advice(inter, GiB, cold=cold)
    warm = inter[(inter.strategy == "staged") & inter.warmup & (inter.error == "")]
    slowest = float(warm.event_ms.where(warm.event_ms.notna(), warm.wall_ms).max())
    once = advice.best_way(t, 1)
    assert once["way"] == "staged"
    assert f"slowest staged warm-up took {slowest:.1f} ms" in once.verdict
    # a best way that is not staged says nothing of the ring
    assert "slowest staged warm-up" not in advice.best_way(t, 100).verdict
