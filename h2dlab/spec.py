"""Frozen run specs: *what* a run measures, checked when made, stored in env.json.

A spec validates itself on construction (``UsageError``, a ``ValueError``, in library
terms), serialises to the dict stored as ``env['spec']`` (:meth:`to_dict`) and back
(:func:`spec_from_dict`), and is what ``--resume`` compares: :func:`differences` names
the fields that changed. Where a run goes (``out``) and how it is watched (progress,
stop) are not part of the spec.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from h2dlab.errors import UsageError

__all__ = [
    "DEFAULT_SIZES",
    "FORUM_ORDERS",
    "ORDERS",
    "ForumSpec",
    "OverlapSpec",
    "SweepSpec",
    "differences",
    "spec_from_dict",
]

#: Execution orders of a sweep (see plan.plan_sweep).
ORDERS = ("shuffled", "ascending", "interleaved")
#: Execution orders of the forum protocol.
FORUM_ORDERS = ("ascending", "shuffled")
#: A sweep's sizes when none are given: powers of two, 1 KiB - 64 MiB.
DEFAULT_SIZES = tuple(2**k for k in range(10, 27))


def _whole(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name} must be a whole number, not {value!r}")
    if value < least:
        raise UsageError(f"{name} must be at least {least}, got {value}")
    return value


def _device_text(device: Any) -> str:
    text = str(device)
    kind, _, index = text.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()) or (kind == "cpu" and index):
        raise UsageError(f"unknown device {text!r}: use cpu, cuda or cuda:N")
    return text


def _dtype_size(name: str) -> int:
    import torch

    dt = getattr(torch, str(name), None)
    if not isinstance(dt, torch.dtype):
        raise UsageError(f"unknown dtype {name!r}: use e.g. uint8, float16, bfloat16, float32")
    return torch.empty((), dtype=dt).element_size()


def _sizes(sizes: Any) -> tuple[int, ...]:
    out = tuple(sizes)
    if not out:
        raise UsageError("no sizes given")
    for n in out:
        _whole("a size", n, 1)
    return out


@dataclass(frozen=True)
class SweepSpec:
    """A sweep: every (strategy, size) cell, ``reps`` timed copies each.

    Parameters
    ----------
    strategies
        Registry names; ``None`` means every strategy available on ``device`` (filled in
        by :meth:`resolved` when the sweep starts).
    sizes
        Payload sizes in bytes (default :data:`DEFAULT_SIZES`).
    device
        ``'cuda'``, ``'cuda:N'`` or ``'cpu'`` (host copies).
    reps, warmup
        Timed repetitions and labelled warm-ups per cell.
    reps_large
        Timed repetitions for sizes >= 1 GiB (``None``: ``reps``).
    order
        One of :data:`ORDERS`.
    seed
        Seeds the plan's shuffles and the source bytes.
    empty_cache
        ``torch.cuda.empty_cache()`` before every copy (untimed).
    empty_host_cache_each_size
        Free PyTorch's cached pinned blocks before each cell (untimed).
    dtype
        Element type of the copied tensor, by name (``'uint8'``, ``'float16'``, ...).

    Examples
    --------
    >>> SweepSpec(strategies=("pageable",), sizes=(1024, 4096), device="cpu", reps=3).reps
    3
    """

    strategies: tuple[str, ...] | None = None
    sizes: tuple[int, ...] = DEFAULT_SIZES
    device: str = "cuda"
    reps: int = 10
    warmup: int = 2
    reps_large: int | None = None
    order: str = "shuffled"
    seed: int = 0
    empty_cache: bool = False
    empty_host_cache_each_size: bool = False
    dtype: str = "uint8"

    def __post_init__(self) -> None:
        from h2dlab import strategies as registry

        if self.strategies is not None:
            names = tuple(self.strategies)
            if not names:
                raise UsageError(f"no strategy given: choose from {', '.join(registry.names(None))}")
            unknown = [s for s in names if s not in registry.REGISTRY]
            if unknown:
                raise UsageError(
                    f"unknown strategy {unknown[0]!r}: choose from {', '.join(registry.names(None))}"
                )
            object.__setattr__(self, "strategies", names)
        object.__setattr__(self, "sizes", _sizes(self.sizes))
        object.__setattr__(self, "device", _device_text(self.device))
        _whole("reps", self.reps, 1)
        _whole("warmup", self.warmup, 0)
        if self.reps_large is not None:
            _whole("reps_large", self.reps_large, 1)
        if self.order not in ORDERS:
            raise UsageError(f"order must be one of {', '.join(ORDERS)}, not {self.order!r}")
        _whole("seed", self.seed, -(2**63))
        dtype = str(self.dtype).replace("torch.", "")
        item = _dtype_size(dtype)
        object.__setattr__(self, "dtype", dtype)
        bad = [n for n in self.sizes if n % item]
        if bad:
            raise UsageError(f"size {bad[0]} is not a multiple of {dtype}'s {item} bytes")
        object.__setattr__(self, "empty_cache", bool(self.empty_cache))
        object.__setattr__(self, "empty_host_cache_each_size", bool(self.empty_host_cache_each_size))

    def resolved(self, device: Any, strategy_names: list[str]) -> SweepSpec:
        """The same spec with the device resolved (``'cuda'`` -> ``'cuda:0'``) and, if
        none were named, ``strategy_names`` as the strategies."""
        names = self.strategies if self.strategies is not None else tuple(strategy_names)
        return dataclasses.replace(self, device=str(device), strategies=names)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict stored as ``env['spec']`` (key ``kind`` = ``'sweep'``)."""
        d = dataclasses.asdict(self)
        d["strategies"] = list(self.strategies) if self.strategies is not None else None
        d["sizes"] = list(self.sizes)
        return {"kind": "sweep", **d}


@dataclass(frozen=True)
class ForumSpec:
    """The forum's protocol: three timed steps per seq (see ``forum.forum``).

    Parameters
    ----------
    order
        One of :data:`FORUM_ORDERS`.
    seed
        Seeds the shuffled order and the tensors' values.
    device
        ``'cuda'`` or ``'cuda:N'``.
    seqs
        A subset of the forum's seqs (``None``: all 210), for short runs.
    """

    order: str = "ascending"
    seed: int = 0
    device: str = "cuda"
    seqs: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.order not in FORUM_ORDERS:
            raise UsageError(f"order must be one of {', '.join(FORUM_ORDERS)}, not {self.order!r}")
        _whole("seed", self.seed, -(2**63))
        object.__setattr__(self, "device", _device_text(self.device))
        if self.seqs is not None:
            seqs = tuple(self.seqs)
            if not seqs:
                raise UsageError("seqs, when given, must name at least one seq")
            for s in seqs:
                _whole("a seq", s, 1)
            object.__setattr__(self, "seqs", seqs)

    def resolved(self, device: Any) -> ForumSpec:
        """The same spec with the device resolved."""
        return dataclasses.replace(self, device=str(device))

    def to_dict(self) -> dict[str, Any]:
        """The dict stored as ``env['spec']`` (``seqs`` is ``'forum'`` for the full grid)."""
        return {
            "kind": "forum",
            "order": self.order,
            "seed": self.seed,
            "seqs": list(self.seqs) if self.seqs is not None else "forum",
            "device": self.device,
        }


@dataclass(frozen=True)
class OverlapSpec:
    """Timelines of one copy beside compute (see ``overlap.overlap``)."""

    size_bytes: int = 256 * 1024**2
    reps: int = 5
    device: str = "cuda"

    def __post_init__(self) -> None:
        _whole("size_bytes", self.size_bytes, 1)
        _whole("reps", self.reps, 1)
        object.__setattr__(self, "device", _device_text(self.device))

    def to_dict(self) -> dict[str, Any]:
        """The dict stored as ``env['spec']``; ``overlap`` adds the calibrated matmul count."""
        return {"kind": "overlap", "size_bytes": self.size_bytes, "reps": self.reps}


_KINDS = {"sweep": SweepSpec, "forum": ForumSpec, "overlap": OverlapSpec}


def spec_from_dict(d: dict[str, Any]) -> SweepSpec | ForumSpec | OverlapSpec:
    """The spec a ``to_dict()`` came from (unknown keys, e.g. recorded extras, ignored).

    Raises ``UsageError`` for a dict of no known ``kind``.
    """
    cls = _KINDS.get(d.get("kind"))
    if cls is None:
        raise UsageError(f"not a run spec of a known kind: {d.get('kind')!r}")
    fields = {f.name for f in dataclasses.fields(cls)}
    kw = {k: v for k, v in d.items() if k in fields}
    if cls is ForumSpec and kw.get("seqs") == "forum":
        kw["seqs"] = None
    return cls(**kw)


def differences(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The fields in which two spec dicts differ, one phrase each (empty if equal)."""
    keys = sorted(set(recorded) | set(now))
    return [f"{k} was {recorded.get(k)!r}, now {now.get(k)!r}" for k in keys if recorded.get(k) != now.get(k)]
