"""What runs inside and between timed copies, checked with a fake clock and a fake GPU
(synthetic: nothing here is measured, every call is logged in order).

1. Between the two CUDA events there is only the copy: no clock, counter or evidence read
   (before schema 6 the host's issue clock sat between the copy and the end event).
2. ``measure``'s default loop does a fixed, small set of reads between two timed copies:
   no NVML, no walk over the other threads, no flattened allocator statistics, no pandas
   frame per row (each of which cost 0.1-1 ms on the H200 host); counted, not timed.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from h2dlab.measure import harness as measure
from h2dlab.measure import recorder, strategies, timing
from h2dlab.measure.spec import SweepSpec
from tests import fake_cuda

CUDA = torch.device("cuda")


class Log(list):
    def wrap(self, name, fn):
        def logged(*a, **k):
            self.append(name)
            return fn(*a, **k)

        return logged


@pytest.fixture
def gpu(monkeypatch):
    """A fake GPU whose events, synchronisation, counters, NVML and thread reads log each call."""
    log = Log()
    fake_cuda.install(monkeypatch)
    names = iter(itertools.cycle(["start", "end"]))

    class Event:
        def __init__(self, enable_timing=False):
            self.name = next(names)

        def record(self, stream=None):
            log.append(f"{self.name}.record")

        def synchronize(self):
            log.append("event.synchronize")

        def elapsed_time(self, other):
            return 0.25

    host = {"num_host_alloc": 3}
    dev_stats = {"segment": {"all": {"allocated": 5}}}
    for name, value in {
        "Event": Event,
        "is_initialized": lambda: True,
        "synchronize": log.wrap("synchronize", lambda device=None: None),
        "host_memory_stats_as_nested_dict": log.wrap("host_stats", lambda: host),
        "memory_stats_as_nested_dict": log.wrap("device_stats", lambda device=None: dev_stats),
        # the flattened forms (what the loop read before schema 6): counted as costly
        "host_memory_stats": log.wrap("flattened_stats", lambda: {"num_host_alloc": 3}),
        "memory_stats": log.wrap("flattened_stats", lambda device=None: {"segment.all.allocated": 5}),
    }.items():
        monkeypatch.setattr(torch.cuda, name, value, raising=False)
    monkeypatch.setattr(timing, "_nvml", log.wrap("nvml", lambda dev: None))
    for name in ("others_cpu_ns", "others_wait_ns", "sched_state"):
        monkeypatch.setattr(timing, name, log.wrap(name, getattr(timing, name)))
    fake_time = SimpleNamespace(
        **{
            n: log.wrap(n, getattr(time, n))
            for n in ("perf_counter", "thread_time", "process_time", "monotonic")
        }
    )
    monkeypatch.setattr(timing, "time", fake_time)
    return log


def _fake_clock(log, step=0.001):
    ticks = itertools.count(0.0, step)
    return log.wrap("clock", lambda: next(ticks))


def test_only_the_copy_runs_between_the_start_and_the_end_event(gpu):
    timer = timing.Timer(CUDA, clock=_fake_clock(gpu))
    out, rec = timer(gpu.wrap("copy", lambda: 7))
    assert out == 7 and rec["event_ms"] == 0.25 and rec["wall_ms"] == pytest.approx(1.0)
    a, b = gpu.index("start.record"), gpu.index("end.record")
    assert gpu[a + 1 : b] == ["copy"]
    # the host clock starts right before the start event (a clock read at most between)...
    start = max(i for i in range(a) if gpu[i] == "clock")
    assert set(gpu[start + 1 : a]) <= {"perf_counter"}
    # ...and stops after the wait for the GPU, with only the issue clock before that wait
    stop = gpu.index("clock", b)
    assert gpu[b + 1 : stop] == ["perf_counter", "synchronize"]
    assert timer.full  # Timer's own default stays full (forum, duplex)


@pytest.mark.parametrize("evidence", ["light", "full"])
def test_no_evidence_read_sits_in_the_event_window_whatever_the_evidence(gpu, evidence):
    timer = timing.Timer(CUDA, clock=_fake_clock(gpu), evidence=evidence)
    for _ in range(3):
        timer(gpu.wrap("copy", lambda: None))
    starts = [i for i, e in enumerate(gpu) if e == "start.record"]
    ends = [i for i, e in enumerate(gpu) if e == "end.record"]
    assert len(starts) == len(ends) == 3
    assert all(gpu[a + 1 : b] == ["copy"] for a, b in zip(starts, ends, strict=True))


def _between_copies(log: Log) -> list[Counter]:
    """The calls logged between each timed copy's end event and the next one's start event."""
    ends = [i for i, e in enumerate(log) if e == "end.record"]
    starts = [i for i, e in enumerate(log) if e == "start.record"]
    return [Counter(log[e + 1 : s]) for e, s in zip(ends, starts[1:], strict=False)]


def _sweep_on_fake_gpu(gpu, monkeypatch, tmp_path, evidence, step=0.0001, order="shuffled"):
    """Two cells of 7 pageable copies on the fake GPU; the fake clock advances ``step`` s a
    read (0.1 ms: copies faster than ``harness.DEFER_BELOW_MS``). ``prepare`` and
    ``cleanup`` are logged too."""
    frames = []
    real_init = pd.DataFrame.__init__

    def counting_init(self, *a, **k):
        frames.append(1)
        gpu.append("DataFrame")
        real_init(self, *a, **k)

    real_copy = strategies.Pageable.copy
    monkeypatch.setattr(strategies.Pageable, "copy", lambda self, x: gpu.wrap("copy", real_copy)(self, x))
    for step_name in ("prepare", "cleanup"):
        monkeypatch.setattr(
            strategies.Pageable, step_name, gpu.wrap(step_name, getattr(strategies.Pageable, step_name))
        )
    # The host copies run on the CPU; the timer is the CUDA one, on the fake GPU.
    monkeypatch.setattr(measure, "Timer", lambda dev, *a, **k: timing.Timer(CUDA, *a, **k))
    monkeypatch.setattr(recorder.RowWriter, "write", gpu.wrap("row_write", recorder.RowWriter.write))
    spec = SweepSpec(
        ("pageable",), (1024, 4096), device="cpu", reps=6, warmup=1, evidence=evidence, order=order
    )
    monkeypatch.setattr(pd.DataFrame, "__init__", counting_init)
    try:
        df = measure.sweep(spec, out=tmp_path / "t.csv", progress=False, clock=_fake_clock(gpu, step))
    finally:
        monkeypatch.setattr(pd.DataFrame, "__init__", real_init)
    assert len(df) == 14 and (df["error"].fillna("") == "").all()
    return _between_copies(gpu)


#: Reads the default loop may make between two timed copies of a cell's block (each cheap:
#: a clock, one small /proc file), and how many times at most. A strategy that allocates
#: nothing after its first copy (``pageable`` here) has its allocator counters read around
#: the block, not around each copy, and the cell's rows are written after its last copy.
CHEAP = {
    "perf_counter": 4,  # the issue clock, the others' window (two), the row's t_s
    "thread_time": 2,
    "process_time": 2,
    "sched_state": 2,
    "synchronize": 2,  # the copy's own wait, then the loop's sync before the next
    "clock": 2,
}
COSTLY = ("nvml", "others_cpu_ns", "others_wait_ns", "flattened_stats", "DataFrame")


def test_the_default_loop_makes_only_cheap_reads_between_copies(gpu, monkeypatch, tmp_path):
    gaps = _sweep_on_fake_gpu(gpu, monkeypatch, tmp_path, "light")
    assert len(gaps) == 13  # two cells of 7 copies (1 warm-up, 6 timed)
    for gap in gaps:
        assert not {k: gap[k] for k in COSTLY if gap[k]}
    inside = [g for i, g in enumerate(gaps) if i % 7 not in (0, 6)]  # copy 2 to 7 of each cell
    assert len(inside) == 10
    for gap in inside:
        over = {k: n for k, n in gap.items() if n > CHEAP.get(k, 0)}
        assert not over, f"calls between two copies of a block beyond the budget: {over}"
    # the block's counters are read once before its first copy; the rows go to disk after the cell
    assert gaps[0]["host_stats"] == 2 and gaps[0]["device_stats"] == 2 and gaps[0]["row_write"] == 0
    assert gaps[6]["row_write"] == 7 and gaps[6]["host_stats"] >= 1


def test_an_interleaved_round_makes_only_cheap_reads_between_copies(gpu, monkeypatch, tmp_path):
    """Interleaved, each timed copy is a one-copy visit of its cell: the cell stays prepared
    across rounds (no prepare or cleanup between copies), its rows wait (no row write) and
    the allocator counters are read around the rounds' block of copies, not around each.
    Before, every visit prepared its cell, read its counters and wrote its row."""
    # no write for the rows' age on a loaded test machine (raising=False: the test also runs on the code before)
    monkeypatch.setattr(measure, "FLUSH_AFTER_S", 3600.0, raising=False)
    gaps = _sweep_on_fake_gpu(gpu, monkeypatch, tmp_path, "light", order="interleaved")
    assert len(gaps) == 13  # 2 warm-ups (one per cell), then 6 rounds of 2 copies
    assert Counter(gpu)["prepare"] == 2 and Counter(gpu)["cleanup"] == 2  # once per cell
    rounds = gaps[2:]  # from the first timed copy's end to the last one's start
    assert len(rounds) == 11
    for gap in rounds:
        assert not {k: gap[k] for k in COSTLY if gap[k]}
        over = {k: n for k, n in gap.items() if n > CHEAP.get(k, 0)}
        assert not over, f"calls between two copies of an interleaved round beyond the budget: {over}"
    # the block's counters: read once before its first copy, and once after the last
    assert gaps[1]["host_stats"] == 2 and gaps[1]["device_stats"] == 2
    last_end = max(i for i, e in enumerate(gpu) if e == "end.record")
    assert Counter(gpu[last_end:])["host_stats"] == 1
    assert Counter(gpu)["row_write"] == 14


@pytest.mark.parametrize("order", ["shuffled", "interleaved"])
def test_a_cell_of_slow_copies_writes_each_row_before_the_next_copy(gpu, monkeypatch, tmp_path, order):
    """From the first copy of DEFER_BELOW_MS or more, rows go to disk one by one (fake clock:
    2 ms a read), so a process killed outright loses no more than a copy's row; in an
    interleaved sweep too, where the cell stays prepared across rounds."""
    gaps = _sweep_on_fake_gpu(gpu, monkeypatch, tmp_path, "light", step=0.002, order=order)
    assert len(gaps) == 13
    assert all(g["row_write"] >= 1 for g in gaps)


def test_an_interleaved_round_writes_rows_before_a_slow_copy_not_before_a_small_one(
    gpu, monkeypatch, tmp_path
):
    """Interleaved, the copy after a slow one (DEFER_BELOW_MS or more) may be small: the rows
    are written before the slow cell's next copy, never between a copy and a small one that
    follows it. Fake clock: 0.1 ms a read, and a 4 KiB copy takes 2 ms more."""
    now = [0.0]

    def clock():
        now[0] += 0.0001
        return now[0]

    real_copy = strategies.Pageable.copy

    def copy(self, x):
        gpu.append(f"copy{x.nbytes}")
        if x.nbytes == 4096:
            now[0] += 0.002
        return real_copy(self, x)

    monkeypatch.setattr(strategies.Pageable, "copy", copy)
    monkeypatch.setattr(measure, "Timer", lambda dev, *a, **k: timing.Timer(CUDA, *a, **k))
    monkeypatch.setattr(recorder.RowWriter, "write", gpu.wrap("row_write", recorder.RowWriter.write))
    monkeypatch.setattr(measure, "FLUSH_AFTER_S", 3600.0)
    spec = SweepSpec(("pageable",), (1024, 4096), device="cpu", reps=8, warmup=1, order="interleaved", seed=2)
    df = measure.sweep(spec, out=tmp_path / "t.csv", progress=False, clock=gpu.wrap("clock", clock))
    assert len(df) == 18 and (df[df["size_bytes"] == 4096]["wall_ms"] >= measure.DEFER_BELOW_MS).all()
    assert (df[df["size_bytes"] == 1024]["wall_ms"] < measure.DEFER_BELOW_MS).all()
    ends = [i for i, e in enumerate(gpu) if e == "end.record"]
    starts = [i for i, e in enumerate(gpu) if e == "start.record"]
    sizes = [gpu[i + 1] for i in starts]  # the copy each start event opens
    gaps = [Counter(gpu[e + 1 : s]) for e, s in zip(ends, starts[1:], strict=False)]
    before_small = [g for g, n in zip(gaps, sizes[1:], strict=True) if n == "copy1024"]
    before_slow = [g for g, n in zip(gaps, sizes[1:], strict=True) if n == "copy4096"]
    assert len(before_small) >= 7 and len(before_slow) >= 7
    assert all(g["row_write"] == 0 for g in before_small[1:])  # the first follows the warm-ups' preparation
    assert all(g["row_write"] >= 1 for g in before_slow)
    assert Counter(gpu)["row_write"] == 18


def test_a_block_that_allocated_nothing_has_zero_counts_and_one_that_did_has_none(gpu, monkeypatch, tmp_path):
    """Rows timed without per-copy counters get 0 when the block made no pinned block and
    no device segment, NaN (unknown which copy) when it made one; the first row of a cell
    and the warm-ups keep their own per-copy counts (fake GPU, synthetic counts)."""
    import numpy as np

    stats = {"num_host_alloc": 3}
    monkeypatch.setattr(torch.cuda, "host_memory_stats_as_nested_dict", lambda: stats, raising=False)
    real_copy = strategies.Pageable.copy
    n = {"copies": 0}

    def copy(self, x):
        n["copies"] += 1
        if n["copies"] == 12:  # a copy in the second cell's block makes a pinned block
            stats["num_host_alloc"] += 1
        return real_copy(self, x)

    monkeypatch.setattr(strategies.Pageable, "copy", copy)
    monkeypatch.setattr(measure, "Timer", lambda dev, *a, **k: timing.Timer(CUDA, *a, **k))
    spec = SweepSpec(("pageable",), (1024, 4096), device="cpu", reps=6, warmup=1, order="ascending")
    df = measure.sweep(spec, out=tmp_path / "t.csv", progress=False)
    first, second = df[df["size_bytes"] == 1024], df[df["size_bytes"] == 4096]
    assert (first["host_allocs"] == 0.0).all() and (first["device_allocs"] == 0.0).all()
    block = second.iloc[1:]  # the timed rows after the cell's first row (its warm-up)
    assert block["host_allocs"].isna().all() and (block["device_allocs"] == 0.0).all()
    assert second.iloc[0]["host_allocs"] == 0.0
    assert np.isfinite(df["event_ms"]).all()


class _Pins(strategies.Strategy):
    """Synthetic: a host copy that makes one pinned block per call (the fake counter)."""

    name = "pins_test_only"
    needs_cuda = False
    stats: dict = {}

    def copy(self, x):
        type(self).stats["num_host_alloc"] += 1
        return x.clone()


@pytest.mark.parametrize("stray", [False, True])
def test_a_block_across_an_interleaved_round_subtracts_the_copies_counted_on_their_own(
    gpu, monkeypatch, tmp_path, stray
):
    """Interleaved, a block of copies without per-copy counters spans cells; the copies of a
    strategy that allocates, counted one by one inside it, are subtracted: the block's rows
    read 0, theirs 1. A pinned block made by a copy of the block itself (``stray``) leaves
    every row of the block unknown (NaN), never 0 (fake GPU, synthetic counts)."""
    stats = {"num_host_alloc": 3}
    monkeypatch.setattr(torch.cuda, "host_memory_stats_as_nested_dict", lambda: stats, raising=False)
    monkeypatch.setattr(_Pins, "stats", stats)
    monkeypatch.setitem(strategies.REGISTRY, _Pins.name, _Pins)
    real_copy, n = strategies.Pageable.copy, {"copies": 0}

    def copy(self, x):
        n["copies"] += 1
        if stray and n["copies"] == 5:
            stats["num_host_alloc"] += 1
        return real_copy(self, x)

    monkeypatch.setattr(strategies.Pageable, "copy", copy)
    monkeypatch.setattr(measure, "Timer", lambda dev, *a, **k: timing.Timer(CUDA, *a, **k))
    monkeypatch.setattr(measure, "FLUSH_AFTER_S", 3600.0)
    spec = SweepSpec(
        ("pageable", _Pins.name), (1024, 4096), device="cpu", reps=6, warmup=1, order="interleaved"
    )
    df = measure.sweep(spec, out=tmp_path / "t.csv", progress=False, clock=_fake_clock(gpu, 0.0001))
    assert len(df) == 28 and (df["wall_ms"] < measure.DEFER_BELOW_MS).all() and (df["error"] == "").all()
    pins, page = df[df["strategy"] == _Pins.name], df[df["strategy"] == "pageable"]
    assert (pins["host_allocs"] == 1.0).all() and (pins["device_allocs"] == 0.0).all()
    first = page.groupby("size_bytes")["order"].transform("min") == page["order"]  # counted on their own
    assert (page[first]["host_allocs"] == 0.0).all() and first.sum() == 2
    block = page[~first]
    assert len(block) == 12 and (block["device_allocs"] == 0.0).all()
    if stray:
        assert block["host_allocs"].isna().all()
    else:
        assert (block["host_allocs"] == 0.0).all()


def test_a_stop_in_the_middle_of_a_cell_keeps_every_row_measured(gpu, monkeypatch, tmp_path):
    stop = recorder.StopFlag()
    real_copy = strategies.Pageable.copy
    n = {"copies": 0}

    def copy(self, x):
        n["copies"] += 1
        if n["copies"] == 4:
            stop.request()
        return real_copy(self, x)

    monkeypatch.setattr(strategies.Pageable, "copy", copy)
    monkeypatch.setattr(measure, "Timer", lambda dev, *a, **k: timing.Timer(CUDA, *a, **k))
    spec = SweepSpec(("pageable",), (1024,), device="cpu", reps=6, warmup=1)
    df = measure.sweep(spec, out=tmp_path / "t.csv", progress=False, stop=stop)
    assert len(df) == 4 and df.attrs["stopped"]
    kept = pd.read_csv(tmp_path / "t.csv.partial.csv") if (tmp_path / "t.csv.partial.csv").exists() else None
    assert kept is None or len(kept) == 4


def test_full_evidence_reads_nvml_and_the_other_threads_each_copy(gpu, monkeypatch, tmp_path):
    """The counting above can see the costly reads: the full evidence makes them."""
    gaps = _sweep_on_fake_gpu(gpu, monkeypatch, tmp_path, "full")
    assert all(g["nvml"] >= 1 and g["others_cpu_ns"] == 2 and g["others_wait_ns"] >= 1 for g in gaps)
