"""Schema 4 on the CPU: the CPU time of the process's other threads, each from its own
CPU clock (threadstat.others_cpu_ns / others_since), and the Timer's others_cpu_ms,
busiest_cpu_ms, busiest_thread and n_threads, on a worker thread this test keeps busy
outside the GIL (hashlib releases it for large buffers) and names through prctl."""

import ctypes
import hashlib
import sys
import threading
import time

import pytest
import torch

from h2dlab import threadstat
from h2dlab.schema import ADDED_V4
from h2dlab.timing import Timer

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


@linux
def test_others_since_counts_a_busy_worker_exactly_and_names_it():
    with _Busy() as busy:
        before = threadstat.others_cpu_ns()
        assert busy.t.native_id in before and threading.get_native_id() not in before
        time.sleep(0.05)  # the main thread sleeps; the worker hashes
        total, top, name, n = threadstat.others_since(before)
    assert name == "h2d-busy"
    assert 0.02 * 1e3 <= top <= total  # at least 20 of the 50 ms on a shared 2-core machine
    assert total <= 0.05e3 * 2 + 5 and n >= 1


@linux
def test_others_since_counts_a_thread_born_meanwhile_and_none_without_a_read():
    before = threadstat.others_cpu_ns()
    with _Busy(b"h2d-late"):
        time.sleep(0.03)
        total, top, name, _ = threadstat.others_since(before)
    assert name == "h2d-late" and top >= 10  # all of its CPU time fell after `before`
    nan_total, nan_top, none, nan_n = threadstat.others_since(None)
    assert none == "" and all(x != x for x in (nan_total, nan_top, nan_n))


@linux
def test_the_timer_records_the_other_threads_of_a_copy():
    with _Busy(b"h2d-copy"):
        _, rec = Timer(CPU)(lambda: time.sleep(0.03))
    assert set(ADDED_V4) <= set(rec)
    assert rec["busiest_thread"] == "h2d-copy" and rec["busiest_cpu_ms"] >= 10
    assert rec["busiest_cpu_ms"] <= rec["others_cpu_ms"] and rec["n_threads"] >= 1
    # the worker ran within the read window only, which holds the copy and a little more
    assert rec["wall_ms"] <= rec["others_window_ms"] <= rec["wall_ms"] + 50
    assert rec["others_cpu_ms"] <= 2 * rec["others_window_ms"]  # 2 CPUs at the most here
