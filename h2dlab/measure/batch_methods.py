"""The ways to move a batch of many host tensors to the GPU, one small class each.

Like :mod:`h2dlab.measure.strategies`, each method has ``prepare(tensors, device)`` (what a
program does once: pin a copy, allocate a flat buffer), ``copy(tensors)`` (timed; returns
the device tensors, in order, equal to the sources) and ``cleanup()``. The sources are
separate pageable tensors (:func:`batch_sizes` and :func:`make_batch` make them, seeded).
"""

from __future__ import annotations

import os
from typing import ClassVar

import numpy as np
import torch

__all__ = [
    "LAYOUTS",
    "METHODS",
    "BatchMethod",
    "available",
    "batch_sizes",
    "get",
    "make_batch",
]

#: Batch layouts: every tensor the same size, or seeded log-normal sizes (multiples of 64 B).
LAYOUTS = ("equal", "mixed")
METHODS: dict[str, type[BatchMethod]] = {}


def batch_sizes(n: int, total: int, layout: str, seed: int = 0) -> list[int]:
    """Byte sizes of ``n`` tensors summing to ``total``.

    ``equal``: ``total // n`` each (the remainder spread over the first ones). ``mixed``:
    log-normal weights (sigma 1, seeded by ``seed`` and ``n``), multiples of 64 bytes, at
    least 64 each. Raises ``ValueError`` if ``total`` cannot hold ``n`` tensors.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    if n < 1 or total < (n if layout == "equal" else 64 * n) or (layout == "mixed" and total % 64):
        raise ValueError(
            f"{total} bytes cannot make {n} {layout} tensors (mixed: 64 B each, total a multiple of 64)"
        )
    if layout == "equal":
        q, r = divmod(total, n)
        return [q + (i < r) for i in range(n)]
    w = np.random.default_rng([seed, n]).lognormal(0.0, 1.0, n)
    units = total // 64 - n  # beyond the 64 B each tensor has
    extra = np.floor(w / w.sum() * units).astype(np.int64)
    extra[int(np.argmax(w))] += units - int(extra.sum())
    return [int(64 * (1 + e)) for e in extra]


def make_batch(sizes: list[int], source: torch.Tensor) -> list[torch.Tensor]:
    """Separate pageable uint8 tensors of ``sizes`` bytes, filled from ``source`` in turn."""
    out, off = [], 0
    for n in sizes:
        out.append(source[off : off + n].clone())
        off += n
    return out


def _register(cls: type[BatchMethod]) -> type[BatchMethod]:
    METHODS[cls.name] = cls
    return cls


def get(name: str) -> BatchMethod:
    """A fresh instance of the named method; ``KeyError`` names the valid ones."""
    try:
        return METHODS[name]()
    except KeyError:
        raise KeyError(f"unknown batch method {name!r}; choose from {', '.join(METHODS)}") from None


def available(name: str, device: torch.device) -> str:
    """Empty string if method ``name`` can run on ``device``, else why not."""
    return METHODS[name].unavailable(device)


class BatchMethod:
    """Base class: ``name``, ``summary``, ``needs_cuda``; sources pinned only on CUDA.
    ``held`` names the attributes ``prepare()`` fills and ``cleanup()`` lets go of."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    needs_cuda: ClassVar[bool] = False
    held: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def unavailable(cls, device: torch.device) -> str:
        if cls.needs_cuda and device.type != "cuda":
            return f"unavailable on {device.type}: {cls.name} needs CUDA"
        return ""

    def prepare(self, tensors: list[torch.Tensor], device: torch.device) -> None:
        self.device = device
        self.pin = device.type == "cuda"

    def copy(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:  # pragma: no cover
        raise NotImplementedError

    def cleanup(self) -> None:
        for attr in self.held:
            setattr(self, attr, None)


@_register
class LoopTo(BatchMethod):
    name = "loop_to"
    summary = "[t.to(device) for t in batch]: one synchronous copy per tensor"

    def copy(self, tensors):
        return [t.to(self.device, copy=True) for t in tensors]


@_register
class LoopNonBlocking(BatchMethod):
    name = "loop_non_blocking"
    summary = "t.to(device, non_blocking=True) for each tensor, then one synchronisation"

    def copy(self, tensors):
        return [t.to(self.device, non_blocking=True, copy=True) for t in tensors]


@_register
class PinnedEach(BatchMethod):
    name = "pinned_each"
    summary = "each tensor pinned beforehand in its own buffer (prepare, not timed), copied non_blocking"
    held = ("pinned",)

    def prepare(self, tensors, device):
        super().prepare(tensors, device)
        self.pinned = [torch.empty_like(t, pin_memory=self.pin).copy_(t) for t in tensors]

    def copy(self, tensors):
        return [p.to(self.device, non_blocking=True, copy=True) for p in self.pinned]


class _Packed(BatchMethod):
    """Packs the batch on the host into one reused flat buffer; the result is views of one
    device buffer."""

    held = ("buf", "sent")

    def prepare(self, tensors, device):
        super().prepare(tensors, device)
        self.bounds = np.cumsum([0] + [t.nbytes for t in tensors]).tolist()
        self.buf = torch.empty(self.bounds[-1], dtype=torch.uint8, pin_memory=self.pin and self.pinned_buf)
        self.sent = torch.cuda.Event() if self.pin else None  # the last DMA out of buf

    def pack(self, tensors) -> torch.Tensor:
        if self.sent is not None:
            self.sent.synchronize()  # the previous copy has left the buffer
        torch.cat([t.reshape(-1).view(torch.uint8) for t in tensors], out=self.buf)
        return self.buf

    def views(self, flat, tensors):
        if self.sent is not None:
            self.sent.record()
        b = self.bounds
        return [flat[b[i] : b[i + 1]].view(t.dtype).view(t.shape) for i, t in enumerate(tensors)]


@_register
class PinnedFlat(_Packed):
    name = "pinned_flat"
    summary = "pack into one reused pinned buffer on the host, one copy, views on the device"
    pinned_buf = True

    def copy(self, tensors):
        return self.views(self.pack(tensors).to(self.device, non_blocking=True, copy=True), tensors)


@_register
class ToDevicePacked(_Packed):
    name = "to_device_packed"
    summary = "pack into one reused pageable buffer, h2dlab.transfer.fastpath.to_device (staged), views"
    needs_cuda = True
    pinned_buf = False

    def copy(self, tensors):
        from h2dlab.transfer.fastpath import to_device

        return self.views(to_device(self.pack(tensors), self.device), tensors)


@_register
class ForeachCopy(BatchMethod):
    name = "foreach_copy"
    summary = (
        "torch._foreach_copy_(preallocated device tensors, sources pinned beforehand, non_blocking=True)"
    )
    held = ("pinned", "outs")

    @classmethod
    def unavailable(cls, device):
        if not hasattr(torch, "_foreach_copy_"):
            return f"unavailable: torch {torch.__version__} has no torch._foreach_copy_"
        return super().unavailable(device)

    def prepare(self, tensors, device):
        super().prepare(tensors, device)
        self.pinned = [torch.empty_like(t, pin_memory=self.pin).copy_(t) for t in tensors]
        self.outs = [torch.empty_like(t, device=device) for t in tensors]

    def copy(self, tensors):
        torch._foreach_copy_(self.outs, self.pinned, non_blocking=True)
        return self.outs


@_register
class TensorDictPin(BatchMethod):
    name = "tensordict"
    summary = "TensorDict(batch).to(device, non_blocking_pin=True, num_threads=8): pinned by threads"
    needs_cuda = True
    held = ("td",)

    @classmethod
    def unavailable(cls, device):
        try:
            import tensordict  # noqa: F401 - optional: pip install 'h2dlab[tensordict]'
        except ImportError:
            return "unavailable: tensordict is not installed (pip install 'h2dlab[tensordict]')"
        return super().unavailable(device)

    def prepare(self, tensors, device):
        from tensordict import TensorDict

        super().prepare(tensors, device)
        self.keys = [f"t{i}" for i in range(len(tensors))]
        self.td = TensorDict(dict(zip(self.keys, tensors, strict=True)), batch_size=[])
        self.threads = min(8, os.cpu_count() or 1)

    def copy(self, tensors):
        out = self.td.to(self.device, non_blocking_pin=True, num_threads=self.threads)
        return [out[k] for k in self.keys]
