"""On a real GPU: the Timer's evidence columns are finite and consistent on CUDA rows,
and a new pinned block shows up as page faults (issue 17's probe); the scheduler columns
of schema 3 are filled, and ``issue_ms`` separates an asynchronous copy (issued long
before it ends) from a synchronous one."""

import importlib.util
import math

import numpy as np
import torch

from h2dlab.measure.device import empty_host_cache
from h2dlab.measure.harness import sweep
from h2dlab.measure.spec import SweepSpec
from h2dlab.measure.threadstat import sched_state
from h2dlab.measure.timing import RUSAGE_SCOPE, Timer
from h2dlab.recording.schema import ADDED_V3

MiB = 1024**2
HAS_NVML = importlib.util.find_spec("pynvml") is not None


def test_evidence_on_cuda_rows(tmp_path):
    spec = SweepSpec(
        ("pinned_reuse", "pageable", "pin_then_copy", "d2h_pageable"),
        (MiB, 64 * MiB),
        device="cuda",
        reps=3,
        warmup=1,
        evidence="full",
    )  # fmt: skip  (the readers light mode leaves out)
    df = sweep(spec, out=tmp_path / "e.csv", progress=False)
    assert (df["error"] == "").all()
    assert df["minflt"].ge(0).all() and df["majflt"].ge(0).all() and df["gc_count"].ge(0).all()
    assert df["cpu_ms"].ge(0).all() and (df["cpu_ms"] <= df["wall_ms"] + 1.0).all()
    if HAS_NVML:
        assert df["sm_clock_mhz"].gt(0).all(), df["sm_clock_mhz"].describe()
        procs = df["gpu_procs"]
        assert (procs.isna() | procs.ge(0)).all()
    else:
        assert df["sm_clock_mhz"].isna().all() and df["gpu_procs"].isna().all()
    # A pageable 64 MiB copy keeps the timing thread busy (the driver's staging memcpy).
    busy = df[(df.strategy == "pageable") & (df.size_bytes == 64 * MiB) & ~df.warmup]
    assert busy["cpu_ms"].median() > 0.1 * busy["wall_ms"].median()


def test_a_new_pinned_block_faults_once_per_page():
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    empty_host_cache()
    timer = Timer(torch.device("cuda", 0))
    x, rec = timer(lambda: torch.empty(64 * MiB, dtype=torch.uint8, pin_memory=True))
    assert rec["host_allocs"] == 1
    if RUSAGE_SCOPE:
        pages = 64 * MiB // 4096
        assert rec["minflt"] >= 0.25 * pages, rec  # the probe saw one fault per 4 KiB page
    del x  # its block goes back to the host allocator's cache
    y, cached = timer(lambda: torch.empty(64 * MiB, dtype=torch.uint8, pin_memory=True))
    assert cached["host_allocs"] == 0, cached  # the cached block, no new cudaHostAlloc
    if RUSAGE_SCOPE:
        assert cached["minflt"] < 0.05 * 64 * MiB // 4096, cached
    assert np.isfinite(cached["cpu_ms"]) and y.is_pinned()


def test_scheduler_columns_on_cuda_rows(tmp_path):
    spec = SweepSpec(("pinned_reuse", "pageable", "pin_then_copy", "d2h_pageable"), (4096, 64 * MiB),
                     device="cuda", reps=5, warmup=1)  # fmt: skip
    df = sweep(spec, out=tmp_path / "s.csv", progress=False)
    assert (df["error"] == "").all()
    has_schedstat = not math.isnan(sched_state()[0])
    if has_schedstat:
        assert df["run_delay_ms"].notna().all() and df["run_delay_ms"].ge(0).all(), df[
            "run_delay_ms"
        ].describe()
        assert df["cpu_moved"].isin([0.0, 1.0]).all()
        # the wait is read just outside the timed window, so a little of it may lie around
        # the copy; on an idle host nearly every copy's wait fits in its wall time
        assert (df["run_delay_ms"] <= df["wall_ms"] + 1.0).mean() >= 0.95, df["run_delay_ms"].describe()
    else:
        assert df["run_delay_ms"].isna().all() and df["cpu_moved"].isna().all()
    if RUSAGE_SCOPE:
        assert df["nivcsw"].ge(0).all() and df["nvcsw"].ge(0).all()
        # every thread's faults, read over a wider window, include the timing thread's
        assert (df["proc_faults"] >= df["minflt"] + df["majflt"]).all()
    # every thread of the process includes the timing thread, read over a wider window
    assert (df["proc_cpu_ms"] >= df["cpu_ms"] - 0.01).all()
    assert df["issue_ms"].gt(0).all() and (df["issue_ms"] <= df["wall_ms"]).all()
    assert df["gc_ms"].ge(0).all() and (df["gc_ms"] <= df["wall_ms"] + 0.5).all()
    assert (df.loc[df["gc_count"] == 0, "gc_ms"] == 0).all()
    timed = df[~df.warmup & (df.size_bytes == 64 * MiB)].groupby("strategy")
    issue, wall = timed["issue_ms"].median(), timed["wall_ms"].median()
    # pinned_reuse is asynchronous: issued in microseconds, then ~1 ms of DMA to wait for
    assert issue["pinned_reuse"] < 0.5 * wall["pinned_reuse"], (issue, wall)
    # a pageable copy returns once the driver has staged it: most of it is in the call
    assert issue["pageable"] > 0.5 * wall["pageable"], (issue, wall)
    assert set(ADDED_V3) <= set(df.columns)


def test_other_threads_columns_on_cuda_rows(tmp_path):
    """Schema 4 on the GPU: every row says how many other threads the process had and
    what they ran; a 64 MiB pin_then_copy copies into the pinned block on PyTorch's
    intra-op threads, so other threads run CPU during it and one of them is named; the
    exact total is never below its busiest thread's."""
    spec = SweepSpec(
        ("pin_then_copy", "pinned_reuse"), (64 * MiB,), device="cuda", reps=3, warmup=1, evidence="full"
    )
    df = sweep(spec, out=tmp_path / "o.csv", progress=False)
    assert (df["error"] == "").all()
    assert df["n_threads"].ge(1).all() and df["others_cpu_ms"].ge(0).all()
    assert (df["busiest_cpu_ms"] <= df["others_cpu_ms"] + 1e-9).all()
    pin = df[(df.strategy == "pin_then_copy") & ~df.warmup]
    if torch.get_num_threads() > 1:
        assert pin["others_cpu_ms"].median() > 0.05 * pin["wall_ms"].median(), pin[
            ["others_cpu_ms", "wall_ms"]
        ]
        assert (pin["busiest_thread"] != "").all()
