"""The measuring harness: ``sweep(spec)``, one row per timed copy.

Every copy is timed on its own, with CUDA events and a synchronised host clock, so one
slow copy cannot hide in an average. Between two timed copies the loop does only the
timer's reads: a cell (strategy, size) is prepared once, even when an interleaved sweep
visits it once a round (``hold_plan``), and rows go to disk (``recorder``) where host work
happens anyway or within :data:`FLUSH_AFTER_S` of being measured; whatever ends the sweep,
every row measured is kept. A copy that runs out of memory is recorded as a row with its error and
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
    headroom_bytes,
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

__all__ = ["hold_plan", "resolve_spec", "sweep"]


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
    todo = cells(planned[run.start_at :])
    hold = hold_plan(todo, spec, dev)
    held: dict[Key, _Cell] = {}
    rows = _Pending(run, timer.dev)
    fault: CudaFault | None = None
    try:
        with stop.installed(), steady_gc():
            try:
                for visit in todo:
                    if before_cell is not None:
                        before_cell(stop)
                    if stop:
                        break
                    key = (visit[0]["strategy"], visit[0]["size_bytes"])
                    cell = held.get(key)
                    if cell is None:
                        rows.settle()  # preparing is host work anyway, and may allocate
                        cell = _Cell(key, src, dev, spec)
                        if key in hold and cell.strat is not None:
                            held[key] = cell
                    _measure_visit(visit, cell, dev, spec, timer, run, rows, stop, bar, checked)
                    if held.get(key) is not cell:
                        cell.release()  # frees only: no allocator count moves
                    elif cell.reason:  # a copy failed: from now on prepared at each visit, as before
                        hold.discard(key)
                        del held[key]
                        cell.release()
                    if on_row is not None:
                        on_row(len(run.rows) + len(rows.rows))
                rows.close_block()
            finally:
                rows.write()  # every row measured is kept, whatever ended the sweep
                for cell in held.values():
                    cell.release()
    except CudaFault as exc:
        fault = exc
    except KeyboardInterrupt as exc:  # a second Ctrl-C: the rows are written; say where, and how to resume
        raise run.interrupted(exc) from None
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


#: A cell's copies that take less than this (host wall time) wait to be written; from a
#: cell's first slower copy on, the waiting rows are written before each of its copies
#: (see ``_measure_visit``).
DEFER_BELOW_MS = 1.0
#: Rows waiting to be written go to disk at the latest once the oldest is this old (seconds
#: of run time): a process killed outright loses at most about this much.
FLUSH_AFTER_S = 1.0
#: The most memory an interleaved sweep keeps prepared between its rounds (``hold_plan``):
#: 256 MiB holds ``pinned_reuse`` (a pinned and a device buffer per size) from 1 KiB up to
#: 64 MiB, where a pinned copy takes about 1.2 ms on an H200 and a re-preparation's host
#: work no longer weighs on it; every strategy that keeps nothing is held at every size.
HOLD_BUDGET_BYTES = 256 * 1024**2

Key = tuple[str, int]


def hold_plan(visits: list[list[dict[str, Any]]], spec: SweepSpec, dev: torch.device) -> set[Key]:
    """The cells (strategy, size) kept prepared from their first visit to the end of the sweep.

    A cell visited more than once (an interleaved sweep visits each once a round) is
    prepared once and released at the end, so that a round's copy of it costs the copy and
    the timer's reads only. Cells are taken smallest first while the bytes their strategies
    keep (``Strategy.held_bytes``) fit in :data:`HOLD_BUDGET_BYTES` and in the memory left
    once the largest size fits (``device.headroom_bytes``: the sweep's own memory check is
    not made tighter); the others are prepared and released at each visit, as before.
    Nothing is held with ``--empty-host-cache`` (the host cache is emptied at each visit's
    preparation) or for a strategy this device lacks.

    Parameters
    ----------
    visits
        The planned rows still to measure, grouped as ``plan.cells`` groups them.
    spec
        The sweep's resolved spec (its sizes and ``empty_host_cache_each_size``).
    dev
        The device copied to.

    Returns
    -------
    set of (str, int)
        The (strategy, size_bytes) cells to keep prepared.
    """
    if spec.empty_host_cache_each_size:
        return set()
    count: dict[Key, int] = {}
    for visit in visits:
        key = (visit[0]["strategy"], visit[0]["size_bytes"])
        count[key] = count.get(key, 0) + 1
    again = sorted(
        (k for k, n in count.items() if n > 1 and not strategies.available(k[0], dev)),
        key=lambda k: (k[1], k[0]),
    )
    if not again:
        return set()
    budget = min(HOLD_BUDGET_BYTES, headroom_bytes(max(spec.sizes), dev))
    keep, used = set(), 0
    for name, size in again:
        need = strategies.REGISTRY[name].held_bytes(size)
        if used + need <= budget:
            keep.add((name, size))
            used += need
    return keep


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


class _Cell:
    """One (strategy, size) prepared: the copied tensor, the fields every row of it shares,
    the strategy after ``prepare`` (None, with ``reason``, where it cannot run) and how its
    copies are counted and written."""

    def __init__(self, key: Key, src: torch.Tensor, dev: torch.device, spec: SweepSpec) -> None:
        name, size = key
        self.x = x = src[:size].view(getattr(torch, spec.dtype))
        self.base = {
            "strategy": name,
            "direction": strategies.direction_of(name),  # d2h strategies bring x back from the GPU
            "n_tensors": 1,
            "size_bytes": size,
            "shape": str(tuple(x.shape)),
            "dtype": spec.dtype,
            "empty_cache": spec.empty_cache,
        }
        self.key, self.copies = key, 0  # rows measured so far (the first reads its counters)
        self.reason = strategies.available(name, dev)
        self.strat = None
        if not self.reason:
            try:
                if spec.empty_host_cache_each_size and dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                    empty_host_cache()
                strat = strategies.get(name)
                strat.prepare(x, dev)
                self.strat = strat
            except Exception as exc:  # noqa: BLE001 - recorded, then the sweep goes on
                if is_cuda_fault(exc):
                    raise CudaFault(error_text(exc)) from exc
                self.reason = error_text(exc)
                release_memory(dev)
        # Allocator counters around each copy (else around a block of copies, ``_Pending``)
        # for a strategy that allocates at each copy or when caches are emptied; from the
        # first copy of DEFER_BELOW_MS or more on, also each row written after its copy.
        self.count_each = (
            self.strat is None or self.strat.allocates or spec.empty_cache or spec.empty_host_cache_each_size
        )
        self.write_each = False
        self.fn = (lambda s=self.strat, x=x: s.copy(x)) if self.strat is not None else None

    def release(self) -> None:
        """Give back what ``prepare`` took (idempotent)."""
        if self.strat is not None:
            self.strat.cleanup()
            self.strat = self.fn = None


class _Pending:
    """Rows measured and not yet written, and the open block of rows timed without per-copy
    allocator counters, which may span cells (an interleaved round's copies).

    The block's counters are read before its first copy and when it closes; the counts of
    copies timed with their own counters in between are subtracted, so a block's rows read
    0 exactly when nothing else in that span made a pinned block or a device segment."""

    def __init__(self, run: Recording, dev: torch.device) -> None:
        self.run, self.dev = run, dev
        self.rows: list[dict[str, Any]] = []
        self.block: list[dict[str, Any]] = []
        self.block_at: tuple[float, float] | None = None
        self.others = [0.0, 0.0]  # allocations of copies counted on their own within the block
        self.since = 0.0  # run time of the oldest row waiting

    def add(self, row: dict[str, Any]) -> None:
        if not self.rows:
            self.since = row["t_s"]
        self.rows.append(row)

    def open_block(self) -> None:
        if self.block_at is None:
            self.block_at, self.others = _allocator_counts(self.dev), [0.0, 0.0]

    def counted(self, host: float, device: float) -> None:
        """A copy timed with its own counters (NaN: a failed copy, unknown) inside the block."""
        if self.block_at is not None:
            self.others[0] += host
            self.others[1] += device

    def close_block(self) -> None:
        if self.block and self.block_at is not None:
            h, d = _allocator_counts(self.dev)
            _fill_block_counts(self.block, self.block_at, (h - self.others[0], d - self.others[1]))
        self.block, self.block_at = [], None

    def due(self) -> bool:
        return bool(self.rows) and self.run.elapsed() - self.since >= FLUSH_AFTER_S

    def write(self) -> None:
        """Write the waiting rows as they are (the block's rows keep NaN counts if it is open);
        an interrupt midway leaves the rows not yet written waiting, none twice."""
        start = len(self.run.rows)
        try:
            self.run.write_all(self.rows)
        finally:
            del self.rows[: len(self.run.rows) - start]

    def settle(self) -> None:
        """Close the block and write every waiting row."""
        self.close_block()
        self.write()


def _measure_visit(
    visit, cell: _Cell, dev, spec: SweepSpec, timer, run, rows: _Pending, stop, bar, checked
) -> None:
    """Time the consecutive planned rows ``visit`` of ``cell``; rows go to ``rows``.

    Host work between two timed copies is kept to the timer's own reads: rows wait, and are
    written before a cell is prepared, when the oldest waiting row is FLUSH_AFTER_S old, or
    when the sweep ends or stops; a strategy that allocates nothing after its first copy
    has its allocator counters read around a block of copies rather than around each
    (``_Pending``). A copy of DEFER_BELOW_MS or more is slow enough for that host work not
    to matter: from the first such copy of a cell on, its copies are counted one by one and
    the waiting rows are written before each of them, so that a process killed outright
    loses at most a second or so of rows. Before it, not after: in an interleaved round the
    next copy may be a small one, which the writes would delay.
    """
    for plan_row in visit:
        if stop:
            break
        if cell.write_each and not cell.reason and rows.rows:  # a slow cell: rows out before its copy
            rows.settle()
        row: dict[str, Any] = {
            **cell.base,
            "order": plan_row["order"],
            "rep": plan_row["rep"],
            "warmup": plan_row["warmup"],
            "t_s": run.elapsed(),
            "wall_ms": np.nan,
            "event_ms": np.nan,
            "host_allocs": np.nan,
            "device_allocs": np.nan,
            "error": cell.reason,
        }
        if not cell.reason:
            counters = cell.count_each or cell.copies == 0 or plan_row["warmup"]
            try:
                if spec.empty_cache and dev.type == "cuda":
                    torch.cuda.empty_cache()
                if not counters:
                    rows.open_block()
                row["t_s"] = run.elapsed()
                y, rec = timer(cell.fn, counters=counters)
                row.update(rec)
                if counters:
                    rows.counted(rec["host_allocs"], rec["device_allocs"])
                else:
                    rows.block.append(row)
                if not cell.write_each and rec["wall_ms"] >= DEFER_BELOW_MS:  # a slow cell: one by one
                    cell.write_each = cell.count_each = True
                if cell.key not in checked:  # bytewise check of the first copy of each cell
                    checked.add(cell.key)
                    if not torch.equal(
                        y.cpu().reshape(-1).view(torch.uint8), cell.x.reshape(-1).view(torch.uint8)
                    ):
                        row["error"] = "wrong result: the copy differs from the source"
                del y
            except Exception as exc:  # noqa: BLE001
                if not is_oom(exc) and not isinstance(exc, RuntimeError):
                    raise
                row["error"] = error_text(exc)
                rows.counted(np.nan, np.nan)  # what the failed copy allocated is unknown
                if is_cuda_fault(exc):  # the row is kept; nothing later could run
                    rows.add(row)
                    raise CudaFault(row["error"]) from exc
                cell.reason = row["error"]
                release_memory(dev)
        cell.copies += 1
        rows.add(row)  # measured (or failed): a copy cut off by an interrupt leaves no row
        if rows.due():
            rows.settle()
        if bar is not None:
            bar.update(1)
