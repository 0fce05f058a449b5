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
    "FLOOR_GBPS",
    "MAX_PAUSE_MS",
    "MAX_PLAN_ROWS",
    "SEED_RANGE",
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

#: The most copies one plan may hold: a plan is built in memory before anything runs.
MAX_PLAN_ROWS = 10_000_000
#: The bandwidth (GB/s = 1e9 bytes/s) a plan's duration is estimated at: slow on purpose.
FLOOR_GBPS = 1.0
#: The longest pause before each timed copy, in milliseconds (``SweepSpec.pause_ms``).
MAX_PAUSE_MS = 1000
#: Seeds are what torch.Generator takes: a signed or unsigned 64-bit integer.
SEED_RANGE = (-(2**63), 2**64 - 1)


def _whole(name: str, value: Any, least: int, most: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name} must be a whole number, not {value!r}")
    if value < least:
        raise UsageError(f"{name} must be at least {least}, got {value}")
    if most is not None and value > most:
        raise UsageError(f"{name} must be at most {most}, got {value}")
    return value


def _seed(value: Any) -> int:
    lo, hi = SEED_RANGE
    if isinstance(value, int) and not isinstance(value, bool) and not lo <= value <= hi:
        raise UsageError(f"seed {value} does not fit in 64 bits: use a number from {lo} to {hi}")
    return _whole("seed", value, lo)


def _device_text(device: Any) -> str:
    text = str(device)
    kind, _, index = text.partition(":")
    if (
        kind not in ("cpu", "cuda")
        or (index and not (index.isascii() and index.isdigit()))
        or (kind == "cpu" and index)
    ):
        raise UsageError(f"unknown device {text!r}: use cpu, cuda or cuda:N")
    return text


def _dtype_size(name: str) -> int:
    import torch

    dt = getattr(torch, str(name), None)
    if not isinstance(dt, torch.dtype):
        raise UsageError(f"unknown dtype {name!r}: use e.g. uint8, float16, bfloat16, float32")
    if dt == torch.bool:
        # The source is random bytes; most are not valid booleans and a copy normalises
        # them, so every byte check would fail. A bool moves like a uint8.
        raise UsageError(
            "dtype bool is not measured (random bytes are not valid booleans): use uint8, the same 1 byte each"
        )
    try:  # quantized and sub-byte types have no plain copy
        torch.zeros(8 * max(dt.itemsize, 1), dtype=torch.uint8).view(dt).clone()
    except Exception:  # noqa: BLE001 - any failure means this type cannot be measured
        raise UsageError(
            f"dtype {name!r} has no plain copy in torch: use e.g. uint8, float16, float32"
        ) from None
    return dt.itemsize


def _pause_ms(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"pause_ms must be a number of milliseconds, not {value!r}")
    if not 0 <= value <= MAX_PAUSE_MS:  # NaN fails this too
        raise UsageError(f"pause_ms must be from 0 to {MAX_PAUSE_MS} milliseconds, got {value}")
    return float(value) + 0.0  # -0 is recorded as 0


def _sizes(sizes: Any) -> tuple[int, ...]:
    out = tuple(sizes)
    if not out:
        raise UsageError("no sizes given")
    for n in out:
        _whole("a size", n, 1)
    twice = sorted({n for n in out if out.count(n) > 1})
    if twice:
        raise UsageError(f"size {twice[0]} is given twice: each size is one cell of the plan")
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
    pause_ms
        ``None``: no pause. Else milliseconds (0 to :data:`MAX_PAUSE_MS`) the GPU idles
        before each timed copy, after a tiny GPU operation (``timing.Timer``'s ``pause_s``).
    evidence
        ``"light"`` (default) or ``"full"``: what is read around each copy (``timing.EVIDENCE``).

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
    pause_ms: float | None = None
    evidence: str = "light"

    def __post_init__(self) -> None:
        from h2dlab.measure import strategies as registry

        if self.strategies is not None:
            names = tuple(self.strategies)
            if not names:
                raise UsageError(f"no strategy given: choose from {', '.join(registry.names(None))}")
            unknown = [s for s in names if s not in registry.REGISTRY]
            if unknown:
                raise UsageError(
                    f"unknown strategy {unknown[0]!r}: choose from {', '.join(registry.names(None))}"
                )
            twice = [s for i, s in enumerate(names) if s in names[:i]]
            if twice:
                raise UsageError(
                    f"strategy {twice[0]!r} is named twice: each strategy is measured once per size"
                )
            object.__setattr__(self, "strategies", names)
        object.__setattr__(self, "sizes", _sizes(self.sizes))
        object.__setattr__(self, "device", _device_text(self.device))
        _whole("reps", self.reps, 1)
        _whole("warmup", self.warmup, 0)
        if self.reps_large is not None:
            _whole("reps_large", self.reps_large, 1)
        for name, allowed in (("order", ORDERS), ("evidence", ("light", "full"))):
            if getattr(self, name) not in allowed:
                raise UsageError(f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")
        _seed(self.seed)
        dtype = str(self.dtype).replace("torch.", "")
        item = _dtype_size(dtype)
        object.__setattr__(self, "dtype", dtype)
        bad = [n for n in self.sizes if n % item]
        if bad:
            raise UsageError(f"size {bad[0]} is not a multiple of {dtype}'s {item} bytes")
        object.__setattr__(self, "empty_cache", bool(self.empty_cache))
        object.__setattr__(self, "empty_host_cache_each_size", bool(self.empty_host_cache_each_size))
        if self.pause_ms is not None:
            object.__setattr__(self, "pause_ms", _pause_ms(self.pause_ms))
        rows = self.planned_rows()
        if rows > MAX_PLAN_ROWS:
            raise UsageError(
                f"this plan would time {rows:,} copies (about {self.estimated_hours():,.0f} hours at "
                f"{FLOOR_GBPS:g} GB/s); at most {MAX_PLAN_ROWS:,} fit in one run: lower reps or sizes"
            )

    def _per_size(self) -> list[tuple[int, int]]:
        large = 1024**3
        return [
            (n, self.warmup + (self.reps if self.reps_large is None or n < large else self.reps_large))
            for n in self.sizes
        ]

    def planned_rows(self, n_strategies: int | None = None) -> int:
        """Copies the plan holds (warm-ups included); ``n_strategies`` defaults to the
        named ones, or to every registered strategy when none are named (an upper bound)."""
        from h2dlab.measure import strategies as registry

        k = n_strategies or (len(self.strategies) if self.strategies is not None else len(registry.names()))
        return k * sum(copies for _, copies in self._per_size())

    def estimated_hours(self, n_strategies: int | None = None) -> float:
        """A rough duration: every copy at :data:`FLOOR_GBPS` GB/s plus 10 us (and the
        pause, if any), no set-up."""
        from h2dlab.measure import strategies as registry

        k = n_strategies or (len(self.strategies) if self.strategies is not None else len(registry.names()))
        each = 10e-6 + (self.pause_ms or 0) / 1e3
        seconds = sum(copies * (n / (FLOOR_GBPS * 1e9) + each) for n, copies in self._per_size())
        return k * seconds / 3600

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
        for key, absent in (("pause_ms", None), ("evidence", "full")):  # so that specs recorded before
            if d[key] == absent:  # them stay equal (runs before schema 6 read full evidence)
                del d[key]
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
        _seed(self.seed)
        object.__setattr__(self, "device", _device_text(self.device))
        if self.seqs is not None:
            seqs = tuple(self.seqs)
            if not seqs:
                raise UsageError("seqs, when given, must name at least one seq")
            for s in seqs:
                _whole("a seq", s, 1)
            if len(set(seqs)) != len(seqs):
                raise UsageError("seqs name a seq twice: each seq is measured once")
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
        _whole("reps", self.reps, 1, most=100_000)
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
    kw = {**kw, "seqs": None} if cls is ForumSpec and kw.get("seqs") == "forum" else kw
    kw = {"evidence": "full", **kw} if cls is SweepSpec else kw  # without it: before schema 6, full
    return cls(**kw)


def differences(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The fields in which two spec dicts differ, one phrase each (empty if equal)."""
    keys = sorted(set(recorded) | set(now))
    return [f"{k} was {recorded.get(k)!r}, now {now.get(k)!r}" for k in keys if recorded.get(k) != now.get(k)]
