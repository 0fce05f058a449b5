"""The ways to move a host tensor to the GPU: one small class each, in a registry.

Each strategy has three steps. ``prepare(x, device)`` does what a program would do
once, outside the timed region (allocate a reusable buffer, say). ``copy(x)`` is the
timed step and returns the tensor on the target device. ``cleanup()`` releases what
``prepare`` took. The harness times ``copy`` alone, one call at a time.
"""

from __future__ import annotations

from typing import ClassVar

import torch

__all__ = [
    "REGISTRY",
    "HostRegister",
    "Pageable",
    "PageableNonBlocking",
    "PinThenCopy",
    "PinnedReuse",
    "Staged",
    "Strategy",
    "available",
    "get",
    "names",
    "register",
]


class Strategy:
    """Base class. Subclasses set ``name``, ``summary`` and ``needs_cuda``."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    needs_cuda: ClassVar[bool] = True

    def __init__(self) -> None:
        self.device: torch.device = torch.device("cpu")

    def prepare(self, x: torch.Tensor, device: torch.device) -> None:
        self.device = device

    def copy(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def cleanup(self) -> None:
        pass


REGISTRY: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator: add a strategy to the registry under ``cls.name``."""
    REGISTRY[cls.name] = cls
    return cls


def names() -> list[str]:
    """Registered strategy names, in registry order."""
    return list(REGISTRY)


def get(name: str) -> Strategy:
    """A fresh instance of the named strategy; ``KeyError`` names the valid ones."""
    try:
        return REGISTRY[name]()
    except KeyError:
        raise KeyError(f"unknown strategy {name!r}; choose from {', '.join(REGISTRY)}") from None


def available(name: str, device: torch.device) -> str:
    """Empty string if ``name`` can run on ``device``, else the reason it cannot."""
    cls = REGISTRY[name]
    if cls.needs_cuda and device.type != "cuda":
        return f"unavailable on {device.type}: {name} needs CUDA"
    return ""


@register
class Pageable(Strategy):
    name = "pageable"
    summary = "x.to(device): the driver stages pageable memory through its own pinned buffer"
    needs_cuda = False

    def copy(self, x):
        # copy=True so that on the CPU it is a real host copy, not a no-op.
        return x.to(self.device, copy=True)


@register
class PageableNonBlocking(Strategy):
    name = "pageable_non_blocking"
    summary = "x.to(device, non_blocking=True) then synchronise: still staged by the driver"
    needs_cuda = False

    def copy(self, x):
        return x.to(self.device, non_blocking=True, copy=True)


@register
class PinThenCopy(Strategy):
    name = "pin_then_copy"
    summary = "x.pin_memory().to(device): the forum's pattern, pinning timed with the copy"

    def copy(self, x):
        return x.pin_memory().to(self.device, non_blocking=True)


@register
class PinnedReuse(Strategy):
    name = "pinned_reuse"
    summary = "data already in a pinned buffer, copied into a preallocated device buffer"

    def prepare(self, x, device):
        super().prepare(x, device)
        self.staging = torch.empty(x.shape, dtype=x.dtype, pin_memory=True)
        self.staging.copy_(x)
        self.out = torch.empty(x.shape, dtype=x.dtype, device=device)

    def copy(self, x):
        return self.out.copy_(self.staging, non_blocking=True)

    def cleanup(self):
        self.staging = self.out = None


@register
class HostRegister(Strategy):
    name = "host_register"
    summary = "pin the existing buffer in place (cudaHostRegister), copy, unregister"

    def copy(self, x):
        from h2dlab.transfer import pinned

        with pinned(x) as px:
            out = px.to(self.device, non_blocking=True)
        return out


@register
class Staged(Strategy):
    name = "staged"
    summary = "h2dlab.transfer.to_device: threads stage chunks through a pinned ring, DMA overlaps"

    def copy(self, x):
        from h2dlab.transfer import to_device

        return to_device(x, self.device)
