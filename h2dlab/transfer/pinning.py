"""Page-locking existing host memory in place (``cudaHostRegister``), for a block or a region."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["host_register", "host_unregister", "pinned"]


def _cuda_check(err: Any, what: str) -> None:
    code = int(getattr(err, "value", err))
    if code != 0:
        raise RuntimeError(f"{what} failed with CUDA error {code} ({err})")


def host_register(ptr: int, nbytes: int) -> None:
    """Page-lock ``nbytes`` of existing host memory at ``ptr`` (``cudaHostRegister``)."""
    _cuda_check(torch.cuda.cudart().cudaHostRegister(ptr, nbytes, 0), "cudaHostRegister")


def host_unregister(ptr: int) -> None:
    """Undo :func:`host_register` (``cudaHostUnregister``)."""
    _cuda_check(torch.cuda.cudart().cudaHostUnregister(ptr), "cudaHostUnregister")


@contextmanager
def pinned(tensor: torch.Tensor) -> Iterator[torch.Tensor]:
    """Pin an existing contiguous CPU tensor in place for the ``with`` block.

    Uses ``cudaHostRegister``, so no copy is made: inside the block
    ``tensor.is_pinned()`` is True and ``tensor.to("cuda", non_blocking=True)`` is a
    true asynchronous DMA. On exit the device is synchronised (no DMA may still read
    the memory) and the memory is unregistered, also when the block raises.

    Raises
    ------
    TypeError, ValueError
        For what cannot be pinned in place: not a tensor, not on the CPU, not
        contiguous, empty, or already pinned.
    RuntimeError
        If CUDA is unavailable or the driver refuses the registration.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"pinned() expects a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"pinned() pins CPU memory; this tensor is on {tensor.device}")
    if not tensor.is_contiguous():
        raise ValueError("pinned() needs a contiguous tensor: call .contiguous() first (that copies)")
    if tensor.numel() == 0:
        raise ValueError("pinned() cannot pin an empty tensor")
    if not torch.cuda.is_available():
        raise RuntimeError("pinned() needs CUDA, and torch.cuda.is_available() is False")
    if tensor.is_pinned():
        raise ValueError("this tensor is already pinned; use it as it is")
    ptr, nbytes = tensor.data_ptr(), tensor.numel() * tensor.element_size()
    host_register(ptr, nbytes)
    try:
        yield tensor
    finally:
        torch.cuda.synchronize()
        host_unregister(ptr)
