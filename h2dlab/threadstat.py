"""What the Linux scheduler knows about the calling thread, read cheaply: how long it
has waited on a run queue (``/proc/<pid>/task/<tid>/schedstat``, second field) and which
CPU it is on (glibc's ``sched_getcpu``, else field 39 of ``.../stat``).

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

__all__ = ["GETCPU", "parse_cpu", "parse_run_delay_ns", "sched_state"]

_FILES: dict[tuple[int, int], tuple[int, int] | None] = {}  # (pid, tid) -> (schedstat fd, stat fd)
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
    scheduler statistics (a running thread has spent time on a CPU).
    """
    try:
        on_cpu, wait, _ = text.split()
        on_cpu, wait = int(on_cpu), int(wait)
    except ValueError:
        return _NAN
    return _NAN if on_cpu <= 0 or wait < 0 else float(wait)


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
