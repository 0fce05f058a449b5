"""The scheduler evidence of schema 3 on the CPU: the /proc parsers (property tests), and
the Timer's run_delay_ms, nivcsw, nvcsw, cpu_moved, proc_cpu_ms, proc_faults and issue_ms
on events this test makes happen (a CPU shared with a busy process, a sleep, a forced
move to another CPU, a busy worker thread, a worker thread touching new memory)."""

import math
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from h2dlab.measure import threadstat, timing
from h2dlab.measure.threadstat import parse_cpu, parse_run_delay_ns, sched_state
from h2dlab.measure.timing import RUSAGE_SCOPE, Timer
from h2dlab.recording.schema import ADDED_V3

CPU = torch.device("cpu")
SCHED = ("run_delay_ms", "nivcsw", "nvcsw", "cpu_moved", "proc_cpu_ms", "proc_faults", "issue_ms", "gc_ms")
HAS_SCHEDSTAT = not math.isnan(sched_state()[0])
HAS_AFFINITY = hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2
needs_schedstat = pytest.mark.skipif(
    not HAS_SCHEDSTAT, reason="the kernel keeps no scheduler statistics here"
)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


# --- parsers ------------------------------------------------------------------------------


@given(st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 2**40))
def test_schedstat_second_field_is_the_run_delay(on_cpu, wait, slices):
    text = f"{on_cpu} {wait} {slices}\n".encode()
    if on_cpu == wait == slices == 0:  # the kernel's line when it keeps no statistics
        assert math.isnan(parse_run_delay_ns(text))
    else:
        assert parse_run_delay_ns(text) == float(wait)


def test_a_thread_on_its_first_cpu_before_a_tick_has_waited_nothing_yet():
    """What a just-started busy worker's schedstat read on a 2-core VM (CI's failure)."""
    assert parse_run_delay_ns(b"0 0 1\n") == 0.0
    assert parse_run_delay_ns(b"0 5000 1\n") == 5000.0


@pytest.mark.parametrize(
    "text", [b"0 0 0\n", b"", b"12 x 3\n", b"12 34\n", b"1 2 3 4\n", b"-1 2 3\n", b"1 -2 3\n", b"1 2 -3\n"]
)
def test_schedstat_without_statistics_or_malformed_is_nan(text):
    assert math.isnan(parse_run_delay_ns(text))


@given(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\x00"), max_size=16),
    st.integers(0, 4095),
    st.lists(st.integers(0, 2**40), min_size=52, max_size=52),
)
def test_stat_field_39_is_found_whatever_the_command_name(comm, cpu, rest):
    """Field 2 is the command in parentheses and may itself hold ') ' and spaces."""
    fields = ["R", *map(str, rest)]  # fields 3 to 55
    fields[36] = str(cpu)  # field 39
    line = f"4242 ({comm}) {' '.join(fields)}\n".encode()
    assert parse_cpu(line) == float(cpu)


@pytest.mark.parametrize(
    "text", [b"", b"4242 (x) R 1 2 3\n", b"4242 x R " + b"1 " * 40, b"4242 (x) " + b"a " * 40]
)
def test_stat_without_field_39_is_nan(text):
    assert math.isnan(parse_cpu(text))


def test_this_threads_cpu_agrees_with_proc():
    """glibc's sched_getcpu (where present) and field 39 name the same CPU."""
    if HAS_AFFINITY:
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(before)})  # pinned: the CPU cannot change between reads
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/stat", "rb") as f:
            from_proc = parse_cpu(f.read())
        assert sched_state()[1] == from_proc
    finally:
        if HAS_AFFINITY:
            os.sched_setaffinity(0, before)


def test_without_the_files_the_evidence_is_nan(monkeypatch):
    monkeypatch.setattr(threadstat, "_FILES", {})
    monkeypatch.setattr(threadstat, "_open", lambda key: None)
    assert all(math.isnan(v) for v in sched_state())
    _, rec = Timer(CPU)(lambda: None)
    assert math.isnan(rec["run_delay_ms"]) and math.isnan(rec["cpu_moved"])
    assert rec["proc_cpu_ms"] >= 0 and rec["issue_ms"] >= 0


def test_a_reused_thread_id_reopens_the_files(monkeypatch):
    """If the cached files belong to an ended thread (reading fails), they are opened anew."""
    key = (os.getpid(), threading.get_native_id())
    dead = (os.open(os.devnull, os.O_WRONLY), os.open(os.devnull, os.O_WRONLY))  # reads fail
    monkeypatch.setattr(threadstat, "_FILES", {key: dead})
    monkeypatch.setattr(threadstat, "GETCPU", None)
    got = sched_state()  # the /dev/null descriptors cannot be read: only reopened files answer
    assert (math.isnan(got[0]) and not HAS_SCHEDSTAT) or got[0] >= 0
    assert got[1] >= 0


# --- the Timer's schema-3 columns ------------------------------------------------------------


def test_every_scheduler_column_is_a_schema_column_and_recorded():
    _, rec = Timer(CPU)(lambda: None)
    assert set(SCHED) == set(ADDED_V3) and set(SCHED) <= set(rec)
    assert rec["cpu_moved"] in (0.0, 1.0) or (math.isnan(rec["cpu_moved"]) and not HAS_SCHEDSTAT)
    assert 0 <= rec["issue_ms"] <= rec["wall_ms"]


@needs_schedstat
@pytest.mark.skipif(not HAS_AFFINITY, reason="needs two CPUs and sched_setaffinity")
def test_a_cpu_shared_with_a_busy_process_shows_as_run_delay():
    """This thread and a busy process on one CPU: the spinning thread gets part of the
    wall time, and the rest is run-queue wait (the scheduler's own account)."""
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"]
    )
    try:
        time.sleep(0.3)  # the hog is running
        os.sched_setaffinity(0, {cpu})
        _, rec = Timer(CPU)(lambda: _spin(0.2))
    finally:
        os.sched_setaffinity(0, before)
        hog.kill()
        hog.wait()
    assert rec["run_delay_ms"] >= 20, rec  # a fair share would be ~100 ms of the 200
    # wall = on the CPU + waiting to run (the spinning thread never sleeps)
    assert rec["cpu_ms"] + rec["run_delay_ms"] == pytest.approx(rec["wall_ms"], rel=0.15), rec
    if RUSAGE_SCOPE == "thread":
        assert rec["nivcsw"] >= 1 and rec["nvcsw"] <= 2, rec


def test_a_sleep_is_a_voluntary_switch_not_cpu_time():
    _, rec = Timer(CPU)(lambda: time.sleep(0.03))
    if RUSAGE_SCOPE == "thread":
        assert rec["nvcsw"] >= 1, rec
    assert rec["cpu_ms"] < 0.5 * rec["wall_ms"]
    assert rec["issue_ms"] == pytest.approx(rec["wall_ms"], abs=1.0)  # on the CPU there is no sync to wait on


@needs_schedstat
@pytest.mark.skipif(not HAS_AFFINITY, reason="needs two CPUs and sched_setaffinity")
def test_moving_to_another_cpu_sets_cpu_moved():
    before = os.sched_getaffinity(0)
    a, b = sorted(before)[:2]
    try:
        os.sched_setaffinity(0, {a})
        _, stay = Timer(CPU)(lambda: _spin(0.001))
        _, moved = Timer(CPU)(lambda: os.sched_setaffinity(0, {b}))
    finally:
        os.sched_setaffinity(0, before)
    assert stay["cpu_moved"] == 0.0 and moved["cpu_moved"] == 1.0, (stay, moved)


def test_proc_cpu_ms_counts_other_threads_of_the_process():
    """The timing thread sleeps while a worker spins: cpu_ms is near 0, proc_cpu_ms is not."""

    def with_worker():
        t = threading.Thread(target=_spin, args=(0.05,))
        t.start()
        t.join()

    _, rec = Timer(CPU)(with_worker)
    assert rec["cpu_ms"] < 10 and rec["proc_cpu_ms"] >= rec["cpu_ms"] + 5, rec


@pytest.mark.skipif(RUSAGE_SCOPE != "thread", reason="needs per-thread getrusage")
def test_proc_faults_counts_faults_in_other_threads():
    """A worker touches fresh memory: the timing thread's minflt misses it, proc_faults not."""

    def touch():
        a = np.empty(32 * 2**20, dtype=np.uint8)  # fresh mmap: first touch faults
        a[::4096] = 1

    def with_worker():
        t = threading.Thread(target=touch)
        t.start()
        t.join()

    _, rec = Timer(CPU)(with_worker)
    # 8 192 pages of 4 KiB; with transparent huge pages as few as 16 faults
    assert rec["proc_faults"] >= 16 and rec["proc_faults"] >= rec["minflt"] + 16, rec


def test_issue_ms_reads_the_real_clock_and_leaves_a_fake_wall_clock_alone():
    ticks = iter(np.arange(0, 1, 0.001))
    _, rec = Timer(CPU, clock=lambda: next(ticks))(lambda: time.sleep(0.01))
    assert rec["wall_ms"] == pytest.approx(1.0)
    assert rec["issue_ms"] >= 9


def test_timer_keeps_using_the_module_reader(monkeypatch):
    """The Timer reads the state through timing.sched_state (one place to fake it)."""
    calls = []
    monkeypatch.setattr(
        timing, "sched_state", lambda: calls.append(1) or (5e6 * len(calls), 3.0 + len(calls))
    )
    _, rec = Timer(CPU)(lambda: None)
    assert len(calls) == 2 and rec["run_delay_ms"] == 5.0 and rec["cpu_moved"] == 1.0


def test_the_cuda_branch_fills_every_scheduler_column(monkeypatch):
    """On a fake torch.cuda (synthetic: events that say 1 ms), the Timer's CUDA path
    records the schema-3 columns the way the CPU path does."""
    from tests.fake_cuda import install

    install(monkeypatch)
    monkeypatch.setattr(timing, "sm_clock_mhz", lambda dev: 1980.0)
    monkeypatch.setattr(timing, "gpu_other_processes", lambda dev: 0.0)
    _, rec = Timer(torch.device("cuda", 0))(lambda: time.sleep(0.005))
    assert rec["event_ms"] == 1.0 and rec["sm_clock_mhz"] == 1980.0
    assert rec["issue_ms"] >= 4 and rec["proc_cpu_ms"] >= rec["cpu_ms"]
    assert all(
        not math.isnan(rec[c]) for c in SCHED if c not in ("run_delay_ms", "cpu_moved") or HAS_SCHEDSTAT
    )
