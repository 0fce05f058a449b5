"""Many tensors at once: a batch of N host tensors moved to the GPU by each method of
:mod:`h2dlab.measure.batch_methods` (recording kind ``batch``; one run per layout).

One row per batch copy: ``strategy`` is the method, ``size_bytes`` the batch's total,
``n_tensors`` its count, ``shape`` says the layout. Per batch shape (total, count) the
batch is made once; each method is prepared once, then warm-ups, then timed rounds in
which the methods take turns in a seeded random order, so a slow spell is spread over
the methods instead of filling one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from h2dlab.errors import UsageError
from h2dlab.measure import batch_methods
from h2dlab.measure.batch_methods import LAYOUTS, METHODS, batch_sizes, make_batch
from h2dlab.measure.device import random_source, release_memory, resolve_device
from h2dlab.measure.duplex import check_whole, measuring, start_run
from h2dlab.measure.recorder import StopFlag, progress_bar
from h2dlab.measure.step import Steps
from h2dlab.measure.timing import CudaFault, error_text, is_cuda_fault

__all__ = ["DEFAULT_COUNTS", "DEFAULT_TOTALS", "BatchSpec", "batch", "plan_batch"]

MiB = 1024**2
DEFAULT_COUNTS = (1, 16, 64, 256, 1024)
DEFAULT_TOTALS = (MiB, 16 * MiB, 256 * MiB, 1024 * MiB)


@dataclass(frozen=True)
class BatchSpec:
    """Batches of ``counts`` x ``totals``, one layout, every method.

    Parameters
    ----------
    counts
        Tensors per batch.
    totals
        Bytes per batch (all its tensors together).
    layout
        ``'equal'`` or ``'mixed'`` sizes (see :func:`h2dlab.measure.batch_methods.batch_sizes`).
    methods
        Method names (``None``: every one in :data:`h2dlab.measure.batch_methods.METHODS`; those
        that cannot run here are rows with the reason).
    reps, warmup
        Timed rounds and warm-ups per batch shape; ``reps_large`` rounds from ``large_bytes``.
    device
        ``'cuda'``, ``'cuda:N'`` or ``'cpu'`` (host copies only).
    seed
        Seeds the sizes, the bytes and the rounds' order.
    """

    counts: tuple[int, ...] = DEFAULT_COUNTS
    totals: tuple[int, ...] = DEFAULT_TOTALS
    layout: str = "equal"
    methods: tuple[str, ...] | None = None
    reps: int = 10
    warmup: int = 1
    reps_large: int = 5
    large_bytes: int = 256 * MiB
    device: str = "cuda"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("counts", "totals"):
            vals = tuple(check_whole(f"a batch {name[:-1]}", v, 1) for v in getattr(self, name))
            if not vals:
                raise UsageError(f"no batch {name} given")
            object.__setattr__(self, name, tuple(sorted(set(vals))))
        if self.layout not in LAYOUTS:
            raise UsageError(f"layout must be one of {', '.join(LAYOUTS)}, not {self.layout!r}")
        methods = tuple(METHODS) if self.methods is None else tuple(self.methods)
        if not methods:
            raise UsageError(f"no batch method given: choose from {', '.join(METHODS)}")
        bad = [m for m in methods if m not in METHODS]
        if bad:
            raise UsageError(f"unknown batch method {bad[0]!r}: choose from {', '.join(METHODS)}")
        twice = [m for i, m in enumerate(methods) if m in methods[:i]]
        if twice:  # the table's key would repeat: refused now, not after the whole run
            raise UsageError(f"batch method {twice[0]!r} is named twice: each method is timed once per batch")
        object.__setattr__(self, "methods", methods)
        for name, least in (("reps", 1), ("warmup", 0), ("reps_large", 1), ("large_bytes", 1)):
            check_whole(name, getattr(self, name), least)
        check_whole("seed", self.seed, -(2**63))
        for n in self.counts:
            for total in self.totals:
                try:
                    batch_sizes(n, total, self.layout)
                except ValueError as exc:
                    raise UsageError(f"{exc}: choose larger totals or fewer tensors") from None
        object.__setattr__(self, "device", str(self.device))

    def to_dict(self) -> dict[str, Any]:
        """The dict stored as ``env['spec']`` (``kind`` = ``'batch'``)."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d.update(counts=list(self.counts), totals=list(self.totals), methods=list(self.methods))
        return {"kind": "batch", **d}


def plan_batch(spec: BatchSpec) -> list[dict[str, Any]]:
    """The planned rows in execution order (see the module docstring)."""
    rng = random.Random(spec.seed)
    rows: list[dict[str, Any]] = []
    for total in spec.totals:
        reps = spec.reps_large if total >= spec.large_bytes else spec.reps
        for n in spec.counts:
            for warm, count in ((True, spec.warmup), (False, reps)):
                for rep in range(count):
                    methods = list(spec.methods)
                    rng.shuffle(methods)
                    rows += [dict(strategy=m, direction="h2d", size_bytes=total, n_tensors=n, rep=rep,
                                  warmup=warm) for m in methods]  # fmt: skip
    for i, r in enumerate(rows):
        r["order"] = i
    return rows


def batch(
    spec: BatchSpec,
    *,
    out: str | Path | None = None,
    progress: bool = True,
    argv: list[str] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    stop: StopFlag | None = None,
    resume: bool = False,
    force: bool = False,
) -> pd.DataFrame:
    """Time each planned batch copy of ``spec``; return the table (one row per batch copy).

    Parameters
    ----------
    spec
        Counts, totals, layout, methods, rounds, device, seed.
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
    resume
        Continue the interrupted run in ``out`` (same spec), from its first missing row.
    force
        Replace ``out`` (or an unfinished run's rows) with a new run.

    Returns
    -------
    pandas.DataFrame
        Schema-2 rows; ``attrs['env']``, ``attrs['stopped']``.
    """
    dev = resolve_device(spec.device)
    planned = plan_batch(spec)
    run, stop, timer = start_run(
        dev, max(spec.totals), out, spec.to_dict(), planned, resume, argv, force, stop, clock
    )
    source = random_source(max(spec.totals), spec.seed)
    bar = progress_bar(len(planned), run.start_at, f"batches {dev}", progress)
    steps = Steps(run, timer, dev, bar)
    shapes: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in planned[run.start_at :]:  # planned rows are contiguous per shape
        shapes.setdefault((r["size_bytes"], r["n_tensors"]), []).append(r)
    with measuring(stop, bar, run):
        for (total, n), rows in shapes.items():
            if stop:
                break
            tensors = make_batch(batch_sizes(n, total, spec.layout, spec.seed), source)
            _shape(rows, tensors, spec, dev, steps, stop)
            del tensors
            release_memory(dev)
    return run.finish(stop, gpu=dev.type == "cuda")


def _prepare(names, tensors, dev) -> tuple[dict[str, Any], dict[str, str]]:
    methods, reasons = {}, {}
    for name in names:
        reasons[name] = batch_methods.available(name, dev)
        if reasons[name]:
            continue
        try:
            m = batch_methods.get(name)
            m.prepare(tensors, dev)
            methods[name] = m
        except Exception as exc:  # noqa: BLE001 - recorded as the method's rows, then on
            if is_cuda_fault(exc):
                raise CudaFault(error_text(exc)) from exc
            reasons[name] = error_text(exc)
            release_memory(dev)
    return methods, reasons


def _shape(rows, tensors, spec: BatchSpec, dev, steps: Steps, stop) -> None:
    methods, reasons = _prepare(spec.methods, tensors, dev)
    checked: set[str] = set()
    shape = f"{len(tensors)} tensors, {spec.layout} sizes"

    def check(ys, out) -> None:
        name = out[0]["strategy"]
        if name not in checked:  # bytewise check of each method's first copy
            checked.add(name)
            if len(ys) != len(tensors) or not all(
                torch.equal(y.cpu().reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8))
                for y, t in zip(ys, tensors, strict=False)
            ):
                out[0]["error"] = "wrong result: a copied tensor differs from its source"

    try:
        for plan_row in rows:
            if stop:
                break
            name = plan_row["strategy"]
            method = methods.get(name)
            step = None if method is None else (lambda m=method: m.copy(tensors))
            failure = steps([plan_row], step, columns={"shape": shape}, error=reasons[name], check=check)
            if failure:
                reasons[name] = failure
    finally:
        for m in methods.values():
            m.cleanup()
