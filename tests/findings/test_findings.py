"""Findings on the bundled tables, checked against values computed here with plain pandas,
and on small synthetic tables (named synthetic) where the verdict goes the other way."""

import math

import numpy as np
import pandas as pd
import pytest

from h2dlab.explain import outliers
from h2dlab.findings import claims as findings
from h2dlab.findings import forum_claims
from h2dlab.findings import speed as findings_speed
from h2dlab.recording import datasets


@pytest.fixture(scope="module")
def h200():
    return datasets.load("h200_forum")


@pytest.fixture(scope="module")
def a100():
    return datasets.load("forum_a100")


@pytest.fixture(scope="module")
def forum_sizes():
    return datasets.run_named(datasets.load("h200_sweep"), "forum-sizes")


@pytest.fixture(scope="module")
def ea(a100):
    return outliers.explain(a100)


def synthetic(rows, run_id="synthetic"):
    """A synthetic measurement table from dicts (defaults for the columns not given)."""
    base = {
        "run_id": run_id,
        "rep": 0,
        "warmup": False,
        "shape": "",
        "dtype": "float16",
        "t_s": 0.0,
        "event_ms": np.nan,
        "host_allocs": np.nan,
        "device_allocs": np.nan,
        "empty_cache": False,
        "error": "",
    }
    df = pd.DataFrame([{**base, **r} for r in rows])
    if "order" not in df:
        df["order"] = range(len(df))
    return df


# -- context start-up ------------------------------------------------------------------------


def test_context_startup_on_the_reruns(h200):
    f = findings.context_startup(h200)
    first = h200.loc[h200.groupby("run_id")["order"].idxmin()]
    assert f.holds
    assert f["first_wall_ms"]["min"] == pytest.approx(first.wall_ms.min())
    assert f["first_wall_ms"]["max"] == pytest.approx(first.wall_ms.max())
    assert f["startup_ms"]["max"] == pytest.approx((first.wall_ms - first.event_ms).max())
    assert f"{first.wall_ms.min():.0f}–{first.wall_ms.max():.0f} ms" in f.verdict


def test_context_startup_a100_first_row(a100):
    f = findings.context_startup(a100)
    assert f._repr_markdown_() == str(f) == f.verdict
    assert f.holds and f["first_wall_ms"]["median"] == pytest.approx(a100.wall_ms.iloc[0])


def test_context_startup_synthetic_warm_run_flips():
    df = synthetic([{"strategy": "pinned_reuse", "size_bytes": 2**20, "wall_ms": 0.1} for _ in range(8)])
    f = findings.context_startup(df)
    assert not f.holds and "warm" in f.verdict


# -- host allocator growth -------------------------------------------------------------------


def test_host_alloc_growth_matches_the_counter_and_the_rule(h200):
    f = findings.host_alloc_growth(h200)
    pm = h200[h200.strategy == "pin_memory"].sort_values("order")
    counted = int((pm.host_allocs > 0).sum())
    blocks = pm.size_bytes.map(lambda n: 2 ** math.ceil(math.log2(n)))
    first_of_class = ~pd.concat([blocks, pm.run_id], axis=1).duplicated()
    assert (first_of_class == (pm.host_allocs > 0)).all()  # the rule, checked independently
    assert f.holds and f["new_blocks"] == counted == 36 and f["mismatches"] == 0
    sh = f.table[f.table.run == "shuffled-1"]
    assert {7.875, 15.375, 26.625, 36.0, 163.5} <= set(sh.size_mib)
    # Growth only "just past a power of two" in the size-ordered runs.
    assert f.table[f.table.run.str.startswith("ascending")].smallest_of_class.all()
    assert not sh.smallest_of_class.all()
    assert "29 of 36" in f.verdict


def test_host_alloc_growth_cost_per_mib(h200):
    f = findings.host_alloc_growth(h200)
    t = f.table[f.table.block_mib >= 16]
    pm = h200[(h200.strategy == "pin_memory") & (h200.host_allocs == 0)]
    pm = pm.assign(block=pm.size_bytes.map(lambda n: 2 ** math.ceil(math.log2(n)) / 2**20))
    cached = pm.groupby(["run_id", "block"]).event_ms.median()
    names = {v: k for k, v in h200.attrs["run_names"].items()}
    per = [(r.ms - cached[(names[r.run], r.block_mib)]) / r.block_mib for r in t.itertuples()]
    assert f["ms_per_mib"]["median"] == pytest.approx(np.median(per))
    assert 0.3 < f["ms_per_mib"]["median"] < 1.0


def test_host_alloc_growth_synthetic_counter_breaks_rule():
    rows = [
        {"strategy": "pin_memory", "size_bytes": s, "wall_ms": 1.0, "host_allocs": a}
        for s, a in ((3 * 2**20, 1), (3 * 2**20, 1), (5 * 2**20, 1))
    ]
    f = findings.host_alloc_growth(synthetic(rows))
    assert not f.holds and f["mismatches"] == 1 and "break the rule" in f.verdict


def test_allocator_rule_is_stated():
    assert "power of two" in findings.ALLOCATOR_RULE and "cudaHostAlloc" in findings.ALLOCATOR_RULE
    assert "empty_host_cache" in findings.EMPTY_CACHE_NOTE and "_host_emptyCache" in findings.EMPTY_CACHE_NOTE


# -- empty_cache() and device allocation ----------------------------------------------------


def test_device_alloc_cost_forum_vs_reused_buffer(h200, forum_sizes):
    f = findings.device_alloc_cost(h200, forum_sizes)
    firsts = h200.groupby("run_id")["order"].transform("min") == h200["order"]
    p = h200[(h200.strategy == "pinned_to_cuda") & ~firsts].groupby("size_bytes").event_ms.median()
    r = forum_sizes[(forum_sizes.strategy == "pinned_reuse") & ~forum_sizes.warmup]
    r = r.groupby("size_bytes").event_ms.median()
    ratio = (p / r).dropna()
    assert f.holds and f["ratio"]["median"] == pytest.approx(ratio.median())
    assert f["ratio"]["n"] == 210 and f["device_allocs"]["min"] >= 1
    assert f"{ratio.median():.2f}x" in f.verdict


def test_device_alloc_cost_synthetic_no_cost_flips():
    rows = [
        {"strategy": "pinned_to_cuda", "size_bytes": s, "wall_ms": 1.0, "event_ms": 1.0, "device_allocs": 1}
        for s in (2**20, 2**20, 2**21)
    ]
    reuse = synthetic(
        [
            {"strategy": "pinned_reuse", "size_bytes": s, "wall_ms": 1.0, "event_ms": 1.0}
            for s in (2**20, 2**21)
        ]
    )
    f = findings.device_alloc_cost(synthetic(rows), reuse)
    assert not f.holds and "no measurable cost" in f.verdict


# -- host clock vs CUDA events ---------------------------------------------------------------


def test_clocks_on_the_reruns(h200):
    f = findings.clocks(h200)
    d = h200[h200.groupby("run_id")["order"].transform("min") != h200["order"]]
    off = d.wall_ms / d.event_ms - 1 > 0.05
    assert f["share_over"] == pytest.approx(off.mean())
    assert f["over_that_are_large"] == pytest.approx((d[off].size_bytes >= 4 * 2**20).mean())
    assert f["over_that_are_large"] > 0.5  # most disagreements are at >= 4 MiB: the old claim was wrong
    assert not f.holds and "disagree too" in f.verdict
    # both rates, small and large apart: nearly every step is large, so "most disagreements are
    # large" says nothing (reader, session 29); small copies disagree far more often
    small = d.size_bytes < 4 * 2**20
    assert f"{int(off[small].sum())} of the {int(small.sum())} copies under 4 MiB" in f.verdict
    assert f"{off[~small].mean():.0%} of the {int((~small).sum())} of 4 MiB or more" in f.verdict
    assert off[small].mean() > off[~small].mean()
    pm = d[d.strategy == "pin_memory"]
    assert f["event_over_wall"]["pin_memory"] == pytest.approx((pm.event_ms / pm.wall_ms).median())
    assert "bracket host work" in f.verdict


def test_clocks_synthetic_agreement_flips():
    rows = [
        {"strategy": "pinned_reuse", "size_bytes": 2**23, "wall_ms": 1.01, "event_ms": 1.0} for _ in range(6)
    ]
    f = findings.clocks(synthetic(rows))
    assert f.holds and "agree" in f.verdict


def test_clocks_without_events_is_a_value_error(a100):
    with pytest.raises(ValueError, match="no CUDA event"):
        findings.clocks(a100)


# -- one shot per size -----------------------------------------------------------------------


def test_single_shot_spread(forum_sizes):
    f = forum_claims.single_shot_spread(forum_sizes)
    t = forum_sizes[~forum_sizes.warmup]
    c = t.groupby(["strategy", "size_bytes"]).event_ms.agg(["max", "median"])
    worst = (c["max"] / c["median"]).groupby("strategy").max()
    assert f["by_strategy"]["pageable"]["worst_max"] == pytest.approx(worst["pageable"])
    assert f.holds


def test_single_shot_spread_synthetic_steady_flips():
    rows = [{"strategy": "pageable", "size_bytes": 2**20, "wall_ms": 1.0} for _ in range(5)]
    assert not forum_claims.single_shot_spread(synthetic(rows)).holds


# -- episodes, the A100 slow stretch, 966 vs 1026, the link --------------------------------


def test_episodes_a100_and_none_on_h200(ea, h200):
    f = forum_claims.episodes(ea)
    e = ea[ea.episode >= 0].groupby(["strategy", "episode"]).order.agg(["min", "max"])
    assert f.holds and f["count"] == len(e) == 3
    assert sorted(zip(f.table.first_row, f.table.last_row, strict=True)) == sorted(
        zip(e["min"], e["max"], strict=True)
    )
    # rows: the stretch's whole span; flagged: the copies labelled episode (reader, session 29:
    # direct_to_cuda 179-202 is 24 rows, 23 of them flagged)
    span = ea[ea.episode >= 0].groupby(["strategy", "episode"])
    assert sorted(f.table.rows) == sorted(span.size())
    assert sorted(f.table.flagged) == sorted(span.is_outlier.sum())
    assert sorted(f.table.flagged) == sorted(
        ea[(ea.episode >= 0) & (ea.cause == "episode")].groupby(["strategy", "episode"]).size()
    )
    assert (f.table.flagged < f.table.rows).any()
    g = forum_claims.episodes(outliers.explain(h200))
    assert not g.holds and g.verdict.startswith("No episode")


def test_slow_stretch_host_column_normal_device_columns_slow(ea):
    f = forum_claims.slow_stretch(ea)
    lo, hi = f["rows"]
    w = ea[ea.order.between(lo, hi)]
    r = (w.wall_ms / w.expected_ms).groupby(w.strategy).median()
    assert (lo, hi) == (179, 202)
    assert f.holds and r["pin_memory"] < 1.1 and r["pinned_to_cuda"] > 2 and r["direct_to_cuda"] > 2
    assert f["host_ratio"] == pytest.approx(r["pin_memory"])
    # a host-clock-only table: the device side is the likelier place, not a proven one (reader, session 29)
    assert "consistent with the device side" in f.verdict and "not the host" not in f.verdict


def test_slow_stretch_synthetic_host_also_slow_flips(ea):
    e = ea.copy()
    m = (e.strategy == "pin_memory") & e.order.between(179, 202)
    e.loc[m, "wall_ms"] = e.loc[m, "expected_ms"] * 3  # synthetic: the host column slowed too
    assert not forum_claims.slow_stretch(e).holds


def test_size_pair_rows_and_spread(ea, h200):
    f = forum_claims.size_pair(ea, h200)
    rows = sorted(ea[ea["shape"].isin(["(24, 2, 1, 966, 4096)", "(24, 2, 1, 1026, 4096)"])].order.unique())
    assert f["rows"] == tuple(rows) == (193, 205)
    s, b = (seq * 24 * 2 * 4096 * 2 for seq in (966, 1026))
    p = h200[h200.size_bytes.isin([s, b])].pivot_table(
        index=["run_id", "strategy"], columns="size_bytes", values="event_ms"
    )
    faster = (p[b] < p[s]).groupby("strategy").sum()
    for strat, n in faster.items():
        assert f["by_strategy"][strat]["larger_faster"] == n
    assert not f.holds and "run-to-run spread" in f.verdict
    assert "row 193" in f.verdict and "row 205" in f.verdict


def test_size_pair_synthetic_larger_always_faster_flips(ea, h200):
    s, b = (seq * 24 * 2 * 4096 * 2 for seq in (966, 1026))
    h = h200.copy()
    h.loc[h.size_bytes == b, "event_ms"] = h.loc[h.size_bytes == s, "event_ms"].min() / 2  # synthetic
    assert forum_claims.size_pair(ea, h).holds


def test_size_pair_larger_faster_because_the_smaller_made_a_new_pinned_block_is_not_a_size_effect(ea, h200):
    # issue 31: seq 966 is the first request of the 512 MiB block class in an ascending run
    s, b = (seq * 24 * 2 * 4096 * 2 for seq in (966, 1026))
    h = h200.copy()
    pin = h.strategy == "pin_memory"
    h.loc[pin & (h.size_bytes == b), "event_ms"] = (
        h.loc[pin & (h.size_bytes == s), "event_ms"].min() / 2
    )  # synthetic
    h.loc[pin & (h.size_bytes == s), "host_allocs"] = 1.0  # synthetic: a new block at every seq 966
    h.loc[pin & (h.size_bytes == b), "host_allocs"] = 0.0
    f = forum_claims.size_pair(ea, h)
    assert f["by_strategy"]["pin_memory"]["larger_faster"] == f["by_strategy"]["pin_memory"]["runs"]
    assert not f.holds and f["new_block"] == ["pin_memory"]
    assert "made a new pinned block in every run" in f.verdict and "a real size effect" not in f.verdict
    h.loc[pin & (h.size_bytes == s) & (h.run_id == h.run_id.iloc[0]), "host_allocs"] = 0.0  # one run without
    assert forum_claims.size_pair(ea, h).holds


def test_link_estimate(a100, h200, forum_sizes):
    from h2dlab.explain import model

    f = forum_claims.link_estimate(a100, h200, forum_sizes)
    g = model.fit(a100[a100.strategy == "pinned_to_cuda"], by=("strategy",), n_boot=0).gbps.iloc[0]
    assert f["a100_gbps"] == pytest.approx(g)
    assert f["corrected_gbps"] == pytest.approx(g * f["reuse_gbps"] / f["forum_gbps"])
    assert f["factor"] > 1 and f.holds and "Gen4" in f.verdict and "on the NVIDIA H200 the same" in f.verdict
    # Against a Gen3 link (15.75 GB/s on paper) the same numbers do not fit.
    assert not forum_claims.link_estimate(a100, h200, forum_sizes, gen=3).holds
    # Above Gen3 on paper and within Gen4: the verdict says both bounds.
    assert "more than PCIe Gen3 x16 allows (15.75 GB/s on paper) and within Gen4 x16 (31.5" in f.verdict
    # Within Gen5 but within Gen4 too: the figure cannot single out Gen5.
    g5 = forum_claims.link_estimate(a100, h200, forum_sizes, gen=5)
    assert not g5.holds and "cannot single out Gen5" in g5.verdict and "consistent with" not in g5.verdict


def test_host_alloc_growth_synthetic_page_faults_are_reported():
    rows = [
        {
            "strategy": "pin_memory",
            "size_bytes": 3 * 2**20,
            "wall_ms": 5.0,
            "host_allocs": 1,
            "minflt": 1024.0,
        },
        {"strategy": "pin_memory", "size_bytes": 3 * 2**20, "wall_ms": 1.0, "host_allocs": 0, "minflt": 0.0},
    ]
    f = findings.host_alloc_growth(synthetic(rows))
    assert f["faults_per_page"]["median"] == pytest.approx(1024 / (4 * 2**20 / 4096))  # a 4 MiB block
    assert "page faults per 4 KiB page" in f.verdict


def test_host_alloc_growth_emptied_each_size_says_every_size_made_a_block():
    al = datasets.run_named(datasets.load("h200_allocator"), "pin-emptied")
    f = findings.host_alloc_growth(al, emptied_each_size=True)
    pin = al[(al.strategy == "pin_then_copy") & (al.error == "")]
    assert f["new_blocks"] == pin.size_bytes.nunique() == int((pin.host_allocs > 0).sum())
    assert f.holds and "every size made its own block" in f.verdict and "first use" not in f.verdict


def test_single_shot_spread_two_reps_and_none_repeated():
    rows = [
        {"strategy": "pageable", "size_bytes": 2**20, "wall_ms": v, "rep": i}
        for i, v in enumerate((1.0, 3.0))
    ]
    f = forum_claims.single_shot_spread(synthetic(rows))
    assert f["by_strategy"]["pageable"]["worst_max"] == pytest.approx(3.0 / 2.0)  # max over the median of two
    assert "(2 per size, median)" in f.verdict
    g = forum_claims.single_shot_spread(synthetic(rows[:1]))
    assert not g.holds and "unknown" in g.verdict


def test_host_alloc_growth_one_rep_emptied_uses_the_warm_run_as_baseline():
    # SYNTHETIC: every emptied-run row makes a new block (one rep); the warm run has cached rows.
    sizes = (20 * 2**20, 24 * 2**20)
    emptied = synthetic(
        [{"strategy": "pin_then_copy", "size_bytes": s, "wall_ms": 30.0, "host_allocs": 1} for s in sizes]
    )
    warm = synthetic(
        [
            {"strategy": "pin_then_copy", "size_bytes": s, "wall_ms": w, "host_allocs": 0}
            for s, w in zip(sizes, (6.0, 8.0), strict=True)
        ]
    )
    assert np.isnan(findings.host_alloc_growth(emptied, emptied_each_size=True)["ms_per_mib"]["median"])
    f = findings.host_alloc_growth(emptied, emptied_each_size=True, reuse=warm)
    per = [(30.0 - 6.0) / 32, (30.0 - 8.0) / 32]  # both requests get a 32 MiB block
    assert f["ms_per_mib"]["median"] == pytest.approx(np.median(per))
    assert f.table.cached_ms.tolist() == [6.0, 8.0]


def test_single_shot_spread_two_reps_far_apart_is_not_called_safe():
    # synthetic: two shots of one size 1.6x apart; slowest over their midpoint is only 1.23x
    rows = [
        {"strategy": "pinned_reuse", "size_bytes": 2**20, "wall_ms": v, "rep": i}
        for i, v in enumerate((1.0, 1.6))
    ]
    f = forum_claims.single_shot_spread(synthetic(rows))
    assert f["by_strategy"]["pinned_reuse"]["worst_max"] == pytest.approx(1.6 / 1.3)
    assert f["by_strategy"]["pinned_reuse"]["worst_max_over_min"] == pytest.approx(1.6)
    assert f.holds
    assert "would not have misled" not in f.verdict
    assert "came 1.6x apart (`pinned_reuse`)" in f.verdict


def test_host_alloc_growth_counts_the_faults_of_every_thread():
    # synthetic: a cudaHostRegister-style new block whose pages fault in worker threads, so the
    # timing thread's minflt reads 0 while the process-wide proc_faults reads one per page
    rows = [
        {"strategy": "pin_memory", "size_bytes": 3 * 2**20, "wall_ms": 5.0, "host_allocs": 1,
         "minflt": 0.0, "proc_faults": 1024.0},
        {"strategy": "pin_memory", "size_bytes": 3 * 2**20, "wall_ms": 1.0, "host_allocs": 0,
         "minflt": 0.0, "proc_faults": 0.0},
    ]  # fmt: skip
    f = findings.host_alloc_growth(synthetic(rows))
    assert f["faults_per_page"]["median"] == pytest.approx(1.0)
    assert "1.00 page faults of the whole process per 4 KiB page of the new block" in f.verdict
    g = findings.host_alloc_growth(synthetic(rows).drop(columns="proc_faults"))
    assert g["faults_per_page"]["median"] == 0 and "0.00 minor page faults per 4 KiB page" in g.verdict


def test_slow_stretch_in_ascending_order_does_not_rule_out_the_sizes(ea):
    # the A100 table's sizes ascend with time: a moment and a band of sizes look alike there
    f = forum_claims.slow_stretch(ea)
    assert f.holds and f["ascending"]
    assert "not a property of these sizes" not in f.verdict
    assert "cannot tell a moment from a band of sizes" in f.verdict
    e = ea.copy()  # synthetic: the same rows with the stretch's sizes reversed (no longer ascending)
    m = e.order.between(179, 202)
    for s in e.loc[m, "strategy"].unique():
        k = m & (e.strategy == s)
        e.loc[k, "size_bytes"] = e.loc[k, "size_bytes"].to_numpy()[::-1]
    g = forum_claims.slow_stretch(e)
    assert not g["ascending"] and "a moment, not a property of these sizes" in g.verdict


def test_device_alloc_cost_names_the_sizes_that_did_not_pay():
    """A median ratio above the bar must not claim that every copy paid (reader, session 29:
    the allocator run's small sizes paid 2-3.7x, its large ones none). Synthetic tables."""
    small, large = [2**10, 2**11, 2**12], [2**22, 2**23]
    emptied = synthetic(
        [
            {"strategy": "pageable", "size_bytes": s, "wall_ms": 0.3, "event_ms": 0.3, "device_allocs": 1}
            for s in small
        ]
        + [
            {"strategy": "pageable", "size_bytes": s, "wall_ms": 0.9, "event_ms": 0.9, "device_allocs": 1}
            for s in large
        ]
    )
    kept = synthetic(
        [{"strategy": "pageable", "size_bytes": s, "wall_ms": 0.1, "event_ms": 0.1} for s in small]
        + [{"strategy": "pageable", "size_bytes": s, "wall_ms": 1.0, "event_ms": 1.0} for s in large]
    )
    f = findings.device_alloc_cost(emptied, kept, strategy="pageable", baseline="pageable")
    assert f.holds and "every copy" not in f.verdict
    # the table's first row (1 KiB) is its run's first operation, left out
    assert "At 2 sizes (2 KiB to 4 KiB) it took 3.00x, a median 0.20 ms more" in f.verdict
    assert "At 2 sizes (4 MiB to 8 MiB) it took 0.90x, none more than 1.05x" in f.verdict
    assert list(f.table.columns) == ["size_bytes", "emptied_ms", "kept_ms", "ratio", "extra_ms"]
    everywhere = findings.device_alloc_cost(emptied, kept.assign(wall_ms=0.1, event_ms=0.1), strategy="pageable",
                                            baseline="pageable")  # fmt: skip
    assert "makes every copy pay for device allocation" in everywhere.verdict


def test_context_startup_says_mostly_where_a_first_operation_itself_ran_long():
    """data/h200's forum: in shuffled-1 the first pin_memory() also made a new pinned block,
    so start-up was 72 % of its time, not all of it (reader, session 29)."""
    from h2dlab.recording import sources

    forum = sources.load("h200:forum")
    f = findings.context_startup(forum)
    t = f.table.assign(share=f.table.startup_ms / f.table.wall_ms)
    worst = t.loc[t.share.idxmin()]
    assert worst["run"] == "shuffled-1" and t.share.min() < 0.9
    assert "not the copy" not in f.verdict
    assert (
        f"({t.share.min():.0%}–{t.share.max():.0%} of each run's first operation): mostly CUDA starting up. "
        f"In run shuffled-1 the operation itself took {worst['event_ms']:.1f} ms by CUDA events" in f.verdict
    )


def test_context_startup_all_but_a_tenth_is_start_up_and_no_events_is_only_consistent(a100):
    rows = [{"strategy": "pinned_reuse", "size_bytes": 2**20, "wall_ms": 200.0, "event_ms": 1.0}] + [
        {"strategy": "pinned_reuse", "size_bytes": 2**20, "wall_ms": 1.0, "event_ms": 1.0} for _ in range(5)
    ]
    f = findings.context_startup(synthetic(rows))
    assert (
        f.holds
        and ". Of that time, 199 ms passed before" in f.verdict
        and "that is CUDA starting up, not the copy" in f.verdict
    )
    a = findings.context_startup(a100)  # the forum's table has no CUDA events
    assert "looks like CUDA starting up; the table has no CUDA events to tell the two apart" in a.verdict


def test_single_shot_spread_speaks_of_two_repetitions_only_when_there_are_two():
    # issue 31: "With two repetitions..." stood above an output with 3 (synthetic rows)
    def rows(n):
        return [
            {"strategy": "pageable", "size_bytes": 2**20, "wall_ms": 1.0 + 0.1 * i, "rep": i}
            for i in range(n)
        ]

    two, three = (forum_claims.single_shot_spread(synthetic(rows(n))) for n in (2, 3))
    assert "With two repetitions the median is their midpoint" in two.verdict and "(2 per size" in two.verdict
    assert "two repetitions" not in three.verdict.lower() and "(3 per size, median)" in three.verdict
    assert "Two shots" not in three.verdict


@pytest.fixture(scope="module")
def sweep() -> pd.DataFrame:
    return datasets.load("h200_sweep")


@pytest.mark.parametrize("fn", [findings_speed.bandwidth, findings_speed.small_copy_floor])
def test_speed_findings_on_a_table_with_no_timed_copy_say_so(sweep, fn):
    """An empty selection (a typo'd strategy, only warm-up rows) raised pandas' 'cannot
    convert float NaN to integer' (bandwidth) or IndexError (small_copy_floor)."""
    for empty in (sweep.head(0), sweep[sweep.warmup]):
        with pytest.raises(ValueError, match=f"{fn.__name__} needs timed copies that succeeded"):
            fn(empty)


def test_small_copy_floor_refuses_what_is_no_table():
    with pytest.raises(TypeError, match="DataFrame"):
        findings_speed.small_copy_floor([])
