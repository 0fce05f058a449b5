"""The ``host_parallel`` rule: the extra time lies in host-side work that ran while
PyTorch's worker threads ran beside it.

Strategies that copy on the host before the GPU sees the data (``pin_memory()``'s copy,
``torch.cat`` into a pinned buffer, ``copy_`` into pinned memory) let PyTorch split that
copy over its OpenMP intra-op threads. The thread that opens a parallel region does its
share, then waits at the region's end for the slowest worker, by default spinning on its
CPU; to the scheduler's account that wait looks like work. Such a copy, when slow, shows
this signature: the timed call itself ran long, the timing thread stayed on its CPU
without waiting to run, and the process's other threads ran at least a CPU's worth, the
busiest of them on a CPU nearly the whole window.

Only schema 4's exact clocks (each other thread's own CPU clock, read just before and
just after the copy) can show that: schema 3's process clock adds other threads' time in
scheduler ticks, so over a copy of a few ms it cannot tell a worker busy the whole copy
from one that ran a tick's worth before it. Without those columns the rule never fires.
``causes_evidence.evidence_cause`` tries it after ``other_threads`` and the scheduler
rules and before ``gpu_shared`` / ``gpu_clock_low`` (see :func:`parallel_cause`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd

from h2dlab.explain.registry import Cause, Test, said
from h2dlab.explain.rows import column, number

__all__ = [
    "AS_USUAL",
    "HOST_PARALLEL",
    "HOST_SIDE_NEEDS",
    "HostSide",
    "LAGGED",
    "MAX_WAIT_SHARE",
    "MIN_BUSIEST_SHARE",
    "MIN_IN_CALL_SHARE",
    "MIN_ON_CPU",
    "MIN_OTHERS_CPUS",
    "busiest_share",
    "host_side",
    "in_call_where",
    "lagging",
    "parallel_cause",
    "run_delay_inside",
    "usual_issue",
    "wait_inside",
    "wait_baseline",
    "waited_test",
    "workers_usual",
]

#: The timing thread was on its CPU for at least this share of the copy's wall time
#: (cpu_ms / wall_ms). A thread that waits at a parallel region's end spins on its CPU
#: (OpenMP's default wait policy), so this copy's host time was CPU time; a thread off its
#: CPU for more than a tenth of the copy lost time the scheduler rules (host_preempted,
#: host_blocked) account for, and that lost time is not host-side work.
MIN_ON_CPU = 0.9
#: The timing thread's run-queue wait inside the copy stays below this share of the extra
#: time. A wait covering half the extra is the scheduler's story: the same half as
#: ``causes_evidence.EXPLAINED_SHARE``, with which host_preempted claims a copy; one that
#: covers half but did not make host_preempted (its neighbours wait as long) is left
#: unexplained rather than called host-side work.
MAX_WAIT_SHARE = 0.5
#: The timed call (``issue_ms``) ran at least this share of the extra time longer than its
#: neighbours' usual call: most of the extra was spent before the call returned, on the
#: host, not afterwards waiting for the GPU (where a slow copy engine, a shared or
#: clocked-down GPU would show). Half, as for every "covers the extra" test of the rules.
MIN_IN_CALL_SHARE = 0.5
#: The process's other threads ran at least this many CPUs' worth during the window
#: (``causes_threads.others_share``): at least one worker busy, on average, the whole copy.
#: A copy no parallel region ran beside (a pageable ``.to()``: about 0 CPUs' worth) cannot
#: be waiting for a worker.
MIN_OTHERS_CPUS = 1.0
#: The busiest other thread was on a CPU for at least this share of the window
#: (busiest_cpu_ms / others_window_ms): a worker running, or spinning, through the whole
#: slow copy, as one that holds a parallel region open must. A thread that ran only part
#: of the window cannot have kept the timing thread waiting for all of it.
MIN_BUSIEST_SHARE = 0.9
#: The columns both host-side rules (``host_parallel``, ``host_crowded``) read: schema 4's
#: exact clocks of the other threads, and the timing thread's CPU time and run-queue wait.
HOST_SIDE_NEEDS = ("others_cpu_ms", "others_window_ms", "busiest_cpu_ms", "cpu_ms", "run_delay_ms")
#: The words of a host_parallel sentence whose columns place the extra time but give no
#: reason for it (``factors.host_parallel`` counts them) ...
AS_USUAL = "these columns place the extra time in host CPU work inside the call"
#: ... and of one whose worker waited to run, longer than ordinary copies' workers did.
LAGGED = "consistent with a worker that lost its CPU holding the parallel copy open"


def run_delay_inside(run_delay_ms: float, wall_ms: float, cpu_ms: float) -> float:
    """The part of a run-queue wait that can lie inside the copy: the wait is read just
    outside the timed window and the thread's CPU time just around it, so at most the
    wall time the thread spent off the CPU (all of the wait where CPU time is unknown)."""
    if cpu_ms is None or not np.isfinite(cpu_ms):
        return run_delay_ms
    return min(run_delay_ms, max(wall_ms - cpu_ms, 0.0))


def wait_inside(row: pd.Series) -> float:
    """The timing thread's run-queue wait that fits inside one row's copy
    (:func:`run_delay_inside` of its ``run_delay_ms``, ``wall_ms``, ``cpu_ms``); NaN where
    the table has no run-queue wait."""
    return run_delay_inside(number(row.get("run_delay_ms")), row["wall_ms"], number(row.get("cpu_ms")))


def busiest_share(df: pd.DataFrame) -> pd.Series:
    """Per row, the share of the other threads' window the busiest of them was on a CPU:
    ``busiest_cpu_ms / others_window_ms`` (schema 4), NaN where not recorded."""
    if not {"busiest_cpu_ms", "others_window_ms"} <= set(df.columns):
        return pd.Series(np.nan, index=df.index)
    window = column(df, "others_window_ms")
    return column(df, "busiest_cpu_ms") / window.where(window > 0)


def wait_baseline(df: pd.DataFrame, by: list, timed: pd.Series) -> pd.Series:
    """Per row, the longest ``longest_wait_ms`` (schema 5) of the timed copies of its group
    (``by``) that were not flagged (every timed copy where ``df`` has no ``is_outlier``); NaN
    where not recorded. ``causes.neighbours`` stores it as ``wait_usual``. A worker's wait tells
    a copy's story only when it is longer than that: in a process whose spinning workers
    outnumber its CPUs, waits of a few ms come with ordinary copies too (reader, session 28: 46
    of 51 copies with a wait of 2 ms or more on data/h200 were not slow; one allocator copy
    waited 7.52 ms and was not flagged, which a 99th percentile left out)."""
    if "longest_wait_ms" not in df.columns:
        return pd.Series(np.nan, index=df.index)
    calm = timed & ~df["is_outlier"].astype(bool) if "is_outlier" in df.columns else timed
    waits = column(df, "longest_wait_ms").where(calm)
    return waits.groupby(by, sort=False).transform("max")


def usual_issue(row: pd.Series, ctx: pd.Series) -> tuple[float, str]:
    """The neighbours' usual time in the timed call (ms) and how the sentence names it: the
    median over copies of this size (``ctx["issue_cell"]``), else the group's usual share
    of its time in the call (``ctx["issue_typ"]``) at this copy's expected time (NaN where
    neither is known). ``causes_crowded`` reads it too.

    Parameters
    ----------
    row
        The row of ``outliers.detect()``'s output (``expected_ms``).
    ctx
        Its row of ``causes.neighbours()`` (``issue_cell``, ``issue_typ``).

    Returns
    -------
    tuple of (float, str)
        The usual time in the call (ms) and the words that say where it came from.
    """
    cell, typ = number(ctx.get("issue_cell")), number(ctx.get("issue_typ"))
    if np.isfinite(cell):
        return cell, f"copies of this size: {cell:.2f} ms, median"
    usual = typ * number(row["expected_ms"])
    return (
        usual,
        f"its neighbours spend {typ:.0%} of their time in the call: {usual:.2f} ms at its expected time",
    )


def in_call_where(row: pd.Series, ctx: pd.Series, wall: float, extra: float) -> str | None:
    """Where a host-side rule's extra time went, in words, or None when the timed call
    (``issue_ms``) did not run at least :data:`MIN_IN_CALL_SHARE` of ``extra`` longer than its
    neighbours' usual call (:func:`usual_issue`), or took longer than the whole copy
    (``issue_ms`` above ``wall``: the clocks contradict each other, no rule). Where the table
    has no ``issue_ms`` (or no usual call time) the whole ``wall`` is the host's and the
    words say so. ``causes_crowded`` reads it too."""
    issue = number(row.get("issue_ms"))
    usual, like = usual_issue(row, ctx)
    if not (np.isfinite(issue) and np.isfinite(usual)):
        return f"the host clock ran {wall:.2f} ms (the table has no time of the call to say more)"
    if issue - usual < MIN_IN_CALL_SHARE * extra or issue > wall:
        return None
    return (
        f"the time went inside the timed call, which took {issue:.2f} ms ({like}), "
        f"then only {wall - issue:.2f} ms waiting for the GPU"
    )


def lagging(row: pd.Series, ctx: pd.Series, extra: float) -> tuple[str, bool]:
    """The other threads' run-queue wait (schema 5, a wait that ended in the copy's window:
    the kernel counts it when the thread runs again, so part of it may precede the copy), in
    words ("" where not recorded), and whether it tells the copy's story: it says :data:`LAGGED`
    only when the longest wait covers at least :data:`MAX_WAIT_SHARE` of ``extra`` and is
    longer than ``ctx["wait_usual"]`` (the waits of its strategy's copies that were not slow:
    :func:`wait_baseline`)."""
    longest, total = number(row.get("longest_wait_ms")), number(row.get("others_wait_ms"))
    usual = number(ctx.get("wait_usual"))
    if not np.isfinite(longest):
        return "", False
    calm = (
        f"; the longest such wait in its strategy's copies that were not slow: {usual:.2f} ms"
        if np.isfinite(usual)
        else ""
    )
    said = f"the longest wait of one of them to run, ending in the window, {longest:.2f} ms ({total:.2f} ms all of them{calm})"
    if longest >= MAX_WAIT_SHARE * extra and np.isfinite(usual) and longest > usual:
        return f"; {said}, {longest / extra:.0%} of the extra {extra:.2f} ms: {LAGGED}", True
    return f"; {said}", False


class HostSide(NamedTuple):
    """What ``host_parallel`` and ``host_crowded`` both read of one flagged copy
    (:func:`host_side`): its clocks, where the time went and what the other threads did."""

    wall: float
    cpu: float
    exp: float
    extra: float
    where: str
    workers: str


def workers_usual(ctx: pd.Series, *, per_run: bool = True) -> str:
    """`` (copies of this size: 9.0 CPUs' worth, the busiest 80%, median)``: the other threads
    in the flagged copy's neighbours (``ctx["others_cell"]``, ``ctx["busiest_cell"]``); where a
    size has one copy (the forum) and ``per_run``, its strategy's copies in the run
    (``others_typ``, ``busiest_typ``); ``""`` where neither is known."""
    cell, busy, like = number(ctx.get("others_cell")), number(ctx.get("busiest_cell")), "copies of this size"
    if per_run and not (np.isfinite(cell) and np.isfinite(busy)):
        cell, busy = number(ctx.get("others_typ")), number(ctx.get("busiest_typ"))
        like = "its strategy's copies in the run"
    if not (np.isfinite(cell) and np.isfinite(busy)):
        return ""
    return f" ({like}: {cell:.1f} CPUs' worth, the busiest {busy:.0%}, median)"


def host_side(
    row: pd.Series, ctx: pd.Series, val: float, wait_ms: float, *, per_run: bool = True
) -> HostSide | None:
    """What the two host-side rules (``host_parallel``, ``host_crowded``) both need of one
    flagged copy, or None where neither can hold: a clock unknown (the other threads' CPU
    time, their window, the busiest thread's CPU time, wall, the timing thread's CPU time,
    its run-queue wait inside the copy ``wait_ms``, the extra time), an empty window or
    wall, no extra time, the other threads below :data:`MIN_OTHERS_CPUS` CPUs' worth, the
    busiest on a CPU for less than :data:`MIN_BUSIEST_SHARE` of the window (or more than
    all of it: one thread cannot run longer), or the timed call not holding the extra
    (:func:`in_call_where`).

    Parameters
    ----------
    row, ctx, val
        As a cause's test takes them (:data:`h2dlab.explain.registry.Test`).
    wait_ms
        The timing thread's run-queue wait that fits inside the copy (:func:`wait_inside`).
    per_run
        Whether the other threads' usual figures fall back to the run's
        (:func:`workers_usual`).

    Returns
    -------
    HostSide or None
        ``workers`` is the sentence's part "beside it the process's other threads ran ...".
    """
    others, window, top = (
        number(row.get(c)) for c in ("others_cpu_ms", "others_window_ms", "busiest_cpu_ms")
    )
    wall, cpu, exp = number(row.get("wall_ms")), number(row.get("cpu_ms")), number(row.get("expected_ms"))
    extra = val - exp
    known = np.isfinite([others, window, top, wall, cpu, wait_ms, extra]).all()
    if not (known and window > 0 and wall > 0 and extra > 0):
        return None
    rate, busy = others / window, top / window
    if rate < MIN_OTHERS_CPUS or not MIN_BUSIEST_SHARE <= busy <= 1:  # above 1: not one thread's time
        return None
    where = in_call_where(row, ctx, wall, extra)
    if where is None:
        return None
    name = str(row.get("busiest_thread", "") or "")
    who = f" ('{name}')" if name else ""
    workers = (
        f"beside it the process's other threads ran {others:.2f} ms of CPU in the {window:.2f} ms window, "
        f"{rate:.1f} CPUs' worth, the busiest{who} on a CPU for {busy:.0%} of the window"
        f"{workers_usual(ctx, per_run=per_run)}"
    )
    return HostSide(wall, cpu, exp, extra, where, workers)


def waited_test(name: str, rule: Callable[..., tuple[str, str] | None]) -> Test:
    """The cause's test (:data:`h2dlab.explain.registry.Test`) of a host-side rule, which
    also takes the timing thread's run-queue wait inside the copy (:func:`wait_inside`)."""
    return said(name, lambda row, ctx, val, slow: rule(row, ctx, val, slow, wait_inside(row)))


def parallel_cause(
    row: pd.Series, ctx: pd.Series, val: float, slow: str, wait_ms: float
) -> tuple[str, str] | None:
    """``host_parallel`` with its evidence sentence for one flagged row, or None.

    It fires, on schema 4's exact clocks only, when the timing thread was on its CPU for
    at least :data:`MIN_ON_CPU` of wall, its run-queue wait inside the copy (``wait_ms``)
    is below :data:`MAX_WAIT_SHARE` of the extra time, the timed call ran at least
    :data:`MIN_IN_CALL_SHARE` of the extra longer than its neighbours' (``ctx["issue_cell"]``,
    else ``issue_typ`` at the expected time; where the table has no ``issue_ms`` the
    whole wall time is the host's), the other threads ran at least :data:`MIN_OTHERS_CPUS`
    CPUs' worth and the busiest of them was on a CPU for at least
    :data:`MIN_BUSIEST_SHARE` of the window (and at most all of it: one thread cannot run longer).

    ``causes_evidence.evidence_cause`` tries it after every rule with direct evidence of
    another story (allocator counters, page faults, the scheduler's wait or sleep, GC,
    other threads far busier than usual) and before ``gpu_shared`` and ``gpu_clock_low``:
    those read the GPU's state once the copy ended and cannot stretch host-side work,
    and a GPU left idle while the host ran long may clock down because of it.

    Parameters
    ----------
    row, ctx, val, slow
        As a cause's test takes them (:data:`h2dlab.explain.registry.Test`): it reads the context's
        ``issue_cell``, ``issue_typ``, ``others_cell``, ``busiest_cell``.
    wait_ms
        As :func:`host_side` takes it (NaN where unmeasured: no rule then).

    Returns
    -------
    tuple of str or None
        ``("host_parallel", evidence)``.
    """
    side = host_side(row, ctx, val, wait_ms)
    if side is None:
        return None
    on_cpu = side.cpu / side.wall
    if on_cpu < MIN_ON_CPU or wait_ms >= MAX_WAIT_SHARE * side.extra:
        return None
    iv, v = number(row.get("nivcsw")), number(row.get("nvcsw"))
    switched = (
        (", no context switch" if iv + v == 0 else f", {int(iv + v)} context switch(es)")
        if np.isfinite(iv + v)
        else ""
    )
    waited = "no wait to run" if wait_ms == 0 else f"{wait_ms:.2f} ms waiting to run"
    lag, lagged = lagging(row, ctx, side.extra)
    head = (
        f"{slow}; {side.where}; the timing thread was on its CPU for {on_cpu:.0%} of wall with {waited}"
        f"{switched}; {side.workers}{lag}"
    )
    if lagged:  # a parallel CPU copy waits at its end for its slowest worker
        return "host_parallel", (
            f"{head} (pin_memory(), torch.cat and copy_ into pinned memory wait at their end for their "
            "slowest worker)"
        )
    # The workers' CPU figures alone are no reason: spinning workers look busy in any long copy.
    return "host_parallel", (
        f"{head}; {AS_USUAL}, with the timing thread running, not why that work ran long, consistent with a "
        "parallel CPU copy (pin_memory(), torch.cat, copy_ into pinned memory) waiting at its end for its "
        "slowest worker, spinning on its CPU; whether one worker lagged (descheduled by the VM's host, say) "
        "or all ran slow, the table cannot say"
    )


#: The cause's entry (``causes_evidence.PER_COPY``: after ``other_threads``, before ``host_crowded``).
HOST_PARALLEL = Cause(
    "host_parallel",
    "the time went into the timed host call while PyTorch's worker threads ran beside it (a parallel CPU "
    "copy waits for its slowest worker)",
    needs=HOST_SIDE_NEEDS,
    test=waited_test("host_parallel", parallel_cause),
)
