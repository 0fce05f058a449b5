"""The Timer on the CPU: its evidence columns (page faults, thread CPU time, GC) say what
happened during the copy, cost microseconds, and leave the fake-clock wall time exact."""

import gc
import itertools
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from h2dlab.measure import timing
from h2dlab.measure.timing import RUSAGE_SCOPE, Timer
from h2dlab.recording.schema import ADDED_V2

CPU = torch.device("cpu")
EVIDENCE = ("minflt", "majflt", "cpu_ms", "gc_count", "sm_clock_mhz", "gpu_procs")


def test_every_evidence_column_is_a_schema_column_and_recorded():
    ticks = itertools.count(0, 0.001)
    out, rec = Timer(CPU, clock=lambda: next(ticks))(lambda: 7)
    assert out == 7
    assert rec["wall_ms"] == pytest.approx(1.0)  # the evidence reads no host clock
    assert set(EVIDENCE) <= set(rec) and set(EVIDENCE) <= set(ADDED_V2)
    assert np.isnan(rec["event_ms"]) and np.isnan(rec["sm_clock_mhz"]) and np.isnan(rec["gpu_procs"])
    assert rec["gc_count"] == 0 and rec["cpu_ms"] >= 0


@pytest.mark.skipif(RUSAGE_SCOPE == "", reason="no getrusage here")
def test_touching_new_memory_counts_page_faults():
    def touch():
        a = np.empty(64 * 2**20, dtype=np.uint8)  # fresh mmap: every page faults on first touch
        a[::4096] = 1
        return a

    _, rec = Timer(CPU)(touch)
    # 16 384 pages of 4 KiB; with transparent huge pages as few as 32 faults.
    assert rec["minflt"] >= 16 and rec["majflt"] >= 0
    _, quiet = Timer(CPU)(lambda: None)
    assert quiet["minflt"] < rec["minflt"]


def test_cpu_ms_is_the_threads_cpu_time_not_the_wall_time():
    def spin():
        end = time.perf_counter() + 0.03
        while time.perf_counter() < end:
            pass

    _, busy = Timer(CPU)(spin)
    _, asleep = Timer(CPU)(lambda: time.sleep(0.05))
    # On a shared machine the spinning thread gets only part of the wall time.
    assert 1 < busy["cpu_ms"] <= busy["wall_ms"] + 1
    assert asleep["wall_ms"] >= 45 and asleep["cpu_ms"] < 5


def test_gc_count_counts_collections_started_during_the_copy():
    _, rec = Timer(CPU)(lambda: (gc.collect(), gc.collect()))
    assert rec["gc_count"] == 2
    gc.collect()  # outside: not counted by the next copy
    _, rec = Timer(CPU)(lambda: None)
    assert rec["gc_count"] == 0 and rec["gc_ms"] == 0


def test_gc_ms_is_the_time_in_collections_during_the_copy():
    """Many objects in cycles make a full collection slow: gc_ms holds its time, within
    the copy's wall time, and the time outside collections is not counted."""
    junk = [[] for _ in range(300_000)]
    for a in junk:
        a.append(a)  # each list in a cycle with itself: the collector must visit it
    t0 = time.perf_counter()
    gc.collect()
    alone = (time.perf_counter() - t0) * 1e3
    _, rec = Timer(CPU)(lambda: (time.sleep(0.02), gc.collect()))
    del junk
    gc.collect()
    assert rec["gc_count"] == 1
    assert 0.3 * alone <= rec["gc_ms"] <= rec["wall_ms"] - 15, (alone, rec)


class _FakeNvml:
    """Synthetic NVML: a clock and a process list."""

    NVML_CLOCK_SM = 1

    def __init__(self, pids, clock=1980):
        self.pids, self.clock, self.calls = pids, clock, 0

    def nvmlDeviceGetClockInfo(self, handle, kind):
        assert kind == self.NVML_CLOCK_SM
        return self.clock

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        self.calls += 1
        return [SimpleNamespace(pid=p) for p in self.pids]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return []


@pytest.mark.parametrize(
    ("pids", "others"),
    [(["me"], 0.0), (["me", 11, 12], 2.0), ([4242], 0.0), ([4242, 17], 1.0), ([], np.nan)],
)
def test_gpu_other_processes_leaves_this_process_out(monkeypatch, pids, others):
    import os

    fake = _FakeNvml([os.getpid() if p == "me" else p for p in pids])
    monkeypatch.setattr(timing, "_nvml", lambda dev: (fake, "handle"))
    got = timing.gpu_other_processes(torch.device("cuda", 0))
    assert (np.isnan(got) and np.isnan(others)) or got == others
    assert timing.sm_clock_mhz(torch.device("cuda", 0)) == 1980.0


def test_without_nvml_the_gpu_evidence_is_nan(monkeypatch):
    monkeypatch.setattr(timing, "_nvml", lambda dev: None)
    assert np.isnan(timing.sm_clock_mhz(torch.device("cuda", 0)))
    assert np.isnan(timing.gpu_other_processes(torch.device("cuda", 0)))


def test_gpu_procs_is_read_at_most_once_a_second(monkeypatch):
    fake = _FakeNvml([1, 2])
    monkeypatch.setattr(timing, "_nvml", lambda dev: (fake, "handle"))
    t = Timer(CPU)
    t.dev = torch.device("cuda", 0)  # only gpu_procs() is exercised: no CUDA needed
    assert [t.gpu_procs() for _ in range(50)] == [1.0] * 50
    assert fake.calls == 1


class _FakePci:
    """Synthetic NVML that knows one GPU by its PCI bus id."""

    def __init__(self, known):
        self.known, self.asked = known, []

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        self.asked.append(bus)
        if bus != self.known:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return "pci-handle"


@pytest.mark.parametrize(
    ("known", "masked", "want"),
    [
        ("00000000:3B:00.0", False, "pci-handle"),  # found by bus id
        ("elsewhere", False, "index-handle"),  # not found, devices not masked: NVML's index
        ("elsewhere", True, None),  # masked: the index could name another GPU
    ],
)
def test_nvml_device_is_matched_by_pci_bus_id(monkeypatch, known, masked, want):
    import h2dlab.measure.nvml

    fake = _FakePci(known)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda i: SimpleNamespace(pci_domain_id=0, pci_bus_id=0x3B, pci_device_id=0),
    )
    monkeypatch.setattr(h2dlab.measure.nvml, "nvml_handle", lambda i: (fake, "index-handle"))
    monkeypatch.setattr(timing, "_NVML", {})
    if masked:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    else:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    found = timing._nvml(torch.device("cuda", 0))
    assert (found[1] if found else None) == want
    assert fake.asked[0] == "00000000:3B:00.0"
    assert timing._nvml(torch.device("cuda", 0)) is found  # looked up once


def test_a_pause_spins_before_the_timed_call_and_stays_out_of_wall_ms():
    """``pause_s``: a busy wait of at least ``pause_s`` before the clock starts, so the
    timed call's wall time does not include it."""
    log = []

    def clock():
        log.append(time.perf_counter())
        return log[-1]

    timer = Timer(CPU, clock=clock, pause_s=0.005)
    start = time.perf_counter()
    c0 = time.thread_time()
    _, rec = timer(lambda: log.append(("fn", time.perf_counter())))
    spun = time.thread_time() - c0
    assert log[0] - start >= 0.005  # t0 is read only after the pause
    assert log[1][0] == "fn" and log[1][1] >= start + 0.005
    assert rec["wall_ms"] == pytest.approx((log[2] - log[0]) * 1e3)
    assert rec["wall_ms"] < 5  # the pause is not in it (a no-op call takes microseconds)
    assert spun > 0.0005  # the CPU kept running: a spin, not a sleep


def test_a_longer_pause_waits_at_least_that_long(monkeypatch):
    timer = Timer(CPU, pause_s=0.03)
    t = time.perf_counter()
    timer(lambda: None)
    assert time.perf_counter() - t >= 0.03
    slept = []
    monkeypatch.setattr(time, "sleep", lambda s: slept.append(s))
    timer(lambda: None)
    assert slept == []


def test_no_pause_by_default(monkeypatch):
    timer = Timer(CPU)
    assert timer.pause_s is None
    called = []
    monkeypatch.setattr(Timer, "pause", lambda self, live: called.append(live))
    timer(lambda: None)
    assert called == []
    Timer(CPU, pause_s=0.0)(lambda: None)
    assert called == [False]  # on the CPU nothing to wake


def test_the_pause_wakes_the_gpu_first_then_spins_from_its_return(monkeypatch):
    """On CUDA: an event recorded on the current stream and waited for, then the spin
    counted from when that wait returned (fake events: synthetic, nothing measured)."""
    log = []

    class Event:
        def record(self, stream=None):
            log.append(("record", stream))

        def synchronize(self):
            time.sleep(0.002)
            log.append(("woken", time.perf_counter()))

    monkeypatch.setattr(torch.cuda, "Event", Event)
    Timer(CPU, pause_s=0.004).pause(live=True)
    done = time.perf_counter()
    assert [e[0] for e in log] == ["record", "woken"] and log[0][1] is None
    assert done - log[1][1] >= 0.004
    log.clear()
    Timer(CPU, pause_s=0.0).pause(live=False)
    assert log == []
