"""The survey's verdicts on a SYNTHETIC fleet (every number below is made up by the test,
none is a measurement): a 1000-GPU fleet table with injected sick GPUs is flagged with
precision and recall >= 0.95, each sick GPU with the flag of its injected fault."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.recording.schema import validate
from h2dlab.survey.verdicts import gpu_table, judge

KiB, GiB, MiB = 2**10, 2**30, 2**20
FAULTS = ("slow", "link_degraded", "wrong_numa", "unsteady")


def synthetic_fleet(n_gpus: int = 1000, per_fault: int = 20, reps: int = 10, seed: int = 0):
    """A synthetic fleet table (the survey's columns, one row per copy) of ``n_gpus`` H200s,
    8 a node, and which rank got which fault."""
    rng = np.random.default_rng(seed)
    sick = rng.choice(n_gpus, size=per_fault * len(FAULTS), replace=False)
    fault = {int(r): FAULTS[i // per_fault] for i, r in enumerate(sick)}
    cells = [  # (strategy, direction, largest size, healthy GB/s alone, together factor)
        ("pinned_reuse", "h2d", GiB, 55.3, 0.85),
        ("d2h_pinned_reuse", "d2h", GiB, 54.7, 0.85),
        ("pageable", "h2d", 256 * MiB, 8.0, 0.7),
        ("d2h_pageable", "d2h", 256 * MiB, 1.4, 0.7),
    ]
    plan = [  # one rank's copies
        (strategy, direction, size, phase, world, gbps, crowd, rep, rep < 2)
        for phase, world in (("alone", 1), ("together", 8))
        for strategy, direction, largest, gbps, crowd in cells
        for size in (KiB, largest)
        for rep in range(reps + 2)
    ]
    t = pd.DataFrame(
        plan,
        columns=["strategy", "direction", "size_bytes", "phase", "world", "gbps", "crowd", "i", "warmup"],
    )
    k = len(t)
    df = t.loc[np.tile(np.arange(k), n_gpus)].reset_index(drop=True)
    rank = np.repeat(np.arange(n_gpus), k)
    kind = pd.Series(rank).map(fault).fillna("").to_numpy()
    pinned = df["strategy"].str.contains("pinned").to_numpy()
    alone = (df["phase"] == "alone").to_numpy()
    host_speed = rng.normal(1.0, 0.03, n_gpus)[rank]  # the host's part moves between nodes
    link_speed = rng.normal(1.0, 0.004, n_gpus)[rank]
    rate = df["gbps"].to_numpy() * np.where(pinned, link_speed, host_speed)
    rate *= np.where(alone, 1.0, df["crowd"].to_numpy())
    rate *= np.where(kind == "slow", 0.72, 1.0)
    rate *= np.where((kind == "link_degraded") & pinned, 0.5, 1.0)
    rate *= np.where(kind == "wrong_numa", np.where(pinned, 0.97, 0.85), 1.0)
    jitter = np.where(pinned, 0.005, 0.02)
    jitter = np.where((kind == "unsteady") & alone & pinned, 0.15, jitter)
    size = df["size_bytes"].to_numpy()
    base_ms = np.where(size == KiB, np.where(pinned, 0.011, 0.07), 0.012 + size / (rate * 1e6))
    df["event_ms"] = base_ms * np.abs(rng.normal(1.0, jitter))
    df["wall_ms"] = df["event_ms"] * 1.02
    df["rep"] = np.where(df["warmup"], df["i"], df["i"] - 2)
    local = rank % 8
    df = df.drop(columns=["gbps", "crowd", "i"]).assign(
        run_id=[f"synthetic-r{r:05d}" for r in rank],
        order=np.tile(np.arange(k), n_gpus),
        shape="",
        dtype="uint8",
        t_s=0.0,
        host_allocs=0.0,
        device_allocs=0.0,
        empty_cache=False,
        error="",
        gpu=local,
        host=[f"node{r // 8:03d}" for r in rank],
        rank=rank,
        local_rank=local,
        node_rank=rank // 8,
        status="ok",
        gpu_uuid=[f"GPU-synthetic-{r:05d}" for r in rank],
        gpu_name="NVIDIA H200",
        gpu_numa_node=local // 4,
        cpu_numa_nodes=np.where(kind == "wrong_numa", 1 - local // 4, local // 4).astype(str),
        link_gen_load=np.where(kind == "link_degraded", 4, 5),
        link_width_load=16,
        link_gen_max=5,
        link_width_max=16,
        replays_before=0,
        replays_after=0,
        omp_num_threads="1",
    )
    return validate(df, source="synthetic fleet"), fault


@pytest.fixture(scope="module")
def judged_fleet():
    fleet, fault = synthetic_fleet()
    return judge(gpu_table(fleet)), fault


def test_a_synthetic_fleet_of_1000_gpus_is_flagged_with_precision_and_recall_of_095(judged_fleet):
    gpus, fault = judged_fleet
    assert len(gpus) == 1000
    flagged = set(gpus.loc[gpus["flag"] != "", "rank"].astype(int))
    sick = set(fault)
    precision = len(flagged & sick) / len(flagged)
    recall = len(flagged & sick) / len(sick)
    assert precision >= 0.95, sorted(flagged - sick)
    assert recall >= 0.95, sorted(sick - flagged)


@pytest.mark.parametrize("kind", FAULTS)
def test_each_injected_fault_is_named_by_its_own_flag_and_sentence(judged_fleet, kind):
    gpus, fault = judged_fleet
    ranks = [r for r, f in fault.items() if f == kind]
    got = gpus.set_index("rank").loc[ranks]
    named = got["flag"].str.split(",").map(lambda fs: kind in fs)
    assert named.mean() >= 0.95, got.loc[~named, ["flag", "reason"]]
    words = {
        "slow": "the median of its",
        "link_degraded": "Gen4 x16",
        "wrong_numa": "NUMA node",
        "unsteady": "varied by",
    }
    assert got.loc[named, "reason"].str.contains(words[kind], regex=False).all()


def test_a_slow_gpus_sentence_gives_its_rate_and_its_peers_median(judged_fleet):
    gpus, fault = judged_fleet
    r = next(r for r, f in fault.items() if f == "slow")
    reason = gpus.set_index("rank").at[r, "reason"]
    assert "identical GPUs" in reason and "GB/s" in reason and "robust z" in reason


def _gpus(values, name="NVIDIA H200", **facts):
    n = len(values)
    base = {
        "rank": range(n),
        "host": [f"n{i // 8}" for i in range(n)],
        "local_rank": [i % 8 for i in range(n)],
        "gpu_uuid": [f"GPU-{i}" for i in range(n)],
        "gpu_name": name,
        "status": "ok",
        "error": "",
        "h2d_pinned_alone_gbps": values,
    }
    base.update(facts)
    return pd.DataFrame(base)


@settings(max_examples=40, deadline=None)
@given(
    healthy=st.lists(st.floats(54.0, 56.0), min_size=8, max_size=60),
    factor=st.floats(0.3, 0.88),
    where=st.integers(0, 10_000),
)
def test_one_gpu_below_09x_of_identical_peers_is_flagged_slow_and_no_other(healthy, factor, where):
    values = list(healthy)
    i = where % (len(values) + 1)
    med = float(np.median(values))
    values.insert(i, med * factor)
    out = judge(_gpus(values))
    assert out.loc[i, "flag"] == "slow"
    assert (out.drop(index=i)["flag"] == "").all()  # 54-56 GB/s lie within 5 % of each other


@settings(max_examples=30, deadline=None)
@given(gen=st.integers(1, 6), width=st.sampled_from([1, 2, 4, 8, 16]), gmax=st.integers(1, 6))
def test_a_link_is_degraded_exactly_when_it_trained_below_its_maximum(gen, width, gmax):
    out = judge(
        _gpus([55.0], link_gen_load=[gen], link_width_load=[width], link_gen_max=[gmax], link_width_max=[16])
    )
    assert ("link_degraded" in out.at[0, "flag"]) == (gen < gmax or width < 16)


def test_unlike_gpus_are_not_compared_and_a_lone_gpu_has_no_peers():
    a100 = _gpus([25.0] * 5, name="NVIDIA A100")
    h200 = _gpus([55.0] * 5)
    both = pd.concat([a100, h200], ignore_index=True).assign(rank=range(10))
    assert (judge(both)["flag"] == "").all()  # A100s at 25 GB/s are not slow H200s
    assert judge(_gpus([10.0, 55.0]))["flag"].eq("").all()  # two GPUs: no median to judge by


def test_replays_numa_and_failed_ranks_are_named():
    g = _gpus(
        [55.0, 55.0, 55.0, 55.0],
        replays_before=[3, 3, 0, 0],
        replays_after=[3, 9, 0, 0],
        gpu_numa_node=[0, 0, 1, None],
        cpu_numa_nodes=["0", "0", "0,1", "0"],
        status=["ok", "ok", "ok", "no result"],
        error=["", "", "", "no result: rank 3 wrote nothing"],
    )
    out = judge(g)
    assert list(out["flag"]) == ["", "replays", "", "no_result"]  # node 1 is among 0,1: not wrong
    assert "from 3 to 9" in out.at[1, "reason"]
    assert out.at[3, "reason"].startswith("no result: rank 3")


def test_a_baseline_adds_regressions_of_the_same_gpu_beyond_5_percent():
    now = _gpus([55.0, 55.0, 50.0, 55.0])
    before = _gpus([55.0, 58.5, 55.0, 55.0])  # GPU-1 lost 6 %, GPU-2 lost 9 % (and is slow now)
    out = judge(now, baseline=before)
    assert "regressed" in out.at[1, "flag"] and "regressed" in out.at[2, "flag"]
    assert out.at[0, "flag"] == "" and out.at[3, "flag"] == ""
    assert "0.94x its 58.5 GB/s in the baseline" in out.at[1, "reason"]


def test_unsteady_pageable_copies_do_not_flag_a_gpu_whose_pinned_copies_are_steady():
    g = _gpus(
        [55.0, 55.0, 55.0],
        h2d_pinned_alone_cv=[0.01, 0.01, 0.08],
        h2d_pinned_alone_n=10,
        h2d_pageable_alone_gbps=[8.0, 8.0, 8.0],
        h2d_pageable_alone_cv=[0.09, 0.01, 0.01],
        h2d_pageable_alone_n=10,
    )
    assert judge(g)["flag"].tolist() == ["", "", "unsteady"]
    cpu = _gpus([float("nan")] * 3, name=None, h2d_pageable_alone_gbps=[1.0, 1.0, 1.0])
    cpu = cpu.assign(h2d_pageable_alone_cv=[0.2, 0.01, 0.01], h2d_pageable_alone_n=3)
    assert judge(cpu)["flag"].tolist() == ["unsteady", "", ""]  # no pinned copy: pageable counts
