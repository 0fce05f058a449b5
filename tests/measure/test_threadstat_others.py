"""Schema 4 on the CPU: the CPU time of the process's other threads, each from its own
CPU clock (threadstat.others_cpu_ns / others_since), and the Timer's others_cpu_ms,
busiest_cpu_ms, busiest_thread and n_threads, on a worker thread this test keeps busy
outside the GIL (hashlib releases it for large buffers) and names through prctl."""

import ctypes
import hashlib
import os
import sys
import threading
import time

import pytest
import torch

from h2dlab.measure import threadstat
from h2dlab.measure.timing import Timer
from h2dlab.recording.schema import ADDED_V4, ADDED_V5

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread CPU clocks are Linux's")
CPU = torch.device("cpu")


def _name_this_thread(name: bytes) -> None:
    ctypes.CDLL(None).prctl(15, name, 0, 0, 0)  # PR_SET_NAME: what /proc/.../comm shows


class _Busy:
    """A named worker hashing 4 MiB buffers (the GIL released) until stopped."""

    def __init__(self, name: bytes = b"h2d-busy"):
        self.stop, self.name = threading.Event(), name
        self.started = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        _name_this_thread(self.name)
        buf = bytes(4 << 20)
        self.started.set()
        while not self.stop.is_set():
            hashlib.sha256(buf).digest()

    def __enter__(self):
        self.t.start()
        self.started.wait(5)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join(10)


@linux
def test_a_threads_own_clock_is_its_cpu_time():
    me = threading.get_native_id()
    a = time.clock_gettime_ns(threadstat.thread_clock(me))
    tt = time.thread_time_ns()
    b = time.clock_gettime_ns(threadstat.thread_clock(me))
    assert a <= tt <= b and b - a < 5_000_000


def _until_it_ran(tid: int, since_ns: int, ms: float) -> float:
    """Sleep (in 5 ms steps, 10 s at most) until thread ``tid`` has run ``ms`` of CPU since
    ``since_ns`` by its own clock; return what it ran. A busy shared machine only delays it."""
    clk = threadstat.thread_clock(tid)
    deadline = time.monotonic() + 10
    while (ran := (time.clock_gettime_ns(clk) - since_ns) / 1e6) < ms and time.monotonic() < deadline:
        time.sleep(0.005)
    return ran


@linux
def test_others_since_counts_a_busy_worker_exactly_and_names_it():
    with _Busy() as busy:
        before = threadstat.others_cpu_ns()
        tid = busy.t.native_id
        assert tid in before and threading.get_native_id() not in before
        ran = _until_it_ran(tid, before[tid], 30)  # the main thread sleeps; the worker hashes
        total, top, name, n = threadstat.others_since(before)
    assert ran >= 30
    assert name == "h2d-busy"
    assert ran <= top <= total and n >= 1  # read after `ran`: at least as much


@linux
def test_others_since_counts_a_thread_born_meanwhile_and_none_without_a_read():
    before = threadstat.others_cpu_ns()
    with _Busy(b"h2d-late") as busy:
        ran = _until_it_ran(busy.t.native_id, 0, 20)  # born after `before`: all its time counts
        total, top, name, _ = threadstat.others_since(before)
    assert ran >= 20 and name == "h2d-late" and top >= ran
    nan_total, nan_top, none, nan_n = threadstat.others_since(None)
    assert none == "" and all(x != x for x in (nan_total, nan_top, nan_n))


@linux
def test_the_timer_records_the_other_threads_of_a_copy():
    with _Busy(b"h2d-copy") as busy:
        clk = threadstat.thread_clock(busy.t.native_id)
        box = {}

        def copy():  # the "copy" waits until the worker has run 10 ms of CPU
            start = time.clock_gettime_ns(clk)
            box["ran"] = _until_it_ran(busy.t.native_id, start, 10)

        _, rec = Timer(CPU)(copy)
    assert set(ADDED_V4) <= set(rec)
    assert box["ran"] >= 10
    assert rec["busiest_thread"] == "h2d-copy" and rec["busiest_cpu_ms"] >= box["ran"]
    assert rec["busiest_cpu_ms"] <= rec["others_cpu_ms"] and rec["n_threads"] >= 1
    # the worker ran within the read window only, which holds the copy and a little more
    assert rec["wall_ms"] <= rec["others_window_ms"] <= rec["wall_ms"] + 50
    assert rec["others_cpu_ms"] <= (os.cpu_count() or 2) * rec["others_window_ms"]


# --- schema 5: the other threads' run-queue wait (threadstat.others_wait_ns / waits_since) ---


def _schedstat_waits() -> bool:
    """Whether this kernel keeps per-thread scheduler statistics (schedstat's wait)."""
    return threadstat.sched_state()[0] == threadstat.sched_state()[0]


@linux
def test_waits_since_sees_workers_that_outnumber_the_cpus():
    if not _schedstat_waits():
        pytest.skip("this kernel keeps no scheduler statistics")
    n = (os.cpu_count() or 2) + 2  # more busy workers than CPUs: some must wait to run
    busy = [_Busy(f"h2d-w{i}".encode()) for i in range(n)]
    for b in busy:
        b.__enter__()
    try:
        before = threadstat.others_wait_ns()
        assert all(b.t.native_id in before for b in busy) and threading.get_native_id() not in before
        t0 = time.monotonic()
        time.sleep(0.3)
        total, longest = threadstat.waits_since(before)
        window_ms = (time.monotonic() - t0) * 1e3
    finally:
        for b in busy:
            b.__exit__()
    # 2 workers more than CPUs for 0.3 s: together at least most of 2 x 0.3 s spent waiting,
    # and no one thread waited longer than the window (plus the reads).
    assert 0 < longest <= total
    assert total >= 0.5 * 2 * 300
    assert longest <= window_ms + 50
    assert all(x != x for x in threadstat.waits_since(None))


@linux
def test_the_timer_records_the_other_threads_wait():
    _, rec = Timer(CPU)(lambda: time.sleep(0.01))
    assert set(ADDED_V5) <= set(rec)
    if _schedstat_waits():
        assert 0 <= rec["longest_wait_ms"] <= rec["others_wait_ms"] + 1e-9
        assert rec["others_wait_ms"] <= rec["n_threads"] * rec["others_window_ms"]


@linux
def test_a_stale_schedstat_fd_under_a_reused_thread_id_is_reopened():
    """Thread ids wrap (pid_max): a cached fd may be an ended thread's whose id a live one now
    has. Reading it fails; the live thread must still be read, from its own file."""
    if not _schedstat_waits():
        pytest.skip("this kernel keeps no scheduler statistics")
    gone = threading.Thread(target=lambda: None)
    box = {}
    gone.run = lambda: box.setdefault("fd", os.open("/proc/thread-self/schedstat", os.O_RDONLY))
    gone.start()
    gone.join()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the kernel tears the thread down a moment later
        try:
            os.pread(box["fd"], 256, 0)
        except OSError:
            break
        time.sleep(0.001)
    with pytest.raises(OSError):
        os.pread(box["fd"], 256, 0)  # an ended thread's file fails to read (ESRCH)
    with _Busy(b"h2d-reuse") as busy:
        tid, pid = busy.t.native_id, os.getpid()
        old = threadstat._OTHERS.pop((pid, tid), None)
        if old is not None:
            os.close(old)
        threadstat._OTHERS[(pid, tid)] = box["fd"]  # as if the ended thread had had this id
        first = threadstat.others_wait_ns()
        second = threadstat.others_wait_ns()
    assert tid in first and tid in second
    assert 0 <= first[tid] <= second[tid]


@linux
def test_the_timers_window_holds_only_the_clock_reads(monkeypatch):
    """others_window_ms is what others_cpu_ms falls in: the wait reads (about 0.35 ms for 33
    threads on the H200, where schema 5 first read them inside it) and the busiest thread's
    name are read outside it. Each is made to take 50 ms here: none may land in the window."""
    from h2dlab.measure import timing

    slow_wait = timing.others_wait_ns

    def waits_slowly():
        time.sleep(0.05)
        return slow_wait()

    def name_slowly(tid):
        time.sleep(0.05)
        return "h2d-named"

    monkeypatch.setattr(timing, "others_wait_ns", waits_slowly)
    monkeypatch.setattr(threadstat, "others_wait_ns", waits_slowly)  # waits_since's read after
    monkeypatch.setattr(threadstat, "_comm", name_slowly)
    with _Busy(b"h2d-window"):
        _, rec = Timer(CPU)(lambda: time.sleep(0.005))
    assert rec["busiest_thread"] == "h2d-named" and rec["busiest_cpu_ms"] > 0
    assert rec["wall_ms"] <= rec["others_window_ms"] < rec["wall_ms"] + 25
