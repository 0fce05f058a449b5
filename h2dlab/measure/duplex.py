"""Both directions at once: H2D and D2H of the same size on two streams (recording kind
``bidir``).

PCIe is full duplex, so copies in both directions at once could approach twice one
direction. Each size is measured three ways, from pinned buffers, in rounds whose order
is shuffled: ``alone`` host→device, ``alone`` device→host (one row each) and ``duplex``,
both at once (two rows, one per direction, with the same ``t_s``, ``wall_ms`` and
evidence). A duplex row's ``event_ms`` runs from a common start event to the end of its
own direction's copy; the pair's aggregate is the two sizes over the later of the two
(see :func:`h2dlab.findings.transfer.duplex_summary`). ``wall_ms`` is the host clock
around both.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from h2dlab.errors import Unavailable, UsageError
from h2dlab.measure.device import check_memory, random_source, release_memory, resolve_device
from h2dlab.measure.gc_steady import steady_gc
from h2dlab.measure.recorder import Recording, StopFlag, progress_bar
from h2dlab.measure.step import Steps
from h2dlab.measure.timing import Timer, error_text, is_cuda_fault, is_oom

__all__ = [
    "DEFAULT_SIZES",
    "DuplexSpec",
    "check_whole",
    "cuda_target",
    "duplex",
    "measuring",
    "plan_duplex",
    "start_run",
]

MiB = 1024**2
#: Sizes measured when none are given.
DEFAULT_SIZES = (MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB)
MODES = (("alone", "h2d"), ("alone", "d2h"), ("duplex", "both"))


def check_whole(name: str, value: Any, least: int) -> int:
    """``value`` if it is a whole number >= ``least``; else ``UsageError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise UsageError(f"{name} must be a whole number, not {value!r}")
    if value < least:
        raise UsageError(f"{name} must be at least {least}, got {value}")
    return int(value)


@dataclass(frozen=True)
class DuplexSpec:
    """Copies in both directions at once, beside each direction alone.

    Parameters
    ----------
    sizes
        Bytes per direction (default :data:`DEFAULT_SIZES`).
    reps, warmup
        Timed rounds and labelled warm-up rounds per size.
    device
        ``'cuda'`` or ``'cuda:N'``.
    seed
        Seeds the rounds' order and the bytes.
    """

    sizes: tuple[int, ...] = DEFAULT_SIZES
    reps: int = 10
    warmup: int = 2
    device: str = "cuda"
    seed: int = 0

    def __post_init__(self) -> None:
        sizes = tuple(self.sizes)
        if not sizes:
            raise UsageError("no sizes given")
        object.__setattr__(self, "sizes", tuple(check_whole("a size", n, 1) for n in sizes))
        check_whole("reps", self.reps, 1)
        check_whole("warmup", self.warmup, 0)
        check_whole("seed", self.seed, -(2**63))
        object.__setattr__(self, "device", str(self.device))

    def to_dict(self) -> dict[str, Any]:
        """The dict stored as ``env['spec']`` (``kind`` = ``'bidir'``)."""
        return {"kind": "bidir", "sizes": list(self.sizes), "reps": self.reps, "warmup": self.warmup,
                "device": self.device, "seed": self.seed}  # fmt: skip


def plan_duplex(spec: DuplexSpec) -> list[dict[str, Any]]:
    """The planned rows in execution order: per size (ascending), warm-up rounds then timed
    rounds, each round the three modes in a seeded random order; a duplex copy plans two
    rows (``direction`` h2d and d2h) with the same ``copy`` number."""
    rng = random.Random(spec.seed)
    rows: list[dict[str, Any]] = []
    copy = 0
    for n in sorted(spec.sizes):
        for warm, count in ((True, spec.warmup), (False, spec.reps)):
            for rep in range(count):
                modes = list(MODES)
                rng.shuffle(modes)
                for strategy, way in modes:
                    for d in ("h2d", "d2h") if way == "both" else (way,):
                        rows.append(dict(strategy=strategy, direction=d, size_bytes=n, rep=rep,
                                         warmup=warm, copy=copy))  # fmt: skip
                    copy += 1
    for i, r in enumerate(rows):
        r["order"] = i
    return rows


def cuda_target(device: str) -> torch.device:
    """The CUDA device a both-ways run copies to; ``UsageError`` for the CPU, ``Unavailable``
    naming the recorded both-ways data on a machine without CUDA."""
    if str(device).partition(":")[0] == "cuda" and not torch.cuda.is_available():
        raise Unavailable(
            "a both-ways run copies to and from CUDA, which this machine lacks: "
            "replay the recorded runs instead (the dataset h200_bidir)"
        )
    dev = resolve_device(device)
    if dev.type != "cuda":
        raise UsageError(f"this run needs a CUDA device, not {device!r}: its copies cross PCIe")
    return dev


class _Pair:
    """One size's buffers: pinned source and device target (h2d), device source and pinned
    target (d2h), two streams and the events that time each direction."""

    def __init__(self, n: int, src: torch.Tensor, back: torch.Tensor, dev: torch.device) -> None:
        pin = dev.type == "cuda"
        self.h_src = torch.empty(n, dtype=torch.uint8, pin_memory=pin).copy_(src[:n])
        self.d_dst = torch.empty(n, dtype=torch.uint8, device=dev)
        self.d_src = back[:n].to(dev, copy=True)
        self.h_dst = torch.empty(n, dtype=torch.uint8, pin_memory=pin)
        self.streams = {d: torch.cuda.Stream(dev) for d in ("h2d", "d2h")}
        self.e0 = torch.cuda.Event(enable_timing=True)
        self.ends = {d: torch.cuda.Event(enable_timing=True) for d in ("h2d", "d2h")}
        self.dev = dev

    def one(self, direction: str) -> None:
        if direction == "h2d":
            self.d_dst.copy_(self.h_src, non_blocking=True)
        else:
            self.h_dst.copy_(self.d_src, non_blocking=True)

    def both(self) -> None:
        cur = torch.cuda.current_stream(self.dev)
        self.e0.record(cur)
        for d, s in self.streams.items():
            s.wait_event(self.e0)
            with torch.cuda.stream(s):
                self.one(d)
                self.ends[d].record(s)
        for e in self.ends.values():
            cur.wait_event(e)  # the Timer's end event and synchronisation cover both

    def right(self, direction: str, src: torch.Tensor, back: torch.Tensor) -> bool:
        n = self.h_src.numel()
        if direction == "h2d":
            return torch.equal(self.d_dst.cpu(), src[:n])
        return torch.equal(self.h_dst, back[:n])


def start_run(
    dev: torch.device,
    largest: int,
    out: str | Path | None,
    spec: dict[str, Any],
    planned: list[dict[str, Any]],
    resume: bool,
    argv: list[str] | None,
    force: bool,
    stop: StopFlag | None,
    clock: Callable[[], float],
) -> tuple[Recording, StopFlag, Timer]:
    """The start every duplex and batch run shares: memory check, recording, stop flag,
    timer and (on CUDA) the device's context.

    Parameters
    ----------
    dev
        The resolved device.
    largest
        The largest copy in bytes (checked against free memory).
    out, spec, planned, resume, argv, force
        As ``recorder.Recording`` takes them (``spec`` is the spec's dict).
    stop
        The caller's stop flag, or None for a new one.
    clock
        Host clock for the ``Timer``.

    Returns
    -------
    tuple
        ``(run, stop, timer)``: the ``Recording``, the stop flag and the ``Timer``.
    """
    check_memory(largest, dev, copies_host=4)
    run = Recording(out, spec, planned, resume, argv, force)
    stop = stop if stop is not None else StopFlag()
    timer = Timer(dev, clock)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        torch.zeros(1, device=dev)
    return run, stop, timer


@contextmanager
def measuring(stop: StopFlag, bar: Any, run: Recording | None = None) -> Iterator[None]:
    """The measuring loop's frame: ``stop`` installed for signals, ``bar`` (or None) closed
    at the end however the loop ends. Given the resumable ``run``, a ``KeyboardInterrupt``
    that ends the loop at once (a second Ctrl-C) says where its rows are and how to resume."""
    try:
        with stop.installed(), steady_gc():
            yield
    except KeyboardInterrupt as exc:
        if run is None:
            raise
        raise run.interrupted(exc) from None
    finally:
        if bar is not None:
            bar.close()


def duplex(
    spec: DuplexSpec,
    *,
    out: str | Path | None = None,
    progress: bool = True,
    argv: list[str] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    stop: StopFlag | None = None,
    device: torch.device | None = None,
    force: bool = False,
) -> pd.DataFrame:
    """Time each planned copy of ``spec``; return the table (one row per direction).

    Parameters
    ----------
    spec
        Sizes, rounds, device, seed.
    out
        Where to write the table and its env.json (rows flushed as measured).
    progress
        Show a progress bar on stderr.
    argv
        The command line recorded in env.json.
    clock
        Host clock (tests pass a fake one).
    stop
        ``stop.request()`` ends the run after the copy in flight.
    device
        The resolved device (tests only; default: ``spec.device``, which must be CUDA).
    force
        Replace ``out`` (or an unfinished run's rows) with a new run.

    Returns
    -------
    pandas.DataFrame
        Schema-2 rows; ``attrs['env']``, ``attrs['stopped']``.
    """
    dev = device if device is not None else cuda_target(spec.device)
    planned = plan_duplex(spec)
    run, stop, timer = start_run(
        dev, max(spec.sizes), out, spec.to_dict(), planned, False, argv, force, stop, clock
    )
    top = max(spec.sizes)
    src, back = random_source(top, spec.seed), random_source(top, spec.seed + 1)
    bar = progress_bar(len(planned), 0, f"both ways {dev}", progress)
    steps = Steps(run, timer, dev, bar)
    by_copy: dict[int, list[dict[str, Any]]] = {}
    for r in planned:
        by_copy.setdefault(r["copy"], []).append(r)
    pair, failed, checked = None, "", set()
    with measuring(stop, bar):
        for rows in by_copy.values():
            if stop:
                break
            n = rows[0]["size_bytes"]
            if pair is None or pair.h_src.numel() != n:
                pair, failed = None, ""
                release_memory(dev)
                try:
                    pair = _Pair(n, src, back, dev)
                except Exception as exc:  # noqa: BLE001 - OOM: a row, then the next size
                    if is_cuda_fault(exc) or not (is_oom(exc) or isinstance(exc, RuntimeError)):
                        raise
                    failed = error_text(exc)
            _copy(rows, pair, failed, steps, (src, back), checked)
    return run.finish(stop, gpu=dev.type == "cuda")


def _copy(rows, pair, failed, steps: Steps, sources, checked) -> None:
    mode, direction = rows[0]["strategy"], rows[0]["direction"]

    def check(_, out) -> None:
        for row in out:
            if mode == "duplex":  # each direction's own end, from the common start
                row["event_ms"] = pair.e0.elapsed_time(pair.ends[row["direction"]])
            key = (mode, row["direction"], row["size_bytes"])
            if key not in checked:
                checked.add(key)
                if not pair.right(row["direction"], *sources):
                    row["error"] = "wrong result: the copy differs from the source"

    step = None if failed else pair.both if mode == "duplex" else (lambda: pair.one(direction))
    steps(rows, step, columns={"shape": str((rows[0]["size_bytes"],))}, error=failed, check=check)
