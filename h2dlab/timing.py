"""Timing one copy: CUDA events, a synchronised host clock and allocator counters.

Also which failures a sweep may record and go on from (out of memory) and which
leave the CUDA context unusable (a CUDA fault), so that the sweep must stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

__all__ = [
    "CudaFault",
    "Timer",
    "device_segment_count",
    "error_text",
    "host_alloc_count",
    "is_cuda_fault",
    "is_oom",
]


class CudaFault(RuntimeError):
    """A CUDA error after which every later copy would fail (the context is poisoned):
    the run stops, keeping the rows measured so far."""


def host_alloc_count() -> float:
    """cudaHostAlloc calls so far by PyTorch's caching host allocator (NaN if unknown)."""
    try:
        return float(torch.cuda.host_memory_stats().get("num_host_alloc", np.nan))
    except Exception:  # noqa: BLE001 - older torch, or CUDA not initialised
        return np.nan


def device_segment_count(dev: torch.device) -> float:
    """cudaMalloc'd segments so far by the device caching allocator (NaN if unknown)."""
    try:
        return float(torch.cuda.memory_stats(dev).get("segment.all.allocated", np.nan))
    except Exception:  # noqa: BLE001
        return np.nan


class Timer:
    """Times one callable: CUDA events and a synchronised host clock, plus allocator
    counter deltas. On the CPU, events and counters are NaN.

    Parameters
    ----------
    dev
        The device copied to.
    clock
        Host clock in seconds (tests pass a seeded fake one).
    """

    def __init__(self, dev: torch.device, clock: Callable[[], float] = time.perf_counter) -> None:
        self.dev, self.clock = dev, clock
        self.cuda = dev.type == "cuda"
        if self.cuda:
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)

    def __call__(self, fn: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
        """Run ``fn`` once; return its result and ``wall_ms``, ``event_ms``,
        ``host_allocs``, ``device_allocs``."""
        cuda = self.cuda
        # Before CUDA starts (the forum's first copy) there is nothing to wait for, and
        # synchronising would start the context outside the timed region.
        live = cuda and torch.cuda.is_initialized()
        if live:
            torch.cuda.synchronize(self.dev)
        h0 = host_alloc_count() if live else (0.0 if cuda else np.nan)
        d0 = device_segment_count(self.dev) if live else (0.0 if cuda else np.nan)
        t0 = self.clock()
        if cuda:
            self.start.record()
        out = fn()
        if cuda:
            self.end.record()
            torch.cuda.synchronize(self.dev)
        t1 = self.clock()
        rec = {
            "wall_ms": (t1 - t0) * 1e3,
            "event_ms": self.start.elapsed_time(self.end) if cuda else np.nan,
            "host_allocs": host_alloc_count() - h0 if cuda else np.nan,
            "device_allocs": device_segment_count(self.dev) - d0 if cuda else np.nan,
        }
        return out, rec


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` says memory ran out (host or device)."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    msg = str(exc).lower()
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        "out of memory" in msg or "can't allocate memory" in msg or isinstance(exc, MemoryError)
    )


def is_cuda_fault(exc: BaseException) -> bool:
    """Whether ``exc`` is a CUDA error other than out-of-memory (an illegal memory access,
    a device-side assert, a launch failure, ...): after one, the context is unusable."""
    if isinstance(exc, CudaFault):
        return True
    if not isinstance(exc, RuntimeError) or is_oom(exc):
        return False
    msg = str(exc)
    return "CUDA error" in msg or "cudaError" in msg or "device-side assert" in msg


def error_text(exc: BaseException) -> str:
    """The ``error`` column's text for a failed copy: kind and first line, at most 300 characters."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    kind = "OOM" if is_oom(exc) else type(exc).__name__
    return f"{kind}: {first}"[:300]
