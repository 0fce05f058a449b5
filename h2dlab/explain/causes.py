"""Why one flagged copy was slow: the causes ``outliers.explain()`` gives each flagged row, as
data: one :class:`~h2dlab.explain.registry.Cause` entry each (name, what it means, the
columns it needs, its test, which returns the evidence sentence quoting the numbers) in the
registry of its family, and ``CAUSES``, the vocabulary, read from them.

Rules with direct evidence come first, in this order: ``ALLOCATOR`` (here) —
``context_init``, ``host_alloc_growth``, ``device_alloc`` (allocator counters) — then
``causes_evidence.PER_COPY``, the per-copy evidence of table schemas 2 and 3 — ``page_faults``,
``host_preempted``, ``host_blocked``, ``gc_pause``, ``other_threads``, ``host_parallel``,
``host_crowded``, ``gpu_shared``, ``gpu_clock_low``. A
column a table does not have (older tables) or a NaN in it (not measured) makes its rule
unavailable, never a guess. Every rule compares the row with its neighbours (same run
and strategy, or same run for the GPU's state), so a condition that holds for every copy
of a run does not explain one slow copy. A flagged copy none of them explains is then
``episode`` when it lies in a time-ordered stretch of slow copies (of its own strategy, or
across strategies and sizes in the run's time order: ``h2dlab.explain.episodes``), else ``LIKELY`` (here):
``gpu_wake`` when
the GPU sat idle long enough before it and its extra time is small, as this machine's idle
runs calibrate (``h2dlab.explain.causes_wake``; never without them), else ``host_stall`` when the
copy was on its CPU and its extra time is no longer than the stalls its run's stall census
counted (``h2dlab.explain.causes_stall``; never without one), else ``unexplained``.

A new cause is one entry in its family's list (this module's ``ALLOCATOR`` or ``LIKELY``,
``causes_evidence.PER_COPY``), or one ``register`` call, and its test; its colour in a
figure is ``show.plots_style.CAUSE_COLORS`` (black where it has none).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from h2dlab.explain.causes_evidence import (
    CLOCK_LOW,
    EXPLAINED_SHARE,
    FAULT_SHARE,
    HOST_BOUND_SHARE,
    MIN_EXTRA_FAULTS,
    PAGE_BYTES,
    PER_COPY,
    PREEMPTED_SHARE,
    finite,
    ruled_out,
    slow_text,
)
from h2dlab.explain.causes_parallel import busiest_share, wait_baseline
from h2dlab.explain.causes_stall import HOST_STALL, run_censuses, run_copy_seconds, stall_check
from h2dlab.explain.causes_threads import others_share
from h2dlab.explain.causes_wake import GPU_WAKE, WakeCalibration, idle_gap_ms, run_pauses
from h2dlab.explain.episodes import Stretch
from h2dlab.explain.registry import Cause, Registry, Vocabulary, first
from h2dlab.explain.rows import MODEL_COLUMNS, check_values, column
from h2dlab.explain.wake_source import Wake, of_table, per_run
from h2dlab.measure.spec import MAX_PAUSE_MS

__all__ = [
    "ALLOCATOR",
    "CAUSES",
    "CLOCK_LOW",
    "CONTEXT_INIT_MS",
    "EXPLAINED_SHARE",
    "FAULT_SHARE",
    "EPISODE",
    "HOST_BOUND_SHARE",
    "LIKELY",
    "MIN_CELL_ROWS",
    "MIN_EXTRA_FAULTS",
    "PAGE_BYTES",
    "PER_COPY",
    "PINNING_STRATEGIES",
    "PREEMPTED_SHARE",
    "UNEXPLAINED",
    "across_text",
    "generic_cause",
    "group_columns",
    "neighbours",
    "specific_cause",
    "usable",
]

#: ``others_cell`` needs at least this many timed copies of the same group and size.
MIN_CELL_ROWS = 3
#: A first operation this slow (ms) is context start-up, not an ordinary spike.
CONTEXT_INIT_MS = 50.0
PINNING_STRATEGIES = ("pin_memory", "pin_then_copy")


def group_columns(df: pd.DataFrame) -> list[str]:
    """The columns whose values make one curve of copies: run, direction, strategy and
    tensors per copy (the last two where the table has them, schema 2)."""
    return [c for c in ("run_id", "direction", "strategy", "n_tensors") if c in df.columns]


_col = column  # the evidence column, NaN where a table lacks it (rows.column)


def _check_pauses(pauses: object) -> None:
    """Refuse a ``pauses`` argument that is not run_id -> a pause ``--pause`` could take."""
    if pauses is None:
        return
    if not isinstance(pauses, Mapping):
        raise TypeError(f"pauses must be a mapping run_id -> pause in ms, not {type(pauses).__name__}")
    for run, v in pauses.items():
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"pauses[{run!r}] must be a number of ms, not {type(v).__name__}")
        if not 0 <= v <= MAX_PAUSE_MS:
            raise ValueError(f"pauses[{run!r}] is {v!r}: a run's --pause is 0 to {MAX_PAUSE_MS:g} ms")


def neighbours(
    df: pd.DataFrame,
    pauses: dict[object, float] | None = None,
    wake: WakeCalibration | Mapping[object, Wake] | None = None,
    censuses: Mapping[object, dict | None] | None = None,
) -> pd.DataFrame:
    """Per row, what its neighbours looked like (the rules compare a row with these).

    Returns a frame on ``df``'s index: ``first_order`` (the run's first ``order``),
    ``bucket`` (log2 of the pinned block a request rounds up to) and ``new_bucket`` (no
    earlier row of its group needed that block), ``dev_typ`` (median new device segments
    of its group: same ``group_columns``), ``faults`` (minor + major: of every thread of
    the process where the table has ``proc_faults``, else of the timing thread),
    ``fault_typ`` (median faults per 4 KiB page of the payload), ``cpu_share`` (cpu_ms /
    wall_ms) and ``cpu_typ`` (its median), ``gc_typ``, per run ``clock_med`` and
    ``procs_med``, ``idle_gap_ms`` (host time since the previous timed copy of the run
    ended: ``causes_wake.idle_gap_ms``), ``idle_pause_ms`` (the row's run's ``--pause``,
    NaN where it did not pause: from ``pauses``, else read from ``df.attrs``), ``wake`` (the
    row's run's ``causes_wake.WakeCalibration``, or a sentence why it has none: ``wake``,
    one for every row or per run, else ``wake_source.of_table(df)``; None without
    idle runs), ``census`` (the row's run's stall census: from ``censuses``, run_id -> census,
    else ``df``'s attrs, ``causes_stall.run_censuses``; None without one), ``run_wall_s``
    (the run's timed copies' wall time in all, s, each copy once), ``issue_cell`` (median ``issue_ms`` over the timed
    rows of the same group and size, NaN below :data:`MIN_CELL_ROWS`), and from schema 3
    the medians of ``rd_typ`` (the run-queue wait that fits in the copy,
    ``causes_evidence.run_delay_inside``, / wall_ms),
    ``blocked_typ`` (time asleep, wall - CPU - run delay, / wall_ms), ``issue_typ``
    (issue_ms / wall_ms) and ``others_typ`` (CPUs' worth the process's other threads ran:
    ``others_cpu_ms / others_window_ms`` where recorded (schema 4), else
    ``(proc_cpu_ms - cpu_ms) / wall_ms``), and ``others_cell``, that share's median over the
    timed rows of the same group and size (NaN below :data:`MIN_CELL_ROWS` such rows), and
    ``busiest_cell`` likewise of the busiest other thread's share of that window
    (``causes_parallel.busiest_share``, schema 4), ``busiest_typ`` its median over the group,
    ``wait_usual`` (``causes_parallel.wait_baseline``, schema 5). Medians are over timed rows.
    Then the columns each cause with a ``context`` function adds (``registry.Cause.context``).

    Raises
    ------
    TypeError
        ``df`` is not a DataFrame; ``pauses`` is not a mapping run_id -> pause, or holds a
        value that is not a number.
    ValueError
        ``df`` lacks a column it reads (``rows.check_values``); ``pauses`` holds a pause no
        run could have taken (outside 0 to ``spec.MAX_PAUSE_MS``).
    """
    check_values(df, (*MODEL_COLUMNS, "order", "rep"))
    _check_pauses(pauses)
    ctx = pd.DataFrame(index=df.index)
    ctx["first_order"] = df.groupby("run_id", sort=False)["order"].transform("min")
    ctx["bucket"] = np.ceil(np.log2(np.maximum(df["size_bytes"].to_numpy(float), 1))).astype(int)
    # In time order, the first row of a bucket in its group is the one that needed the
    # block first ((order, rep) is unique within a group; assignment aligns on the index).
    keys = group_columns(df)
    in_time = pd.concat([df[[*keys, "order", "rep"]], ctx["bucket"]], axis=1).sort_values(["order", "rep"])
    ctx["new_bucket"] = ~in_time.duplicated([*keys, "bucket"])
    by = [df[k] for k in keys]
    ctx["dev_typ"] = _col(df, "device_allocs").groupby(by, sort=False).transform("median")
    timed = (~df["warmup"].astype(bool)) & (df["error"] == "")
    minflt, majflt = _col(df, "minflt"), _col(df, "majflt")
    ctx["faults"] = minflt.fillna(0) + majflt.fillna(0)
    ctx.loc[minflt.isna() & majflt.isna(), "faults"] = np.nan
    proc_faults = _col(df, "proc_faults")
    ctx["faults"] = proc_faults.where(proc_faults.notna(), ctx["faults"])
    pages = np.maximum(df["size_bytes"].astype(float) / PAGE_BYTES, 1.0)
    ctx["fault_typ"] = (ctx["faults"] / pages).where(timed).groupby(by, sort=False).transform("median")
    ctx["cpu_share"] = _col(df, "cpu_ms") / df["wall_ms"].astype(float)
    ctx["cpu_typ"] = ctx["cpu_share"].where(timed).groupby(by, sort=False).transform("median")
    ctx["gc_typ"] = _col(df, "gc_count").where(timed).groupby(by, sort=False).transform("median")
    wall = df["wall_ms"].astype(float)
    cpu = _col(df, "cpu_ms")
    rd = np.minimum(_col(df, "run_delay_ms"), np.maximum(wall - cpu, 0.0).where(cpu.notna(), np.inf))
    asleep = np.maximum(wall - cpu - rd, 0.0)  # NaN stays NaN
    for name, part in (("rd_typ", rd), ("blocked_typ", asleep), ("issue_typ", _col(df, "issue_ms"))):
        ctx[name] = (part / wall).where(timed).groupby(by, sort=False).transform("median")
    # The process's other threads, in CPUs' worth (exact clocks where recorded).
    share = others_share(df).where(timed)
    ctx["others_typ"] = share.groupby(by, sort=False).transform("median")
    # ... per copy size too: whether a copy is split over threads depends on its size.
    cell = share.groupby([*by, df["size_bytes"]], sort=False)
    ctx["others_cell"] = cell.transform("median").where(cell.transform("count") >= MIN_CELL_ROWS)
    busy = busiest_share(df).where(timed)
    ctx["busiest_typ"] = busy.groupby(by, sort=False).transform("median")
    ctx["wait_usual"] = wait_baseline(df, by, timed)  # schema 5: ordinary copies' worker waits
    busiest = busy.groupby([*by, df["size_bytes"]], sort=False)
    ctx["busiest_cell"] = busiest.transform("median").where(busiest.transform("count") >= MIN_CELL_ROWS)
    issue = _col(df, "issue_ms").where(timed).groupby([*by, df["size_bytes"]], sort=False)
    ctx["issue_cell"] = issue.transform("median").where(issue.transform("count") >= MIN_CELL_ROWS)
    pauses = run_pauses(df) if pauses is None else pauses
    ctx["idle_gap_ms"] = idle_gap_ms(df)
    ctx["idle_pause_ms"] = df["run_id"].map(pauses).astype(float)
    ctx["wake"] = per_run(of_table(df) if wake is None else wake, df["run_id"])
    ctx["census"] = run_censuses(df, censuses)
    ctx["run_wall_s"] = run_copy_seconds(df, timed)
    run = df["run_id"]
    ctx["clock_med"] = _col(df, "sm_clock_mhz").where(timed).groupby(run, sort=False).transform("median")
    ctx["procs_med"] = _col(df, "gpu_procs").where(timed).groupby(run, sort=False).transform("median")
    for own in CAUSES.contexts():  # what a registered cause reads beyond these (its ``context``)
        for name, part in own(df).items():
            ctx[name] = part
    return ctx


def _mib(n: float) -> str:
    v = n / 2**20
    return f"{v:.2f} MiB" if v < 1024 else f"{v / 1024:.2f} GiB"


def _context_init(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> str | None:
    """The run's first timed operation, at least :data:`CONTEXT_INIT_MS`: CUDA context start-up."""
    exp, wall, event = row["expected_ms"], row["wall_ms"], row["event_ms"]
    if not (row["order"] == ctx["first_order"] and wall >= CONTEXT_INIT_MS):
        return None
    if np.isfinite(event):
        return (
            f"first timed operation of the run: {wall:.1f} ms by the host clock, of which "
            f"{wall - event:.1f} ms passed before the GPU recorded the start event (CUDA context "
            f"start-up); the operation itself took {event:.2f} ms by CUDA events"
        )
    return (
        f"first timed operation of the run, {wall:.1f} ms ({wall / exp:.0f}x the {exp:.2f} ms expected): "
        f"it includes CUDA context start-up"
    )


def _host_alloc_growth(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> str | None:
    """A pinning strategy's request that no cached block served: ``num_host_alloc`` rose, or
    (no counters) its power-of-two block is one no earlier request of its group needed."""
    if row["strategy"] not in PINNING_STRATEGIES:
        return None
    block = 2.0 ** ctx["bucket"]
    faults = ctx["faults"]
    allocs = row["host_allocs"]
    with_faults = (
        f"; {int(faults)} page faults came with it ({faults / (block / PAGE_BYTES):.2f} per 4 KiB page "
        f"of the block)"
        if finite(faults)
        else ""
    )
    if np.isfinite(allocs) and allocs > 0:
        return (
            f"{slow}; num_host_alloc rose by {int(allocs)}: the pinned request of "
            f"{_mib(row['size_bytes'])} rounds up to a {_mib(block)} block and no cached block was free "
            f"in that size, so the host allocator called cudaHostAlloc{with_faults}"
        )
    if not np.isfinite(allocs) and ctx["new_bucket"]:
        return (
            f"{slow}; the pinned request of {_mib(row['size_bytes'])} rounds up to a {_mib(block)} block, "
            f"larger or other than any block an earlier request in this run needed, so the host allocator "
            f"had to call cudaHostAlloc (inferred from sizes and order: the table has no counters)"
            f"{with_faults}"
        )
    return None


def _device_alloc(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> str | None:
    """More new device segments (``cudaMalloc``) than its neighbours needed."""
    dallocs, dev_typ = row["device_allocs"], ctx["dev_typ"]
    if not (np.isfinite(dallocs) and dallocs > 0 and (not np.isfinite(dev_typ) or dallocs > dev_typ)):
        return None
    pre = "empty_cache() before this copy released the cached segment, so " if row["empty_cache"] else ""
    return (
        f"{slow}; {pre}the copy waited on {int(dallocs)} new cudaMalloc segment(s), where its neighbours "
        f"needed {0 if not np.isfinite(dev_typ) else int(dev_typ)}"
    )


#: Start-up and the allocators' counters, tried first, in this order.
ALLOCATOR = Registry(
    "start-up and allocator",
    [
        Cause(
            "context_init",
            "first timed operation of the run: CUDA context start-up",
            needs=("order", "wall_ms", "event_ms"),
            test=_context_init,
        ),
        Cause(
            "host_alloc_growth",
            "the pinned request outgrew every cached block, so cudaHostAlloc ran",
            needs=("strategy", "host_allocs"),
            test=_host_alloc_growth,
        ),
        Cause(
            "device_alloc",
            "the copy waited on new device segments (cudaMalloc), e.g. after empty_cache()",
            needs=("device_allocs", "empty_cache"),
            test=_device_alloc,
        ),
    ],
)
#: A copy in a time-ordered stretch of slow copies (``outliers.explain``'s episode search names it).
EPISODE = Cause(
    "episode", "part of a time-ordered stretch of slow copies, or of one in which the host itself ran slow"
)
#: What only the gap before a copy, or the size of its extra, points to: tried, in this order,
#: for a flagged copy with no direct evidence and in no episode.
LIKELY = Registry("likely", [GPU_WAKE, HOST_STALL])
#: A copy no cause fits; its evidence says what was ruled out.
UNEXPLAINED = Cause("unexplained", "no evidence points anywhere; the evidence says what was ruled out")
#: The vocabulary of ``explain()``'s ``cause`` column, in the order causes are tried: name ->
#: what it means, read from the registries (a cause registered at run time is in it).
CAUSES = Vocabulary(ALLOCATOR, PER_COPY, EPISODE, LIKELY, UNEXPLAINED)


def usable(columns: object) -> list[Cause]:
    """The causes with direct evidence (``ALLOCATOR``, then ``PER_COPY``) that a table with
    ``columns`` can have, in order: those whose ``needs`` it has (``outliers.explain`` asks
    once per table)."""
    return [*ALLOCATOR.usable(columns), *PER_COPY.usable(columns)]


def specific_cause(
    row: pd.Series, ctx: pd.Series, val: float, causes: list[Cause] | None = None
) -> tuple[str, str] | None:
    """The cause with direct evidence for one flagged row, or None: the first of
    ``ALLOCATOR``, then ``causes_evidence.PER_COPY``, whose test holds.

    Parameters
    ----------
    row
        The row of ``outliers.detect()``'s output.
    ctx
        Its row of ``neighbours()``.
    val
        Its timing in ms (``model.value_ms``).
    causes
        The entries to try (:func:`usable` for the row's table); all of both families where None.

    Returns
    -------
    tuple of str or None
        ``(cause, evidence)``.
    """
    slow = slow_text(row, val)
    if causes is None:
        return ALLOCATOR.first(row, ctx, val, slow) or PER_COPY.first(row, ctx, val, slow)
    return first(causes, row, ctx, val, slow)


def generic_cause(
    row: pd.Series,
    ctx: pd.Series,
    val: float,
    episode: int,
    stretch: Stretch | None = None,
    likely: list[Cause] | None = None,
) -> tuple[str, str]:
    """``episode`` (when the row lies in one), else the first of ``LIKELY`` whose test holds:
    ``gpu_wake`` (a small extra after the GPU sat idle, ``causes_wake.wake_cause``), then
    ``host_stall`` (an extra no longer than the run's census stalls, ``causes_stall.stall_cause``);
    else ``unexplained``, with evidence.

    An episode found across strategies in the run's time order (``stretch``, from
    ``episodes.across_curves``) says so, with the stretch's length, span and median ratio;
    one found in the row's own curve (``stretch`` None) keeps the per-curve sentence.

    An unexplained row's evidence lists what the table lets us rule out
    (``causes_evidence.ruled_out``): the allocator counters and, where measured, page
    faults, CPU time, the run-queue wait, context switches, GC, the SM clock, other
    processes on the GPU and how the time split between the call and the wait for the
    GPU, the checks the table could not make, the idle gap before it and the run's stall census.
    Same parameters as ``specific_cause`` plus the episode id (-1: none), its stretch and the
    ``LIKELY`` entries to try (``LIKELY.usable`` for the row's table; all where None)."""
    slow = slow_text(row, val)
    if episode >= 0 and stretch is not None:
        return "episode", f"{slow}; {across_text(stretch, episode)}"
    if episode >= 0:
        return "episode", (
            f"{slow}; one of a stretch of consecutive slow copies in time order (episode {episode}): a "
            f"time-correlated slowdown, not a property of this size"
        )
    found = LIKELY.first(row, ctx, val, slow, likely)
    if found:
        return found
    why = ruled_out(row, ctx)
    census = stall_check(row, ctx, val)
    if census:
        why["stall census"] = census
    tail = "; ".join(why.values()) if why else "the table carries no counters for it"
    return "unexplained", f"{slow}; an isolated slow copy: {tail}"


def across_text(stretch: Stretch, episode: int) -> str:
    """The evidence for a copy in a stretch of slow copies across strategies in the run's time
    order: its length, the strategies and sizes in it, where it lies in the run (``t_s``)
    and its median copy's time over expected."""
    kinds = f"{stretch.strategies} strateg{'y' if stretch.strategies == 1 else 'ies'}"
    sizes = f"{stretch.sizes} size{'' if stretch.sizes == 1 else 's'}"
    return (
        f"one of a stretch of {stretch.n} consecutive slow copies in time order across {kinds} and {sizes} "
        f"(episode {episode}, {stretch.start_s:.2f} s to {stretch.end_s:.2f} s of the run; the median copy in "
        f"it took {stretch.median_ratio:.1f}x its expected time): the machine was slow for a while, whatever "
        f"was copied"
    )
