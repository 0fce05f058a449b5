"""Why one flagged copy was slow: the rules ``outliers.explain()`` applies to each flagged
row, each giving a cause from ``CAUSES`` and an evidence sentence that quotes the numbers.

Rules with direct evidence come first, in this order: ``context_init``,
``host_alloc_growth``, ``device_alloc`` (allocator counters), then the per-copy evidence
of table schemas 2 and 3 (``h2dlab.explain.causes_evidence``) — ``page_faults``,
``host_preempted``, ``host_blocked``, ``gc_pause``, ``other_threads``, ``host_parallel``,
``host_crowded``, ``gpu_shared``, ``gpu_clock_low``. A
column a table does not have (older tables) or a NaN in it (not measured) makes its rule
unavailable, never a guess. Every rule compares the row with its neighbours (same run
and strategy, or same run for the GPU's state), so a condition that holds for every copy
of a run does not explain one slow copy. A flagged copy none of them explains is then
``episode`` when it lies in a time-ordered stretch of slow copies (of its own strategy, or
across strategies and sizes in the run's time order: ``h2dlab.explain.episodes``), else ``gpu_wake`` when
the GPU sat idle long enough before it and its extra time is small, as this machine's idle
runs calibrate (``h2dlab.explain.causes_wake``; never without them), else ``host_stall`` when the
copy was on its CPU and its extra time is no longer than the stalls its run's stall census
counted (``h2dlab.explain.causes_stall``; never without one), else ``unexplained``.
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
    PREEMPTED_SHARE,
    evidence_cause,
    finite,
    ruled_out,
    slow_text,
)
from h2dlab.explain.causes_parallel import busiest_share, wait_baseline
from h2dlab.explain.causes_stall import run_censuses, run_copy_seconds, stall_cause, stall_check
from h2dlab.explain.causes_threads import others_share
from h2dlab.explain.causes_wake import WakeCalibration, idle_gap_ms, run_pauses, wake_cause
from h2dlab.explain.episodes import Stretch
from h2dlab.explain.rows import MODEL_COLUMNS, check_values, column
from h2dlab.explain.wake_source import Wake, of_table, per_run
from h2dlab.measure.spec import MAX_PAUSE_MS

__all__ = [
    "CAUSES",
    "CLOCK_LOW",
    "CONTEXT_INIT_MS",
    "EXPLAINED_SHARE",
    "FAULT_SHARE",
    "HOST_BOUND_SHARE",
    "MIN_CELL_ROWS",
    "MIN_EXTRA_FAULTS",
    "PAGE_BYTES",
    "PINNING_STRATEGIES",
    "PREEMPTED_SHARE",
    "across_text",
    "generic_cause",
    "group_columns",
    "neighbours",
    "specific_cause",
]

#: The vocabulary of ``explain()``'s ``cause`` column, in the order rules are tried.
CAUSES: dict[str, str] = {
    "context_init": "first timed operation of the run: CUDA context start-up",
    "host_alloc_growth": "the pinned request outgrew every cached block, so cudaHostAlloc ran",
    "device_alloc": "the copy waited on new device segments (cudaMalloc), e.g. after empty_cache()",
    "page_faults": "the kernel was mapping host memory: many more page faults than its neighbours",
    "host_preempted": (
        "the timing thread waited to run while another task had its CPU (its run-queue wait; in "
        "tables without it, wall time far above its CPU time)"
    ),
    "host_blocked": "the timing thread slept during the copy (a lock, the kernel, another thread)",
    "gc_pause": "Python's garbage collector ran during the copy",
    "other_threads": "the process's other threads ran far more CPUs' worth during the copy than during copies like it",
    "host_parallel": (
        "the time went into the timed host call while PyTorch's worker threads ran beside it (a parallel CPU "
        "copy waits for its slowest worker)"
    ),
    "host_crowded": (
        "PyTorch's worker threads took the CPUs: the timing thread waited to run, then on its CPU for them "
        "(a parallel CPU copy with as many workers as CPUs)"
    ),
    "gpu_shared": "other processes used the GPU during the copy, more than during its neighbours",
    "gpu_clock_low": "the GPU's SM clock was well below the run's median",
    "episode": "part of a time-ordered stretch of slow copies, or of one in which the host itself ran slow",
    "gpu_wake": (
        "a small copy a little slow after a spell without copies, consistent with some part waking up (the GPU's "
        "copy engine, its PCIe link, the driver or the host: not shown which); named only where idle runs "
        "recorded beside the table show after how long a spell, and at what cost (likely, not certain: only the "
        "gap points to it)"
    ),
    "host_stall": (
        "a copy a few tens of microseconds slow, on its CPU with every counter clean, its extra within the stalls "
        "a thread spinning in its run's process met (the run's stall census): time taken from a running vCPU "
        "where the guest cannot see it; only with a census (likely, not certain: only the extra's size points to it)"
    ),
    "unexplained": "no evidence points anywhere; the evidence says what was ruled out",
}

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
    return ctx


def _mib(n: float) -> str:
    v = n / 2**20
    return f"{v:.2f} MiB" if v < 1024 else f"{v / 1024:.2f} GiB"


def specific_cause(row: pd.Series, ctx: pd.Series, val: float) -> tuple[str, str] | None:
    """The cause with direct evidence for one flagged row, or None.

    Parameters
    ----------
    row
        The row of ``outliers.detect()``'s output.
    ctx
        Its row of ``neighbours()``.
    val
        Its timing in ms (``model.value_ms``).

    Returns
    -------
    tuple of str or None
        ``(cause, evidence)``.
    """
    exp = row["expected_ms"]
    slow = slow_text(row, val)
    wall, event = row["wall_ms"], row["event_ms"]
    if row["order"] == ctx["first_order"] and wall >= CONTEXT_INIT_MS:
        if np.isfinite(event):
            return "context_init", (
                f"first timed operation of the run: {wall:.1f} ms by the host clock, of which "
                f"{wall - event:.1f} ms passed before the GPU recorded the start event (CUDA context "
                f"start-up); the operation itself took {event:.2f} ms by CUDA events"
            )
        return "context_init", (
            f"first timed operation of the run, {wall:.1f} ms ({wall / exp:.0f}x the {exp:.2f} ms expected): "
            f"it includes CUDA context start-up"
        )
    block = 2.0 ** ctx["bucket"]
    faults = ctx["faults"]
    if row["strategy"] in PINNING_STRATEGIES:
        allocs = row["host_allocs"]
        with_faults = (
            f"; {int(faults)} page faults came with it ({faults / (block / PAGE_BYTES):.2f} per 4 KiB page "
            f"of the block)"
            if finite(faults)
            else ""
        )
        if np.isfinite(allocs) and allocs > 0:
            return "host_alloc_growth", (
                f"{slow}; num_host_alloc rose by {int(allocs)}: the pinned request of "
                f"{_mib(row['size_bytes'])} rounds up to a {_mib(block)} block and no cached block was free "
                f"in that size, so the host allocator called cudaHostAlloc{with_faults}"
            )
        if not np.isfinite(allocs) and ctx["new_bucket"]:
            return "host_alloc_growth", (
                f"{slow}; the pinned request of {_mib(row['size_bytes'])} rounds up to a {_mib(block)} block, "
                f"larger or other than any block an earlier request in this run needed, so the host allocator "
                f"had to call cudaHostAlloc (inferred from sizes and order: the table has no counters)"
                f"{with_faults}"
            )
    dallocs, dev_typ = row["device_allocs"], ctx["dev_typ"]
    if np.isfinite(dallocs) and dallocs > 0 and (not np.isfinite(dev_typ) or dallocs > dev_typ):
        pre = "empty_cache() before this copy released the cached segment, so " if row["empty_cache"] else ""
        return "device_alloc", (
            f"{slow}; {pre}the copy waited on {int(dallocs)} new cudaMalloc segment(s), where its neighbours "
            f"needed {0 if not np.isfinite(dev_typ) else int(dev_typ)}"
        )
    return evidence_cause(row, ctx, val, slow)


def generic_cause(
    row: pd.Series, ctx: pd.Series, val: float, episode: int, stretch: Stretch | None = None
) -> tuple[str, str]:
    """``episode`` (when the row lies in one), else ``gpu_wake`` (a small extra after the
    GPU sat idle, ``causes_wake.wake_cause``), else ``host_stall`` (an extra no longer than
    the run's census stalls, ``causes_stall.stall_cause``), else ``unexplained``, with evidence.

    An episode found across strategies in the run's time order (``stretch``, from
    ``episodes.across_curves``) says so, with the stretch's length, span and median ratio;
    one found in the row's own curve (``stretch`` None) keeps the per-curve sentence.

    An unexplained row's evidence lists what the table lets us rule out
    (``causes_evidence.ruled_out``): the allocator counters and, where measured, page
    faults, CPU time, the run-queue wait, context switches, GC, the SM clock, other
    processes on the GPU and how the time split between the call and the wait for the
    GPU, the checks the table could not make, the idle gap before it and the run's stall census.
    Same parameters as ``specific_cause`` plus the episode id (-1: none) and its stretch."""
    slow = slow_text(row, val)
    if episode >= 0 and stretch is not None:
        return "episode", f"{slow}; {across_text(stretch, episode)}"
    if episode >= 0:
        return "episode", (
            f"{slow}; one of a stretch of consecutive slow copies in time order (episode {episode}): a "
            f"time-correlated slowdown, not a property of this size"
        )
    wake = wake_cause(row, ctx, val, slow) or stall_cause(row, ctx, val, slow)
    if wake:
        return wake
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
