"""The ways to bring a tensor back from the GPU to the host (direction ``"d2h"``).

``prepare(x, device)`` puts a copy of the host tensor ``x`` on the device (untimed), the
way a result sits on the GPU before a program wants it back; ``copy(x)`` is the timed
step and returns a host tensor with ``x``'s bytes, ready to read (each strategy waits for
its own copy, as a program must before it reads the result). Registered in
:data:`h2dlab.measure.strategies.REGISTRY`; their names start ``d2h_``.
"""

from __future__ import annotations

import torch

from h2dlab.measure.strategy import Strategy, register

__all__ = ["D2HNonBlocking", "D2HPageable", "D2HPinnedReuse", "D2HStaged"]


class _FromDevice(Strategy):
    """Keeps the source on the device; subclasses implement ``copy``."""

    direction = "d2h"

    def prepare(self, x, device):
        super().prepare(x, device)
        # On the CPU (host copies only) the "device" tensor is a separate host copy.
        self.src = x.to(device, copy=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def cleanup(self):
        self.src = None

    @classmethod
    def held_bytes(cls, nbytes):
        return nbytes  # the source on the device


@register
class D2HPageable(_FromDevice):
    name = "d2h_pageable"
    allocates = False
    summary = "y.to('cpu'): into new pageable memory, staged by the driver"
    needs_cuda = False

    def copy(self, x):
        return self.src.to("cpu", copy=True)


@register
class D2HPinnedReuse(_FromDevice):
    name = "d2h_pinned_reuse"
    allocates = False
    summary = "out.copy_(y, non_blocking=True) into a preallocated pinned buffer, then synchronise"

    def prepare(self, x, device):
        super().prepare(x, device)
        self.out = torch.empty(x.shape, dtype=x.dtype, pin_memory=True)

    def copy(self, x):
        self.out.copy_(self.src, non_blocking=True)
        torch.cuda.current_stream(self.device).synchronize()
        return self.out

    def cleanup(self):
        self.src = self.out = None

    @classmethod
    def held_bytes(cls, nbytes):
        return 2 * nbytes  # the source on the device and the pinned buffer


@register
class D2HNonBlocking(_FromDevice):
    name = "d2h_non_blocking"
    summary = (
        "y.to('cpu', non_blocking=True) then synchronise: PyTorch allocates the result in pinned "
        "memory (its caching host allocator), so the DMA is direct"
    )

    def copy(self, x):
        out = self.src.to("cpu", non_blocking=True)
        torch.cuda.current_stream(self.device).synchronize()
        return out


@register
class D2HStaged(_FromDevice):
    """Back to new pageable memory through a ring of pinned slots: the DMA of one chunk
    into a pinned slot overlaps the host copy of the previous chunk out of its slot."""

    name = "d2h_staged"
    summary = "chunks DMA'd into a ring of pinned slots on a side stream, each copied out on the host"
    #: Slot size and count: 8 MiB x 2 (one in DMA, one being copied out).
    chunk_bytes = 8 * 1024**2
    slots = 2

    def prepare(self, x, device):
        super().prepare(x, device)
        n = min(self.chunk_bytes, max(x.nbytes, 1))
        self.ring = [torch.empty(n, dtype=torch.uint8, pin_memory=True) for _ in range(self.slots)]
        self.stream = torch.cuda.Stream(device)
        self.done = [torch.cuda.Event() for _ in range(self.slots)]

    def copy(self, x):
        src = self.src.reshape(-1).view(torch.uint8)
        out = torch.empty(x.shape, dtype=x.dtype)
        dst = out.reshape(-1).view(torch.uint8)
        nbytes, step = src.numel(), self.ring[0].numel()
        bounds = [(a, min(a + step, nbytes)) for a in range(0, nbytes, step)]
        self.stream.wait_stream(torch.cuda.current_stream(self.device))  # src is ready there
        for i, (a, b) in enumerate(bounds):
            k = i % self.slots
            # Slot k's previous chunk was copied out (synchronously) before this point.
            with torch.cuda.stream(self.stream):
                self.ring[k][: b - a].copy_(src[a:b], non_blocking=True)
                self.done[k].record(self.stream)
            if i:
                self._drain(i - 1, bounds, dst)
        if bounds:
            self._drain(len(bounds) - 1, bounds, dst)
        return out

    def _drain(self, i, bounds, dst):
        a, b = bounds[i]
        k = i % self.slots
        self.done[k].synchronize()
        dst[a:b].copy_(self.ring[k][: b - a])

    def cleanup(self):
        self.src = self.ring = self.stream = self.done = None

    @classmethod
    def held_bytes(cls, nbytes):
        return nbytes + cls.slots * min(cls.chunk_bytes, max(nbytes, 1))  # the source and the ring
