"""Checks of what the staged copy is given, made before CUDA is touched: counts in range, CUDA
devices, and which tensors ``tensor.to()`` already copies as well as staging could."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["check_count", "cuda_device", "takes_plain_to"]


def check_count(name: str, value: Any, lo: int, hi: int) -> int:
    """``value`` as an int in ``[lo, hi]``; TypeError if not an integer, ValueError if out of range."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be between {lo} and {hi}, got {value}")
    return int(value)


def cuda_device(device: Any) -> torch.device:
    """``device`` (``"cuda"``, ``"cuda:1"``, a ``torch.device`` or an index) as a CUDA
    ``torch.device``, checked without touching CUDA.

    Raises
    ------
    TypeError
        If ``device`` is not a string, ``torch.device`` or int.
    ValueError
        If it names no device, a negative index, or a device that is not CUDA.
    """
    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str):
        try:
            dev = torch.device(device)
        except RuntimeError:
            raise ValueError(f"{device!r} is not a device name; use e.g. 'cuda' or 'cuda:0'") from None
    elif isinstance(device, (int, np.integer)) and not isinstance(device, bool):
        if device < 0:
            raise ValueError(f"a CUDA device index must be >= 0, got {device}")
        dev = torch.device("cuda", int(device))
    else:
        raise TypeError(f"device must be a string, torch.device or int, got {type(device).__name__}")
    if dev.type != "cuda":
        raise ValueError(f"this copies to a CUDA device, got {str(dev)!r}; use tensor.to() for other devices")
    return dev


def takes_plain_to(tensor: torch.Tensor) -> bool:
    """Whether ``tensor.to(device)`` is already the right copy, so staging has nothing to add:
    not a plain dense CPU tensor (on a GPU, sparse, quantized, a subclass), tracking
    gradients (``.to()`` keeps the graph), empty, or already pinned.

    Raises
    ------
    ValueError
        For a meta tensor: it has no data to copy.
    """
    if tensor.is_meta:
        raise ValueError("a meta tensor has no data to copy; create it on a real device first")
    if (
        type(tensor) is not torch.Tensor
        or not tensor.is_cpu
        or tensor.layout != torch.strided
        or tensor.is_quantized
        or tensor.requires_grad
        or tensor.numel() == 0
    ):
        return True
    return tensor.is_pinned()
