"""Timing one copy: CUDA events, a synchronised host clock, allocator counters and cheap
evidence (page faults, the thread's CPU time and run-queue wait, context switches, CPU
migration, the process's and its other threads' CPU time, when the host had issued the copy,
GC collections, the GPU's SM clock and other processes on the GPU) for explaining a slow
copy later. Which failures a sweep may record and go on from, and which stop it, live in
``h2dlab.measure.failures`` (re-exported here).
"""

from __future__ import annotations

import _thread
import gc
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

try:
    import resource
except ImportError:  # not on Windows: page faults stay NaN
    resource = None  # type: ignore[assignment]

import numpy as np
import torch

from h2dlab.measure.failures import CudaFault, error_text, is_cuda_fault, is_oom
from h2dlab.measure.nvml import bus_id_of, nvml_for_cuda
from h2dlab.measure.threadstat import others_between, others_cpu_ns, others_wait_ns, sched_state, waits_since

__all__ = [
    "EVIDENCE",
    "PROCS_MAX_AGE_S",
    "RUSAGE_SCOPE",
    "CudaFault",
    "Timer",
    "gc_collections",
    "gc_seconds",
    "gpu_other_processes",
    "page_faults",
    "sm_clock_mhz",
    "device_segment_count",
    "error_text",
    "host_alloc_count",
    "is_cuda_fault",
    "is_oom",
]


def host_alloc_count() -> float:
    """cudaHostAlloc calls so far by PyTorch's caching host allocator (NaN if unknown).

    Read from the nested statistics: ``torch.cuda.host_memory_stats()`` flattens and sorts
    them in Python, which costs several times the read itself, twice per copy."""
    try:
        stats = getattr(torch.cuda, "host_memory_stats_as_nested_dict", torch.cuda.host_memory_stats)
        return float(stats().get("num_host_alloc", np.nan))  # the key is top-level in both
    except Exception:  # noqa: BLE001 - older torch, or CUDA not initialised
        return np.nan


def device_segment_count(dev: torch.device) -> float:
    """cudaMalloc'd segments so far by the device caching allocator (NaN if unknown).

    Read from the nested statistics (``segment`` / ``all`` / ``allocated``), not through
    ``torch.cuda.memory_stats``, whose flattening of some 150 keys is the costly part."""
    try:
        return float(torch.cuda.memory_stats_as_nested_dict(dev)["segment"]["all"]["allocated"])
    except Exception:  # noqa: BLE001
        return np.nan


#: Whose page faults ``minflt``/``majflt`` count: ``"thread"`` (``getrusage(RUSAGE_THREAD)``,
#: Linux: the timing thread only, so faults in a staged copy's worker threads or in
#: PyTorch's pinning threads are not counted), ``"process"`` (``RUSAGE_SELF``: every
#: thread) or ``""`` where there is no ``getrusage`` (the columns are then NaN).
RUSAGE_SCOPE = "" if resource is None else ("thread" if hasattr(resource, "RUSAGE_THREAD") else "process")
_WHO = None if resource is None else getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
#: How old the count of other processes on the GPU may be (NVML's process list is slow).
PROCS_MAX_AGE_S = 1.0
#: What a :class:`Timer` reads around each copy. ``"light"``: page faults, CPU times,
#: context switches, the scheduler's wait and CPU of the timing thread, GC and the two
#: allocator counters; tens of microseconds, so copies follow each other as in a user's
#: loop. ``"full"`` adds NVML's SM clock and GPU process count and every other thread's
#: CPU clock and run-queue wait: about 1-3 ms per copy in a process of some 30 threads
#: (``benchmarks/bench_evidence.py`` measures it), and the GPU idles that long between
#: copies, which a small copy then pays for.
EVIDENCE = ("light", "full")

_GC_STARTS = [0]
_GC_TIME = [0.0, 0.0]  # seconds spent in collections so far; perf_counter at the running one's start
#: An exception Python dropped from the GC counter within a timed window (a Ctrl-C or
#: SIGTERM whose handler ran at the counter's entry), to be raised once the window ends.
_GC_DROPPED: list[BaseException] = []


def _count_gc(phase: str, info: dict) -> None:  # noqa: ARG001 - gc.callbacks' signature
    """The GC counter, in ``gc.callbacks`` only within a :class:`Timer`'s window.

    A signal that arrives while a collection runs in C has its Python handler run at the
    first Python function called afterwards: this one, at its entry, before any ``try``.
    Python then drops the handler's exception ("Exception ignored in"); the window's
    ``sys.unraisablehook`` (:func:`_keep_dropped`) keeps it for the Timer to raise."""
    if phase == "start":
        _GC_STARTS[0] += 1
        _GC_TIME[1] = time.perf_counter()
    elif phase == "stop" and _GC_TIME[1]:
        _GC_TIME[0] += time.perf_counter() - _GC_TIME[1]
        _GC_TIME[1] = 0.0


def _keep_dropped(unraisable: Any) -> None:
    """``sys.unraisablehook`` within a Timer's window: an interrupt dropped from the GC
    counter is kept (:data:`_GC_DROPPED`); anything else goes to the hook in place."""
    exc = unraisable.exc_value
    if unraisable.object is _count_gc and exc is not None and not isinstance(exc, Exception):
        _GC_DROPPED.append(exc)
    else:
        _HOOK[0](unraisable)


_HOOK: list[Callable[[Any], None]] = [sys.unraisablehook]  # the hook the running window replaced
_CALLBACKS = gc.callbacks  # the one list Python calls back from


def _raise_dropped() -> None:
    """Raise the interrupt dropped from the GC counter in the window just ended; outside the
    main thread (where it was meant) ask for it again there."""
    exc = _GC_DROPPED.pop()
    _GC_DROPPED.clear()
    if threading.current_thread() is threading.main_thread():
        raise exc
    _thread.interrupt_main()


def gc_collections() -> int:
    """Python garbage collections started within :class:`Timer` windows so far (any thread)."""
    return _GC_STARTS[0]


def gc_seconds() -> float:
    """Seconds Python's garbage collector has spent in collections that ended within
    :class:`Timer` windows so far (any thread)."""
    return _GC_TIME[0]


def page_faults() -> tuple[float, float]:
    """``(minor, major)`` page faults so far of the scope :data:`RUSAGE_SCOPE` (NaN if unknown)."""
    if _WHO is None:
        return np.nan, np.nan
    r = resource.getrusage(_WHO)
    return float(r.ru_minflt), float(r.ru_majflt)


_NVML: dict[int, Any] = {}  # CUDA device index -> (pynvml, handle), or None: looked up once


def _nvml(dev: torch.device) -> Any:
    """``(pynvml, handle)`` of the NVML device that is CUDA device ``dev`` (matched by PCI
    bus id, so CUDA_VISIBLE_DEVICES cannot mix them up: ``nvml.nvml_for_cuda``), or None.
    Only once CUDA has started (reading the device's properties would start it)."""
    if not torch.cuda.is_initialized():
        return None
    idx = torch.cuda.current_device() if dev.index is None else dev.index
    if idx not in _NVML:
        try:
            bus = bus_id_of(torch.cuda.get_device_properties(idx))
        except Exception:  # noqa: BLE001 - no properties: matched through CUDA_VISIBLE_DEVICES
            bus = None
        _NVML[idx] = nvml_for_cuda(idx, bus)
    return _NVML[idx]


def sm_clock_mhz(dev: torch.device) -> float:
    """The SM clock of CUDA device ``dev`` now, in MHz, per NVML (NaN without NVML)."""
    found = _nvml(dev)
    if found is None:
        return np.nan
    pynvml, handle = found
    try:
        return float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001
        return np.nan


def gpu_other_processes(dev: torch.device) -> float:
    """How many other processes use CUDA device ``dev``, per NVML (NaN if unknown).

    In a container NVML may list this process under the host's process id: if our id is
    not among them, one of them is taken to be us; if none are listed although this
    process holds a context, NVML cannot see processes here and the answer is NaN.
    """
    found = _nvml(dev)
    if found is None:
        return np.nan
    pynvml, handle = found
    try:
        procs = list(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
        try:
            procs += list(pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle))
        except Exception:  # noqa: BLE001 - not supported on every GPU
            pass
    except Exception:  # noqa: BLE001
        return np.nan
    pids = {int(p.pid) for p in procs}
    if not pids:  # this process holds a context there: NVML cannot see processes here
        return np.nan
    return float(len(pids) - 1)  # one of them is us (under the host's id in a container)


class Timer:
    """Times one callable: CUDA events and a synchronised host clock, plus allocator counter
    deltas and evidence for a slow copy (on the CPU, events, counters and NVML's are NaN).

    The evidence costs a few microseconds per copy, read outside the timed region:
    ``minflt``/``majflt`` (page faults, of the scope :data:`RUSAGE_SCOPE`), ``cpu_ms`` (CPU
    time of the *timing thread*, not of threads staging for it), ``gc_count`` (Python collections that started during the copy),
    ``sm_clock_mhz`` (NVML, read right after the copy), ``gpu_procs`` (other
    processes on the GPU, NVML, re-read at most every :data:`PROCS_MAX_AGE_S` seconds),
    ``run_delay_ms`` (time the timing thread was ready to run but waited on a run queue,
    from the scheduler's statistics; NaN where the kernel keeps none), ``nivcsw`` and
    ``nvcsw`` (involuntary and voluntary context switches, of the scope
    :data:`RUSAGE_SCOPE`), ``cpu_moved`` (1.0 when the thread ended the copy on another
    CPU than it began it on), ``proc_cpu_ms`` (CPU time of every thread of this process:
    staging or worker threads, CUDA's and PyTorch's own), ``proc_faults`` (minor plus
    major page faults of every thread of this process: PyTorch's parallel copy into a
    pinned block faults in its worker threads, which ``minflt`` does not see) and ``issue_ms`` (host time
    from the start until the timed call returned, before the final synchronisation: the
    rest of ``wall_ms`` is the wait for the GPU to finish; the one clock read this adds
    inside the timed region costs well under a microsecond) and ``gc_ms`` (time Python's
    garbage collector spent in collections that ended during the copy, any thread), and
    from schema 4 ``others_cpu_ms`` (CPU time of the process's other threads, each read
    from its own CPU clock, exact where ``proc_cpu_ms`` lumps at scheduler ticks; about 1 us
    per thread, just outside the timed region), ``others_window_ms`` (the host time from the
    first read's start to the last's end, which those CPU times fall in: about 0.1 ms longer
    than ``wall_ms`` in a process of some 30 threads, nothing else read in it), ``busiest_cpu_ms`` and
    ``busiest_thread`` (the one that ran most: its CPU time and name) and ``n_threads``
    (how many other threads there were), and from schema 5 ``others_wait_ms`` and
    ``longest_wait_ms`` (their run-queue wait, in all and of the one that waited longest,
    read just around that window: ``threadstat.waits_since``); NaN and "" off Linux.

    Parameters
    ----------
    dev
        The device copied to.
    clock
        Host clock in seconds (tests pass a seeded fake one).
    pause_s
        ``None`` (the default): no pause. Otherwise each call, after its first
        synchronisation and before any counter is read, makes a tiny GPU submission (on
        CUDA, once the context is live: records an event on the current stream and waits
        for it) and then spins on ``time.perf_counter`` (a busy wait, not a sleep: only
        the GPU idles, the CPU keeps running) for ``pause_s`` seconds from its return. The
        GPU thus idles ``pause_s`` plus the counter reads (about 0.1-0.2 ms) before the
        timed copy; the pause is outside ``wall_ms``. The submission does not undo what a
        spell without copies costs the next copy (``causes_wake``'s notes): the spell
        that counts runs from the previous copy's end, the loop's own work included.
    """

    def __init__(
        self,
        dev: torch.device,
        clock: Callable[[], float] = time.perf_counter,
        pause_s: float | None = None,
        evidence: str = "full",
    ) -> None:
        if evidence not in EVIDENCE:
            raise ValueError(f"evidence must be one of {', '.join(EVIDENCE)}, not {evidence!r}")
        self.dev, self.clock, self.pause_s, self.evidence = dev, clock, pause_s, evidence
        self.full = evidence == "full"
        self.cuda = dev.type == "cuda"
        self._procs, self._procs_at = np.nan, -np.inf
        if self.cuda:
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)

    def __call__(self, fn: Callable[[], Any], counters: bool = True) -> tuple[Any, dict[str, float]]:
        """Run ``fn`` once; return its result and ``wall_ms``, ``event_ms``, ``host_allocs``,
        ``device_allocs``, ``minflt``, ``majflt``, ``cpu_ms``, ``gc_count``,
        ``sm_clock_mhz``, ``gpu_procs``, ``run_delay_ms``, ``nivcsw``, ``nvcsw``,
        ``cpu_moved``, ``proc_cpu_ms``, ``proc_faults``, ``issue_ms``, ``gc_ms``,
        ``others_cpu_ms``, ``others_window_ms``, ``busiest_cpu_ms``, ``busiest_thread``,
        ``n_threads``, ``others_wait_ms`` and ``longest_wait_ms``.

        ``counters=False`` leaves the two allocator counters unread (``host_allocs`` and
        ``device_allocs`` NaN) once CUDA is live: reading them costs some 15-20 us each
        side of the copy, host work between two copies that a small copy after it pays
        for (a sweep reads them around a block of copies instead: ``harness``)."""
        cuda = self.cuda
        # Before CUDA starts (the forum's first copy) there is nothing to wait for, and
        # synchronising would start the context outside the timed region.
        live = cuda and torch.cuda.is_initialized()
        if live:
            torch.cuda.synchronize(self.dev)
        if self.pause_s is not None:
            self.pause(live)
        count = cuda and (counters or not live)  # before CUDA starts they are read (from 0)
        h0 = (host_alloc_count() if live else 0.0) if count else np.nan
        d0 = (device_segment_count(self.dev) if live else 0.0) if count else np.nan
        q0 = resource.getrusage(resource.RUSAGE_SELF) if _WHO is not None else None
        f0 = resource.getrusage(_WHO) if _WHO is not None else None
        s0 = sched_state()
        full = self.full
        v0 = (others_wait_ns() or None) if full else None  # 33 threads' waits take ~0.35 ms
        w0 = time.perf_counter()  # the other threads' clocks are read within [w0, w1]
        o0 = (others_cpu_ns() or None) if full else None
        p0 = time.process_time()
        # The GC counter is in gc.callbacks only for the window (a Ctrl-C handled at its
        # entry is dropped by Python: _count_gc), and read last before the start and first
        # after the stop: in between, outside fn, only floats are made, and they cannot
        # start a collection.
        inner = sys.unraisablehook is _keep_dropped  # within another window: its counter counts
        if not inner:
            _HOOK[0] = sys.unraisablehook
            sys.unraisablehook = _keep_dropped
            _CALLBACKS.append(_count_gc)
        try:
            g0, gt0 = _GC_STARTS[0], _GC_TIME[0]
            c0 = time.thread_time()
            t0 = self.clock()
            i0 = t0 if self.clock is time.perf_counter else time.perf_counter()
            # Nothing but the copy between the two events: the end event is recorded before
            # the host's issue clock is read (tests/measure/test_timer_window.py checks the order).
            if cuda:
                self.start.record()
                out = fn()
                self.end.record()
                i1 = time.perf_counter()
                torch.cuda.synchronize(self.dev)
            else:
                out = fn()
                i1 = time.perf_counter()
            t1 = self.clock()
            c1 = time.thread_time()
            g1, gt1 = _GC_STARTS[0], _GC_TIME[0]
        finally:
            if not inner:
                _CALLBACKS.remove(_count_gc)
                sys.unraisablehook = _HOOK[0]
            if _GC_DROPPED:
                _raise_dropped()
        p1 = time.process_time()
        o1 = others_cpu_ns() if o0 is not None else None
        w1 = time.perf_counter()
        others, busiest, busiest_name, n_threads = others_between(o0, o1)
        waits, longest_wait = waits_since(v0)
        s1 = sched_state()
        f1 = resource.getrusage(_WHO) if f0 is not None else None
        q1 = resource.getrusage(resource.RUSAGE_SELF) if q0 is not None else None
        rec = {
            "wall_ms": (t1 - t0) * 1e3,
            "event_ms": self.start.elapsed_time(self.end) if cuda else np.nan,
            "host_allocs": host_alloc_count() - h0 if count else np.nan,
            "device_allocs": device_segment_count(self.dev) - d0 if count else np.nan,
            "minflt": float(f1.ru_minflt - f0.ru_minflt) if f0 is not None else np.nan,
            "majflt": float(f1.ru_majflt - f0.ru_majflt) if f0 is not None else np.nan,
            "cpu_ms": (c1 - c0) * 1e3,
            "gc_count": float(g1 - g0),
            "sm_clock_mhz": sm_clock_mhz(self.dev) if cuda and full else np.nan,
            "gpu_procs": self.gpu_procs() if cuda and full else np.nan,
            "run_delay_ms": (s1[0] - s0[0]) / 1e6,
            "nivcsw": float(f1.ru_nivcsw - f0.ru_nivcsw) if f0 is not None else np.nan,
            "nvcsw": float(f1.ru_nvcsw - f0.ru_nvcsw) if f0 is not None else np.nan,
            "cpu_moved": float(s1[1] != s0[1]) if s0[1] == s0[1] and s1[1] == s1[1] else np.nan,
            "proc_cpu_ms": (p1 - p0) * 1e3,
            "proc_faults": (
                float(q1.ru_minflt + q1.ru_majflt - q0.ru_minflt - q0.ru_majflt) if q0 is not None else np.nan
            ),
            "issue_ms": (i1 - i0) * 1e3,
            "gc_ms": (gt1 - gt0) * 1e3,
            "others_cpu_ms": others,
            "others_window_ms": (w1 - w0) * 1e3 if o0 is not None else np.nan,
            "busiest_cpu_ms": busiest,
            "busiest_thread": busiest_name,
            "n_threads": n_threads,
            "others_wait_ms": waits,
            "longest_wait_ms": longest_wait,
        }
        return out, rec

    def pause(self, live: bool) -> None:
        """A tiny GPU submission (when ``live``: an event recorded and waited for), then a
        spin of ``pause_s`` seconds on ``time.perf_counter`` with the GPU idle."""
        if live:
            woken = torch.cuda.Event()
            woken.record()
            woken.synchronize()
        until = time.perf_counter() + self.pause_s
        while time.perf_counter() < until:
            pass

    def gpu_procs(self) -> float:
        """Other processes on this GPU (see :func:`gpu_other_processes`), re-read at most
        every :data:`PROCS_MAX_AGE_S` seconds."""
        now = time.monotonic()
        if now - self._procs_at >= PROCS_MAX_AGE_S:
            self._procs, self._procs_at = gpu_other_processes(self.dev), now
        return self._procs
