"""The forum's experiment, re-implemented: ``forum(spec)``, one row per timed step."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from h2dlab.errors import Unavailable, UsageError
from h2dlab.measure.device import check_memory, release_memory, resolve_device, tile
from h2dlab.measure.gc_steady import steady_gc
from h2dlab.measure.plan import plan_forum
from h2dlab.measure.recorder import Recording, StopFlag, progress_bar
from h2dlab.measure.spec import ForumSpec
from h2dlab.measure.timing import CudaFault, Timer, error_text, is_cuda_fault, is_oom
from h2dlab.units import forum_shape

__all__ = ["forum", "fresh_half"]


def forum(
    spec: ForumSpec | None = None,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    force: bool = False,
    progress: bool = True,
    argv: list[str] | None = None,
    stop: StopFlag | None = None,
) -> pd.DataFrame:
    """The forum's experiment, re-implemented, as tidy rows.

    For each seq: a fresh random float16 tensor of shape (24, 2, 1, seq, 4096) is
    pinned (``pin_memory``), the pinned tensor copied to the GPU (``pinned_to_cuda``),
    both freed and ``empty_cache()`` called; then a fresh tensor is copied straight to
    the GPU (``direct_to_cuda``) and ``empty_cache()`` called again. Each step is timed
    once, as the forum did, but with CUDA events beside the host clock and the
    allocators' counters. Nothing touches CUDA before the first timed step, so the
    first row carries the context start-up, as the forum's did. Run it in a fresh
    process for that reason.

    Parameters
    ----------
    spec
        Order, seed, device and seqs (default: ``ForumSpec()``, the forum's own run).
    out, resume, force, progress, argv, stop
        As for ``measure.sweep``.

    Returns
    -------
    pandas.DataFrame
        Three rows per seq; attrs as ``measure.sweep``'s.
    """
    spec = spec if spec is not None else ForumSpec()
    # ForumSpec checked the form; torch.device() would raise a RuntimeError of its own on
    # what it cannot read ('cuda:٣'): resolve_device below says that in one line
    if str(spec.device).partition(":")[0] != "cuda":
        raise UsageError(
            f"the forum protocol pins memory and copies to CUDA: give a cuda device, not {spec.device}"
        )
    if not torch.cuda.is_available():
        raise Unavailable(
            "the forum protocol pins memory and needs CUDA, which this machine lacks: "
            "replay the recorded runs instead (the dataset h200_forum)"
        )
    dev = resolve_device(spec.device)
    spec = spec.resolved(dev)
    planned = plan_forum(spec.order, spec.seed, list(spec.seqs) if spec.seqs is not None else None)
    # No GPU query here: that would start CUDA before the first timed step.
    check_memory(max(r["size_bytes"] for r in planned), dev, copies_host=3, gpu=False)
    run = Recording(out, spec.to_dict(), planned, resume, argv, force=force)
    stop = stop if stop is not None else StopFlag()
    timer = Timer(dev)
    torch.manual_seed(spec.seed)
    bar = progress_bar(len(planned), run.start_at, "forum", progress)
    todo = planned[run.start_at :]
    fault: CudaFault | None = None
    try:
        with stop.installed(), steady_gc():
            i = 0
            while i < len(todo) and not stop:
                group = [r for r in todo[i : i + 3] if r["seq"] == todo[i]["seq"]]
                i += len(group)
                _forum_size(group, dev, timer, run, bar)
    except CudaFault as exc:
        fault = exc
    except KeyboardInterrupt as exc:  # a second Ctrl-C: the rows are written; say where, and how to resume
        raise run.interrupted(exc) from None
    finally:
        if bar is not None:
            bar.close()
    df = run.finish(stop, gpu=fault is None)
    if fault is not None:
        raise CudaFault(
            f"{fault}; the run stopped after it, {len(df)} of {len(planned)} rows kept: "
            "measure again in a new process (the CUDA context is unusable)"
        ) from fault
    return df


def fresh_half(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """A new float16 tensor of random values in [0, 1), as the forum's ``torch.rand(...).half()``.

    A random block is tiled rather than drawn element by element: the forum's
    sequential RNG would make each run minutes long, and a copy's speed does not
    depend on the values. What matters, a fresh allocation whose pages are all
    touched before the copy, is the same.
    """
    n = int(np.prod(shape))
    g = torch.Generator().manual_seed(seed)
    return tile(torch.rand(min(n, 2**22), generator=g).half(), n).view(shape)


def _forum_size(group, dev, timer, run, bar) -> None:
    seq = group[0]["seq"]
    shape = forum_shape(seq)
    want = {r["strategy"]: r for r in group}

    def emit(strategy: str, rec: dict[str, float], err: str = "", t_s: float = np.nan) -> None:
        if strategy not in want:
            return
        p = want[strategy]
        row = {
            "order": p["order"],
            "strategy": strategy,
            "size_bytes": p["size_bytes"],
            "shape": str(shape),
            "dtype": "float16",
            "rep": 0,
            "warmup": False,
            "t_s": t_s,
            "wall_ms": np.nan,
            "event_ms": np.nan,
            "host_allocs": np.nan,
            "device_allocs": np.nan,
            "empty_cache": strategy == "direct_to_cuda" or (strategy == "pin_memory" and p["order"] > 0),
            "error": err,
        }
        row.update(rec)
        run.write(row)
        if bar is not None:
            bar.update(1)

    target = dev
    try:
        if "pin_memory" in want or "pinned_to_cuda" in want:
            x = fresh_half(shape, seq)
            t = run.elapsed()
            xp, rec = timer(x.pin_memory)
            emit("pin_memory", rec, t_s=t)
            t = run.elapsed()
            xc, rec = timer(partial(xp.to, target))
            emit("pinned_to_cuda", rec, t_s=t)
            del x, xp, xc
            torch.cuda.empty_cache()
        y = fresh_half(shape, seq + 1)
        t = run.elapsed()
        yc, rec = timer(partial(y.to, target))
        emit("direct_to_cuda", rec, t_s=t)
        del y, yc
        torch.cuda.empty_cache()
    except Exception as exc:  # noqa: BLE001
        if not is_oom(exc):
            if is_cuda_fault(exc):
                raise CudaFault(error_text(exc)) from exc
            raise
        done = {r["strategy"] for r in run.rows if r.get("order") in {p["order"] for p in group}}
        for s in want:
            if s not in done:
                emit(s, {}, error_text(exc))
        release_memory(dev)
