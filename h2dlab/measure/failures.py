"""Which failures of a timed copy a sweep may record and go on from (out of memory), and which
leave the CUDA context unusable (a CUDA fault), so that the sweep must stop; and the
``error`` column's text. ``h2dlab.measure.timing`` re-exports these names, where they were first.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["CudaFault", "error_text", "is_cuda_fault", "is_oom", "keep_failure"]


class CudaFault(RuntimeError):
    """A CUDA error after which every later copy would fail (the context is poisoned):
    the run stops, keeping the rows measured so far."""


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


def keep_failure(
    exc: BaseException, rows: dict[str, Any] | list[dict[str, Any]], run: Any, dev: torch.device
) -> str:
    """Record a failed timed step in its row (or rows) and go on, or stop: returns the ``error`` text.

    Anything but an out-of-memory error or a ``RuntimeError`` is raised again (a bug). A CUDA
    fault writes the rows to ``run`` and raises :class:`CudaFault` (the context is unusable);
    any other failure frees the device's cached memory so the run can go on. The caller
    writes the rows in that case, as it writes every row.
    """
    if not (is_oom(exc) or isinstance(exc, RuntimeError)):
        raise exc
    rows = [rows] if isinstance(rows, dict) else rows
    text = error_text(exc)
    for row in rows:
        row["error"] = text
    if is_cuda_fault(exc):
        for row in rows:
            run.write(row)
        raise CudaFault(text) from exc
    from h2dlab.measure.device import release_memory

    release_memory(dev)
    return text
