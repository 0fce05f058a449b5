"""The ways to move a tensor between host and GPU: one small class each, in a registry.

Each strategy has a ``direction``: ``"h2d"`` (here) moves a host tensor to the GPU;
``"d2h"`` (:mod:`h2dlab.measure.strategies_d2h`, names starting ``d2h_``) brings a copy of it
back from the GPU, where ``prepare`` put it. A sweep's rows carry the direction of their
strategy, so naming d2h strategies is how a sweep measures device→host copies.

Each strategy has three steps. ``prepare(x, device)`` does what a program would do
once, outside the timed region (allocate a reusable buffer, say). ``copy(x)`` is the
timed step and returns the tensor on the target device. ``cleanup()`` releases what
``prepare`` took. The harness times ``copy`` alone, one call at a time.
"""

from __future__ import annotations

import torch

from h2dlab.measure.strategy import REGISTRY, Strategy, register

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
    "direction_of",
    "get",
    "names",
    "register",
]


def names(direction: str | None = "h2d") -> list[str]:
    """Registered strategy names of ``direction`` (``"h2d"``, ``"d2h"``; None: all), in
    registry order. The default, host to device, is what a sweep runs when none are named."""
    if direction not in (None, "h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d', 'd2h' or None, not {direction!r}")
    return [n for n, cls in REGISTRY.items() if direction is None or cls.direction == direction]


def direction_of(name: str) -> str:
    """``"h2d"`` or ``"d2h"``: which way the named strategy copies."""
    return REGISTRY[name].direction


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
    allocates = False
    summary = "x.to(device): the driver stages pageable memory through its own pinned buffer"
    needs_cuda = False

    def copy(self, x):
        # copy=True so that on the CPU it is a real host copy, not a no-op.
        return x.to(self.device, copy=True)


@register
class PageableNonBlocking(Strategy):
    name = "pageable_non_blocking"
    allocates = False
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
    allocates = False
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

    @classmethod
    def held_bytes(cls, nbytes):
        return 2 * nbytes  # the pinned staging buffer and the device buffer


@register
class HostRegister(Strategy):
    name = "host_register"
    summary = "pin the existing buffer in place (cudaHostRegister), copy, unregister"

    def copy(self, x):
        from h2dlab.transfer.fastpath import pinned

        with pinned(x) as px:
            out = px.to(self.device, non_blocking=True)
        return out


@register
class Staged(Strategy):
    name = "staged"
    summary = "h2dlab.transfer.fastpath.to_device: threads stage chunks through a pinned ring, DMA overlaps"

    def copy(self, x):
        from h2dlab.transfer.fastpath import to_device

        return to_device(x, self.device)


# The device-to-host strategies register themselves in the same registry when imported.
from h2dlab.measure import strategies_d2h  # noqa: E402, F401
