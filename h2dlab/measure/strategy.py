"""What a strategy is: the base class every way of copying subclasses, and the registry they
join (:func:`register`). :mod:`h2dlab.measure.strategies` (host to device) and
:mod:`h2dlab.measure.strategies_d2h` (device to host) hold the strategies themselves and the
functions that look them up.
"""

from __future__ import annotations

from typing import ClassVar

import torch

__all__ = ["REGISTRY", "Strategy", "register"]


class Strategy:
    """Base class. Subclasses set ``name``, ``summary``, ``needs_cuda`` and ``direction``,
    and ``allocates = False`` when a copy after the first makes no new pinned block and no
    new device segment (then a sweep reads the allocator counters around a block of such
    copies, not around each: each read costs some 15-20 us of host work between copies).
    A subclass whose ``prepare`` keeps buffers until ``cleanup`` overrides :meth:`held_bytes`
    (an interleaved sweep keeps a cell prepared between its rounds within a byte budget)."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    needs_cuda: ClassVar[bool] = True
    direction: ClassVar[str] = "h2d"
    allocates: ClassVar[bool] = True

    def __init__(self) -> None:
        self.device: torch.device = torch.device("cpu")

    def prepare(self, x: torch.Tensor, device: torch.device) -> None:
        self.device = device

    def copy(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def cleanup(self) -> None:
        pass

    @classmethod
    def held_bytes(cls, nbytes: int) -> int:
        """Bytes of memory (host and device together) that ``prepare`` keeps until
        ``cleanup`` for a tensor of ``nbytes``: none here; at most this in a subclass."""
        return 0


REGISTRY: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator: add a strategy to the registry under ``cls.name``."""
    REGISTRY[cls.name] = cls
    return cls
