"""The measuring harness: ``sweep(spec)``, one row per timed copy.

Every copy is timed on its own, with CUDA events and a synchronised host clock, so one
slow copy cannot hide in an average. Rows go to disk as they are measured (see
``recorder``). A copy that runs out of memory is recorded as a row with its error and
the sweep goes on; a CUDA fault (the context is then unusable) stops the sweep, keeps
every row and raises :class:`~h2dlab.measure.timing.CudaFault`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from h2dlab.measure import strategies
from h2dlab.measure.device import (
    check_memory,
    empty_host_cache,
    random_source,
    release_memory,
    resolve_device,
)
from h2dlab.measure.gc_steady import steady_gc
from h2dlab.measure.plan import cells, plan_spec
from h2dlab.measure.recorder import Recording, StopFlag, progress_bar
from h2dlab.measure.spec import SweepSpec
from h2dlab.measure.timing import (
    CudaFault,
    Timer,
    device_segment_count,
    error_text,
    host_alloc_count,
    is_cuda_fault,
    is_oom,
)

__all__ = ["resolve_spec", "sweep"]


def resolve_spec(spec: SweepSpec) -> tuple[SweepSpec, torch.device]:
    """The spec with its device resolved and, if none were named, every host-to-device
    strategy available there (name ``d2h_`` strategies to measure the way back); and the
    ``torch.device``. Raises ``UsageError`` for a device this machine lacks."""
    dev = resolve_device(spec.device)
    return spec.resolved(dev, [s for s in strategies.names() if not strategies.available(s, dev)]), dev


def sweep(
    spec: SweepSpec,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    force: bool = False,
    progress: bool = True,
    argv: list[str] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    stop: StopFlag | None = None,
    on_row: Callable[[int], None] | None = None,
    before_cell: Callable[[StopFlag], None] | None = None,
) -> pd.DataFrame:
    """Time each planned copy of ``spec`` once and return the measurement table.

    Parameters
    ----------
    spec
        What to measure (strategies, sizes, device, reps, order, ...).
    out
        Where to write the table (.csv, .csv.gz, .parquet, .xlsx) and its env.json.
        Rows are flushed to ``<out>.partial.csv`` as they are measured.
    resume
        Continue the run already in ``out`` (same spec, same run_id).
    force
        Replace an existing ``out`` (or the partial file an unfinished run left);
        without it they are kept and ``UsageError`` says so.
    progress
        Show a progress bar on stderr.
    argv
        The command line to record in env.json.
    clock
        Host clock (tests pass a seeded fake one).
    stop
        A stop flag (``stop.request()`` ends the sweep after the copy in flight).
    on_row
        Called with the number of rows measured so far after every cell.
    before_cell
        Called with the stop flag before each (strategy, size) cell: concurrent runs
        pass a collective here, so that every process starts each cell together and
        all stop together.

    Returns
    -------
    pandas.DataFrame
        One row per planned copy (DESIGN.md's table); ``df.attrs['env']`` the
        fingerprint, ``df.attrs['stopped']`` True if a stop was asked for.
    """
    spec, dev = resolve_spec(spec)
    planned = plan_spec(spec)
    check_memory(max(spec.sizes), dev)
    run = Recording(out, spec.to_dict(), planned, resume, argv, force=force)
    stop = stop if stop is not None else StopFlag()
    pause_s = None if spec.pause_ms is None else spec.pause_ms / 1e3
    timer = Timer(dev, clock, pause_s=pause_s, evidence=spec.evidence)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        torch.zeros(1, device=dev)  # start the context outside any timed copy
    src = random_source(max(spec.sizes), spec.seed)
    bar = progress_bar(len(planned), run.start_at, f"measure {dev}", progress)
    checked: set[tuple[str, int]] = set()  # cells whose first copy was compared bytewise
    fault: CudaFault | None = None
    try:
        with stop.installed(), steady_gc():
            for cell_rows in cells(planned[run.start_at :]):
                if before_cell is not None:
                    before_cell(stop)
                if stop:
                    break
                _measure_cell(cell_rows, src, dev, spec, timer, run, stop, bar, checked)
                if on_row is not None:
                    on_row(len(run.rows))
    except CudaFault as exc:
        fault = exc
    finally:
        if bar is not None:
            bar.close()
    df = run.finish(stop, gpu=dev.type == "cuda" and fault is None)
    if fault is not None:
        where = f" in {out}" if out is not None else ""
        raise CudaFault(
            f"{fault}; the sweep stopped after it, {len(df)} of {len(planned)} rows kept{where}: "
            "measure again in a new process (the CUDA context is unusable)"
        ) from fault
    return df


#: A cell's copies that take less than this (host wall time) are written after the cell's
#: last copy rather than one by one (see ``_measure_cell``).
DEFER_BELOW_MS = 1.0


def _allocator_counts(dev: torch.device) -> tuple[float, float]:
    """``(pinned blocks made, device segments made)`` so far (NaN off CUDA or before it starts)."""
    if dev.type != "cuda" or not torch.cuda.is_initialized():
        return (np.nan, np.nan)
    return (host_alloc_count(), device_segment_count(dev))


def _fill_block_counts(
    block: list[dict[str, Any]], before: tuple[float, float], after: tuple[float, float]
) -> None:
    """Rows timed without per-copy allocator counters: 0 where the block as a whole made no
    pinned block (no device segment), NaN where it made some (which copy did is unknown)."""
    for col, b, a in (("host_allocs", before[0], after[0]), ("device_allocs", before[1], after[1])):
        value = 0.0 if a - b == 0 else np.nan
        for row in block:
            row[col] = value


def _measure_cell(cell_rows, src, dev, spec: SweepSpec, timer, run, stop, bar, checked) -> None:
    name, size = cell_rows[0]["strategy"], cell_rows[0]["size_bytes"]
    dtype = getattr(torch, spec.dtype)
    x = src[:size].view(dtype)
    base = {
        "strategy": name,
        "direction": strategies.direction_of(name),  # d2h strategies bring x back from the GPU
        "n_tensors": 1,
        "size_bytes": size,
        "shape": str(tuple(x.shape)),
        "dtype": spec.dtype,
        "empty_cache": spec.empty_cache,
    }
    reason = strategies.available(name, dev)
    strat = None
    if not reason:
        try:
            if spec.empty_host_cache_each_size and dev.type == "cuda":
                torch.cuda.synchronize(dev)
                empty_host_cache()
            strat = strategies.get(name)
            strat.prepare(x, dev)
        except Exception as exc:  # noqa: BLE001 - recorded, then the sweep goes on
            if is_cuda_fault(exc):
                raise CudaFault(error_text(exc)) from exc
            reason = error_text(exc)
            strat = None
            release_memory(dev)
    # Host work between two timed copies is kept to the timer's own reads: the cell's rows
    # are written after its last copy (or when it stops), and a strategy that allocates
    # nothing after its first copy has its allocator counters read around the block of
    # copies after the cell's first row rather than around each (``Strategy.allocates``).
    # A copy of DEFER_BELOW_MS or more is slow enough for that host work not to matter: from
    # the first such copy on, the cell's rows are written (and counted) one by one, so that
    # a process killed outright loses at most a second or so of rows.
    per_copy = strat is None or strat.allocates or spec.empty_cache or spec.empty_host_cache_each_size
    pending: list[dict[str, Any]] = []
    block: list[dict[str, Any]] = []  # rows timed without per-copy counters
    block_at: tuple[float, float] | None = None
    try:
        for i, plan_row in enumerate(cell_rows):
            if stop:
                break
            row: dict[str, Any] = {
                **base,
                "order": plan_row["order"],
                "rep": plan_row["rep"],
                "warmup": plan_row["warmup"],
                "t_s": run.elapsed(),
                "wall_ms": np.nan,
                "event_ms": np.nan,
                "host_allocs": np.nan,
                "device_allocs": np.nan,
                "error": reason,
            }
            if not reason:
                counters = per_copy or i == 0 or plan_row["warmup"]
                try:
                    if spec.empty_cache and dev.type == "cuda":
                        torch.cuda.empty_cache()
                    if not counters and block_at is None:
                        block_at = _allocator_counts(timer.dev)
                    row["t_s"] = run.elapsed()
                    y, rec = timer(lambda: strat.copy(x), counters=counters)
                    row.update(rec)
                    if not counters:
                        block.append(row)
                    if not per_copy and rec["wall_ms"] >= DEFER_BELOW_MS:  # a slow cell: one by one
                        per_copy = True
                        if block and block_at is not None:
                            _fill_block_counts(block, block_at, _allocator_counts(timer.dev))
                        block, block_at = [], None
                    if (name, size) not in checked:  # bytewise check of the first copy of each cell
                        checked.add((name, size))
                        if not torch.equal(
                            y.cpu().reshape(-1).view(torch.uint8), x.reshape(-1).view(torch.uint8)
                        ):
                            row["error"] = "wrong result: the copy differs from the source"
                    del y
                except Exception as exc:  # noqa: BLE001
                    if not is_oom(exc) and not isinstance(exc, RuntimeError):
                        raise
                    row["error"] = error_text(exc)
                    if is_cuda_fault(exc):  # the row is kept; nothing later could run
                        pending.append(row)
                        raise CudaFault(row["error"]) from exc
                    reason = row["error"]
                    release_memory(dev)
            pending.append(row)  # measured (or failed): a copy cut off by an interrupt leaves no row
            if per_copy and not reason and pending:
                for done in pending:
                    run.write(done)
                pending.clear()
            if bar is not None:
                bar.update(1)
        if block and block_at is not None:
            _fill_block_counts(block, block_at, _allocator_counts(timer.dev))
    finally:
        for row in pending:  # every row measured is kept, whatever ended the cell
            run.write(row)
    if strat is not None:
        strat.cleanup()
