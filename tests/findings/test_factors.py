"""The missing factors (h2dlab.findings.factors) on the bundled recordings, checked against values
computed here with plain pandas, and on synthetic tables (named synthetic) where the
verdict flips."""

import numpy as np
import pandas as pd
import pytest

from h2dlab.explain import outliers
from h2dlab.findings import factors
from h2dlab.recording import datasets
from h2dlab.recording.env import collect_env

MiB, GiB = 2**20, 2**30


@pytest.fixture(scope="module")
def inter():
    return datasets.run_named(datasets.load("h200_sweep"), "pow2-interleaved")


@pytest.fixture(scope="module")
def tl():
    return datasets.timeline("h200_overlap")


def synthetic(rows):
    base = {"run_id": "synthetic", "warmup": False, "shape": "", "dtype": "", "t_s": 0.0, "error": "",
            "host_allocs": 0.0, "device_allocs": 0.0, "empty_cache": False}  # fmt: skip
    df = pd.DataFrame([{**base, **r} for r in rows])
    df["order"] = range(len(df))
    df["rep"] = df.groupby(["strategy", "size_bytes"]).cumcount()
    return df


def test_machine_reads_env_and_says_what_is_missing(inter):
    env = datasets.run_env(inter)
    f = factors.machine(env, failed_rows=0)
    assert f["numa_nodes"] == env["numa_nodes"] == 1 and f["cpu_affinity"] == env["cpu_affinity"]
    assert f.holds and f"{env['mem_total_gib']:.0f} GiB" in f.verdict
    assert "RLIMIT_MEMLOCK is not in this recording" in f.verdict and "no failed pin" in f.verdict


def test_machine_synthetic_two_nodes_with_limits_flips():
    env = {"numa_nodes": 2, "cpu_count": 64, "cpu_affinity": 32, "mem_total_gib": 512.0,
           "rlimit_memlock_bytes": 64 * 2**10, "cgroup_memory_max_bytes": -1}  # fmt: skip
    f = factors.machine(env, failed_rows=3)
    assert not f.holds and "RLIMIT_MEMLOCK was 64 KiB" in f.verdict and "unlimited" in f.verdict
    assert "3 copies" in f.verdict and "numactl" in f.verdict


def test_collect_env_records_the_pinning_limits():
    import resource

    env = collect_env(gpu=False)
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    assert env["rlimit_memlock_bytes"] == (-1 if soft == resource.RLIM_INFINITY else soft)
    assert env["cgroup_memory_max_bytes"] is None or env["cgroup_memory_max_bytes"] >= -1


def test_gpu_clocks_absent_in_old_recordings(inter):
    f = factors.gpu_clocks(inter)
    assert inter.sm_clock_mhz.isna().all()
    assert not f.holds and "no GPU clock readings" in f.verdict
    assert "`--evidence light`" in f.verdict  # the default loop leaves the clock empty: named as a cause


def test_gpu_clocks_synthetic_low_clock_rows_are_slow():
    rows = [{"strategy": "pinned_reuse", "size_bytes": MiB, "wall_ms": 1.0, "event_ms": 1.0, "sm_clock_mhz": 1980.0}
            for _ in range(8)]  # fmt: skip
    rows += [
        {
            "strategy": "pinned_reuse",
            "size_bytes": MiB,
            "wall_ms": 2.0,
            "event_ms": 2.0,
            "sm_clock_mhz": 345.0,
        }
    ]
    f = factors.gpu_clocks(synthetic(rows))
    assert (
        f.holds and f["low_ratio"]["median"] == pytest.approx(2.0) and f["low_share"] == pytest.approx(1 / 9)
    )
    rows[-1] = {**rows[-1], "wall_ms": 1.0, "event_ms": 1.0}
    assert not factors.gpu_clocks(synthetic(rows)).holds


def test_non_blocking_pageable_matches_pandas(inter):
    f = factors.non_blocking_pageable(inter)
    t = inter[~inter.warmup & (inter.error == "") & (inter.size_bytes >= MiB)]
    m = t.groupby(["strategy", "size_bytes"]).event_ms.median().unstack("strategy")
    r = (m.pageable_non_blocking / m.pageable).dropna()
    assert f["ratio"]["median"] == pytest.approx(r.median()) and f["ratio"]["n"] == len(r)
    assert not f.holds and "no gain" in f.verdict


def test_non_blocking_pageable_synthetic_faster_flips():
    rows = [{"strategy": s, "size_bytes": MiB, "wall_ms": v, "event_ms": v}
            for s, v in (("pageable", 1.0), ("pageable_non_blocking", 0.5)) for _ in range(3)]  # fmt: skip
    assert factors.non_blocking_pageable(synthetic(rows)).holds


def test_overlap_matches_pandas(tl):
    f = factors.overlap(tl)
    c = tl[(tl.op == "copy") & (tl.scenario == "overlap_pageable")]
    assert f["pageable_return_ms"] == pytest.approx(c.host_return_ms.median())
    ends = tl.groupby(["scenario", "rep"]).end_ms.max()
    gain = ends["serial_pinned"].median() / ends["overlap_pinned"].median()
    assert f["gain"] == pytest.approx(gain) and f.holds
    p = tl[(tl.op == "copy") & (tl.scenario == "overlap_pinned")]
    assert f["in_flight_ms"]["min"] == pytest.approx((p.end_ms - p.host_return_ms).min())


def test_overlap_synthetic_no_gain_flips(tl):
    t = tl.copy()
    serial = t.scenario == "serial_pinned"
    t.loc[serial, "end_ms"] = t.loc[serial, "end_ms"] / 3  # one stream as fast as two: no gain
    assert not factors.overlap(t).holds


def test_concurrency_matches_pandas():
    c = datasets.load("h200x2_concurrent")
    f = factors.concurrency(c)
    t = c[~c.warmup & (c.error == "") & (c.size_bytes == GiB)]
    per = t.groupby(["strategy", "world", "gpu"]).event_ms.median().rename("ms").reset_index()
    per["gbps"] = GiB / per.ms / 1e6
    agg = per.groupby(["strategy", "world"]).gbps.sum()
    assert f["by_strategy"]["pinned_reuse"]["aggregate_gbps"] == pytest.approx(agg["pinned_reuse", 2])
    assert f["by_strategy"]["staged"]["scaling"] == pytest.approx(agg["staged", 2] / agg["staged", 1])
    assert f.holds and f["gpus"] == 2


def test_unexplained_counts_and_evidence():
    e = outliers.explain(datasets.load("forum_a100"))
    f = factors.unexplained(e)
    assert f["flagged"] == int(e.is_outlier.sum())
    assert f["unexplained"] == int((e.cause == "unexplained").sum()) == len(f.table)
    assert f["share"] == pytest.approx(f["unexplained"] / f["flagged"]) and not f.holds
    assert f.table.evidence.str.len().gt(0).all()


def test_unexplained_counts_copies_on_their_cpu_throughout():
    """Synthetic (made-up) flagged rows: the sentence counts the unexplained ones whose
    timing thread was on its CPU for at least 90 % of the wall time, and only those."""
    e = pd.DataFrame({"is_outlier": [True] * 4, "cause": ["unexplained"] * 3 + ["gc_pause"],
                      "strategy": ["a"] * 4, "order": [0, 1, 2, 3], "size_bytes": [1] * 4,
                      "wall_ms": [2.0, 2.0, 2.0, 2.0], "cpu_ms": [1.8, 1.79, np.nan, 2.0],
                      "event_ms": [np.nan] * 4, "expected_ms": [1.0] * 4, "evidence": ["x"] * 4})  # fmt: skip
    assert factors.on_cpu_throughout(e).tolist() == [True, False, False, True]
    f = factors.unexplained(e)
    assert " 1 of the 3 kept the timing thread on its CPU for at least 90% of the copy" in f.verdict
    assert "Their extra time is 1.00 ms each, on copies of 1 B." in f.verdict
    one = factors.unexplained(e.iloc[[0, 3]])  # one unexplained copy is said as one
    assert " Its extra time is 1.00 ms, on a copy of 1 B. It kept the timing thread on its CPU" in one.verdict
    two = factors.unexplained(e.assign(wall_ms=[2.0, 3.0, 2.0, 2.0], size_bytes=[1, 2, 1, 1]))
    assert "Their extra time runs from 1.00 to 2.00 ms, on copies of 1 B to 2 B." in two.verdict
    # spinning while CUDA waits for the GPU is on-CPU time too: the sentence must not place
    # the delay on the host
    assert "then the delay was on the GPU's side of the copy" in f.verdict
    assert "went to code running on that thread" not in f.verdict
    assert "on its CPU" not in factors.unexplained(e.drop(columns="cpu_ms")).verdict


def test_unexplained_synthetic_none_flips():
    e = pd.DataFrame({"is_outlier": [True, False], "cause": ["context_init", ""], "strategy": ["a", "a"],
                      "order": [0, 1], "size_bytes": [1, 1], "wall_ms": [9.0, 1.0], "event_ms": [np.nan] * 2,
                      "expected_ms": [1.0, 1.0], "evidence": ["first", ""]})  # fmt: skip
    f = factors.unexplained(e)
    assert f.holds and f["unexplained"] == 0 and f.verdict.startswith("0 of 1")


def test_concurrency_names_no_host_resource_it_did_not_measure():
    # the bundled 2-GPU table: pinned and pageable scale, staged does not; the table has no
    # per-copy host counters, so the verdict must not blame memory bandwidth
    f = factors.concurrency(datasets.load("h200x2_concurrent"))
    by = f["by_strategy"]
    assert by["pageable"]["scaling"] > 1.9 and by["staged"]["scaling"] < 1.9
    assert "memory bandwidth" not in f.verdict
    assert f"`staged` ({by['staged']['scaling']:.2f}x) scaled less" in f.verdict
    assert f"did scale (`pageable` {by['pageable']['scaling']:.2f}x)" in f.verdict
