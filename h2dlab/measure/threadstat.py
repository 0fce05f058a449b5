"""What the Linux scheduler knows about the calling thread, read cheaply: how long it
has waited on a run queue (``/proc/<pid>/task/<tid>/schedstat``, second field) and which
CPU it is on (glibc's ``sched_getcpu``, else field 39 of ``.../stat``); and the CPU time
of each of the process's other threads, from each thread's own CPU clock
(:func:`others_cpu_ns`, :func:`others_since`), and how long each waited on a run queue
(:func:`others_wait_ns`, :func:`waits_since`): a worker of a parallel copy that lost its
CPU holds the copy open, and only its own schedstat shows it.

Each thread's files are opened once and re-read with ``os.pread`` (about 0.5 us for
schedstat, 1.3 us plus 1.3 us of parsing for stat, on an idle 2-core VM); where they are
missing (not Linux, a kernel without scheduler statistics) the values are NaN. Used by
``timing.Timer`` before and after each copy.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time

__all__ = [
    "GETCPU",
    "others_cpu_ns",
    "others_between",
    "others_since",
    "others_wait_ns",
    "parse_cpu",
    "parse_run_delay_ns",
    "sched_state",
    "thread_clock",
    "waits_since",
]

_FILES: dict[tuple[int, int], tuple[int, int] | None] = {}  # (pid, tid) -> (schedstat fd, stat fd)
_OTHERS: dict[tuple[int, int], int] = {}  # (pid, tid) -> schedstat fd of another thread
_NAN = float("nan")


def _libc_getcpu():
    try:
        fn = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError, TypeError):  # not glibc, no dynamic loading (Windows)
        return None
    fn.restype, fn.argtypes = ctypes.c_int, []
    return fn if fn() >= 0 else None


#: glibc's sched_getcpu (0.2 us), or None: then the CPU comes from /proc (about 3 us).
GETCPU = _libc_getcpu()


def parse_run_delay_ns(text: bytes) -> float:
    """Run-queue wait in ns from a ``schedstat`` line (``"<on-CPU ns> <wait ns> <slices>"``).

    NaN for anything else, and for ``"0 0 0"``: what the kernel writes when it keeps no
    scheduler statistics. A thread that has just got its first CPU may read ``"0 0 1"``
    (its CPU time is added at the next tick): that is a wait of 0, not a missing one.
    """
    try:
        on_cpu, wait, slices = (int(f) for f in text.split())
    except ValueError:
        return _NAN
    if min(on_cpu, wait, slices) < 0 or on_cpu == wait == slices == 0:
        return _NAN
    return float(wait)


def parse_cpu(text: bytes) -> float:
    """The CPU a thread last ran on, field 39 of a ``/proc/.../stat`` line (NaN if absent).

    The command name (field 2, in parentheses) may hold spaces and parentheses, so the
    fields are counted after its last ``)``.
    """
    head, sep, tail = text.rpartition(b")")
    fields = tail.split()
    if not sep or len(fields) < 37 or not fields[36].isdigit():
        return _NAN
    return float(int(fields[36]))


def _open(key: tuple[int, int]) -> tuple[int, int] | None:
    base = f"/proc/{key[0]}/task/{key[1]}/"
    if not hasattr(os, "pread"):
        return None
    try:
        fd_sched = os.open(base + "schedstat", os.O_RDONLY)
    except OSError:
        return None
    try:
        fd_stat = os.open(base + "stat", os.O_RDONLY)
    except OSError:
        os.close(fd_sched)
        return None
    return fd_sched, fd_stat


def _read(fds: tuple[int, int]) -> tuple[float, float]:
    delay = parse_run_delay_ns(os.pread(fds[0], 256, 0))
    getcpu = GETCPU
    return delay, float(getcpu()) if getcpu is not None else parse_cpu(os.pread(fds[1], 4096, 0))


def sched_state() -> tuple[float, float]:
    """``(run_delay_ns, cpu)`` of the calling thread now: its total wait on a run queue
    since it started, in ns, and the CPU it is on; NaN where the kernel does not say."""
    key = (os.getpid(), threading.get_native_id())
    fds = _FILES.get(key, False)
    if fds is False:
        fds = _FILES[key] = _open(key)
    if fds is None:
        return _NAN, _NAN
    try:
        return _read(fds)
    except OSError:  # files of an ended thread whose id this one reuses: open them anew
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        fds = _FILES[key] = _open(key)
        if fds is None:
            return _NAN, _NAN
        try:
            return _read(fds)
        except OSError:
            return _NAN, _NAN


def thread_clock(tid: int) -> int:
    """Linux's clock id for the CPU time of thread ``tid`` of this process (the kernel's
    ``make_thread_cpuclock(tid, CPUCLOCK_SCHED)``), for ``time.clock_gettime_ns``. Reading
    it brings a running thread's time up to date, so it is exact at any moment, unlike
    the process clock (``time.process_time``), to which Linux adds another thread's
    running time only at a scheduler tick or when that thread stops running."""
    return (~tid << 3) | 6


def others_cpu_ns() -> dict[int, int]:
    """CPU time in ns of every thread of this process but the calling one, by thread id
    ({} where ``/proc/self/task`` or the thread clocks are missing: not Linux). About
    1 us per thread."""
    me = threading.get_native_id()
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except (OSError, ValueError):
        return {}
    out = {}
    for tid in tids:
        if tid != me:
            try:
                out[tid] = time.clock_gettime_ns(thread_clock(tid))
            except (OSError, ValueError, OverflowError):  # ended meanwhile, or no such clock
                continue
    return out


def _comm(tid: int) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm", "rb") as fh:
            return fh.read().decode(errors="replace").strip()
    except OSError:
        return ""


def others_since(before: dict[int, int] | None) -> tuple[float, float, str, float]:
    """What the process's other threads ran since ``before`` (an :func:`others_cpu_ns`
    read): ``(total_ms, busiest_ms, busiest_name, threads)``. A thread started since
    counts all its CPU time; one that ended since is lost. NaN, NaN, "" and NaN where
    ``before`` is None or unreadable now."""
    return others_between(before, others_cpu_ns() if before is not None else None)


def others_between(
    before: dict[int, int] | None, now: dict[int, int] | None
) -> tuple[float, float, str, float]:
    """:func:`others_since` from two :func:`others_cpu_ns` reads: what the other threads ran
    between them. The busiest thread's name is read now, after both (``timing.Timer``
    reads the clocks next to the copy and the names after its window)."""
    if before is None or now is None:
        return _NAN, _NAN, "", _NAN
    if not now and before:
        return _NAN, _NAN, "", _NAN
    deltas = {tid: max(ns - before.get(tid, 0), 0) for tid, ns in now.items()}
    if not deltas:
        return 0.0, 0.0, "", 0.0
    tid, top = max(deltas.items(), key=lambda kv: kv[1])
    return sum(deltas.values()) / 1e6, top / 1e6, _comm(tid) if top > 0 else "", float(len(deltas))


def others_wait_ns() -> dict[int, float]:
    """Run-queue wait in ns since it started of every thread of this process but the calling
    one, by thread id ({} where ``/proc/self/task`` is missing, not Linux, or the kernel
    keeps no scheduler statistics, as the calling thread's own file shows). Each thread's ``schedstat`` is opened
    once and re-read with ``os.pread`` (about 0.5 us a thread). The kernel adds a wait when
    the thread gets a CPU back, so a thread still waiting counts only once it runs again."""
    pid, me = os.getpid(), threading.get_native_id()
    own_wait = sched_state()[0]
    if own_wait != own_wait:  # no scheduler statistics here (or not Linux)
        return {}
    try:
        tids = {int(t) for t in os.listdir("/proc/self/task")} - {me}
    except (OSError, ValueError):
        return {}
    for key in [k for k in _OTHERS if k[0] != pid or k[1] not in tids]:  # ended, or a parent's
        with contextlib.suppress(OSError):
            os.close(_OTHERS.pop(key))
    out = {}
    for tid in tids:
        wait = _other_wait(pid, tid)
        if wait == wait:
            out[tid] = wait
    return out


def _other_wait(pid: int, tid: int) -> float:
    """Thread ``tid``'s run-queue wait in ns, from its cached schedstat fd; NaN once it has
    ended. Thread ids wrap (at pid_max, 32768 on many machines), so a cached fd may be an
    ended thread's whose id a new thread now has: reading it fails (ESRCH) or, while that
    thread is still being torn down, shows no time on a CPU. Either way it is reopened once."""
    fd = _OTHERS.get((pid, tid))
    if fd is not None:
        with contextlib.suppress(OSError):
            wait = parse_run_delay_ns(os.pread(fd, 256, 0))
            if wait == wait:
                return wait
        with contextlib.suppress(OSError):
            os.close(fd)
        del _OTHERS[(pid, tid)]
    try:
        fd = _OTHERS[(pid, tid)] = os.open(f"/proc/{pid}/task/{tid}/schedstat", os.O_RDONLY)
        return parse_run_delay_ns(os.pread(fd, 256, 0))
    except OSError:  # ended meanwhile
        return _NAN


def waits_since(before: dict[int, float] | None) -> tuple[float, float]:
    """How long the process's other threads waited on a run queue since ``before`` (an
    :func:`others_wait_ns` read): ``(total_ms, longest_ms)``, the latter of the one thread
    that waited longest. A thread started since counts all its wait; one that ended since
    is lost. NaN, NaN where ``before`` is None or nothing is readable now."""
    if before is None:
        return _NAN, _NAN
    now = others_wait_ns()
    if not now:
        return _NAN, _NAN
    deltas = [max(ns - before.get(tid, 0.0), 0.0) for tid, ns in now.items()]
    return sum(deltas) / 1e6, max(deltas) / 1e6
