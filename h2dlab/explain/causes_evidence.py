"""The per-copy evidence rules of table schemas 2 and 3 (the registry ``PER_COPY``), and what
an unexplained copy rules out.

Schema 2 gives page faults, the timing thread's CPU time, Python GC, other processes on
the GPU and the SM clock; schema 3 adds the scheduler's account of the timing thread
(run-queue wait, context switches, a move to another CPU), every thread's CPU time and
page faults, and ``issue_ms`` (when the timed call returned). ``PER_COPY`` holds one
:class:`~h2dlab.explain.registry.Cause` per rule, tried in this order by ``evidence_cause``:
``page_faults`` (``h2dlab.explain.causes_faults``), ``host_preempted``, ``host_blocked``,
``gc_pause``, ``other_threads`` (``h2dlab.explain.causes_threads``), ``host_parallel``,
``host_crowded`` (schema 4: ``h2dlab.explain.causes_parallel``, ``h2dlab.explain.causes_crowded``),
``gpu_shared``, ``gpu_clock_low``. A missing column makes its rule unavailable (the entry's
``needs``), and so does a NaN in it, never a guess; every rule compares the row with its
neighbours (``causes.neighbours``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from h2dlab.explain.causes_crowded import HOST_CROWDED
from h2dlab.explain.causes_faults import FAULT_SHARE, MIN_EXTRA_FAULTS, PAGE_BYTES, PAGE_FAULTS
from h2dlab.explain.causes_parallel import HOST_PARALLEL, run_delay_inside
from h2dlab.explain.causes_threads import MIN_OTHERS_RATIO, OTHER_THREADS, others_ms, usual_share
from h2dlab.explain.causes_wake import wake_check
from h2dlab.explain.registry import Cause, Registry, said

__all__ = [
    "CHECKS",
    "CLOCK_LOW",
    "EXPLAINED_SHARE",
    "FAULT_SHARE",
    "HOST_BOUND_SHARE",
    "MIN_EXTRA_FAULTS",
    "MIN_OTHERS_RATIO",
    "PAGE_BYTES",
    "PER_COPY",
    "PREEMPTED_SHARE",
    "UNCHECKED",
    "evidence_cause",
    "finite",
    "ruled_out",
    "run_delay_inside",
    "slow_text",
]

#: host_preempted without a run-queue wait (schema 2): the strategy's copies usually spend
#: at least this share of their wall time on the CPU ...
HOST_BOUND_SHARE = 0.5
#: ... and this copy spent at most this share of the usual one on the CPU (wall >= 2x CPU).
PREEMPTED_SHARE = 0.5
#: gpu_clock_low: the SM clock at most this share of the run's median.
CLOCK_LOW = 0.8
#: The checks ``ruled_out`` can make, in the order the evidence lists them.
CHECKS = (
    "pinned block",
    "device segments",
    "empty_cache",
    "page faults",
    "CPU time",
    "run-queue wait",
    "context switches",
    "other threads",
    "GC",
    "SM clock",
    "GPU processes",
    "time in the call",
    "not checked",  # the per-copy checks of UNCHECKED that the table could not make
    "idle gap",
    "stall census",  # added by causes.generic_cause (causes_stall.stall_check), not ruled_out
)
#: Per-copy checks (of ``CHECKS``) an unexplained copy names when its table could not make
#: them, in the words it uses.
UNCHECKED = {
    "page faults": "page faults",
    "CPU time": "the thread's CPU time",
    "GC": "garbage collections",
    "SM clock": "the SM clock",
    "GPU processes": "other processes on the GPU",
}
#: host_preempted / host_blocked (schema 3): the time the thread waited to run, or slept,
#: beyond its neighbours' must cover at least this share of the copy's extra time.
EXPLAINED_SHARE = 0.5


def finite(x: object) -> bool:
    """Whether ``x`` is a finite number (not None, not NaN)."""
    return x is not None and bool(np.isfinite(x))


def slow_text(row: pd.Series, val: float) -> str:
    """``"<val> ms where <expected> ms was expected (<ratio>x)"``, the start of every sentence."""
    exp = row["expected_ms"]
    return f"{val:.2f} ms where {exp:.2f} ms was expected ({val / exp:.1f}x)"


def _get(row: pd.Series, name: str) -> float:
    v = row.get(name, np.nan)
    return np.nan if v is None else float(v)


def _window(row: pd.Series, val: float) -> float:
    """The part of the host's time that could stretch the analysed timing: with CUDA
    events, only what happened before the timed call returned (after it, the GPU stamps
    the end of the copy whatever the host does); else the whole wall time."""
    issue, event = _get(row, "issue_ms"), _get(row, "event_ms")
    return issue if finite(issue) and finite(event) and val == event else row["wall_ms"]


def _switches(row: pd.Series) -> str:
    iv, v, moved = _get(row, "nivcsw"), _get(row, "nvcsw"), _get(row, "cpu_moved")
    parts = []
    if finite(iv) and finite(v):
        parts.append(f"{int(iv)} involuntary and {int(v)} voluntary context switch(es)")
    if finite(moved):
        parts.append("it moved to another CPU" if moved else "it stayed on one CPU")
    return ", ".join(parts)


def _others(row: pd.Series) -> str:
    others, exact = others_ms(row)
    if not finite(others):
        return ""
    how = "" if exact else " by the process clock, which counts them in scheduler ticks"
    return f"; this process's other threads used {others:.2f} ms of CPU meanwhile{how}"


def _scheduler_cause(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> tuple[str, str] | None:
    """host_preempted from the run-queue wait, else host_blocked (schema 3)."""
    exp, wall, cpu = row["expected_ms"], row["wall_ms"], _get(row, "cpu_ms")
    need = EXPLAINED_SHARE * (val - exp)
    window = _window(row, val)
    rd_all = _get(row, "run_delay_ms")
    rd = run_delay_inside(rd_all, wall, cpu)
    rd_typ = ctx["rd_typ"] * exp if finite(ctx["rd_typ"]) else 0.0
    switches = _switches(row)
    inside = (
        f"; the timed call returned after {window:.2f} ms, so the wait fell where it stretched the copy"
        if window != wall
        else ""
    )
    if min(rd - rd_typ, window) >= need:
        part = (
            f" (read around the copy {rd_all:.2f} ms, of which at most wall {wall:.2f} - CPU {cpu:.2f} ms fits in it)"
            if rd_all - rd > max(0.01, 0.01 * rd_all)
            else ""
        )
        return "host_preempted", (
            f"{slow}; the timing thread was ready to run but waited {rd:.2f} ms on a run queue during the "
            f"copy{part} (its neighbours: {rd_typ:.2f} ms at this length){'; ' + switches if switches else ''}: "
            f"another task had its CPU{inside}"
        )
    if not finite(cpu):
        return None
    asleep = max(wall - cpu - rd, 0.0)
    typ = ctx["blocked_typ"] * exp if finite(ctx["blocked_typ"]) else 0.0
    nv = _get(row, "nvcsw")
    if min(asleep - typ, window) >= need and (not finite(nv) or nv >= 1):
        return "host_blocked", (
            f"{slow}; the timing thread was off the CPU without waiting to run for {asleep:.2f} ms (wall "
            f"{wall:.2f} ms = {cpu:.2f} ms on the CPU + {rd:.2f} ms waiting to run + {asleep:.2f} ms asleep; "
            f"its neighbours slept {typ:.2f} ms at this length){'; ' + switches if switches else ''}: it "
            f"slept on a lock, in the kernel or on another thread{_others(row)}{inside}"
        )
    return None


#: The scheduler rule's two answers, each as its cause's test.
_waited, _slept = said("host_preempted", _scheduler_cause), said("host_blocked", _scheduler_cause)


def _preempted(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> str | None:
    """host_preempted: the run-queue wait covers the extra (schema 3, :func:`_scheduler_cause`);
    without a run-queue wait (schema 2), the thread was on its CPU for far less of the copy than
    this strategy's copies are, and its time off the CPU covers the extra."""
    if finite(_get(row, "run_delay_ms")):
        return _waited(row, ctx, val, slow)
    share, typ = ctx["cpu_share"], ctx["cpu_typ"]
    if not (finite(share) and finite(typ) and typ >= HOST_BOUND_SHARE and share <= PREEMPTED_SHARE * typ):
        return None
    exp, wall = row["expected_ms"], row["wall_ms"]
    off = wall - row["cpu_ms"]
    if off - (1 - typ) * exp < 0.5 * (val - exp):
        return None
    return (
        f"{slow}; the host clock ran {wall:.2f} ms but the timing thread was on the CPU for only "
        f"{row['cpu_ms']:.2f} ms of it ({share:.0%}, where this strategy's copies use {typ:.0%}): the "
        f"thread was off the CPU for {off:.2f} ms (preempted or asleep: the table has no run-queue wait "
        f"to tell which)"
    )


def _blocked(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> str | None:
    """host_blocked: asleep beyond its neighbours for the extra (schema 3, :func:`_scheduler_cause`)."""
    return _slept(row, ctx, val, slow) if finite(_get(row, "run_delay_ms")) else None


def _gc(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> str | None:
    """gc_pause: more collections than its neighbours, long enough (where timed) for the extra."""
    exp = row["expected_ms"]
    share, typ = ctx["cpu_share"], ctx["cpu_typ"]
    gc, gtyp, gc_ms = _get(row, "gc_count"), ctx["gc_typ"], _get(row, "gc_ms")
    long_enough = not finite(gc_ms) or gc_ms >= EXPLAINED_SHARE * (val - exp)
    if not (finite(gc) and gc > 0 and (not finite(gtyp) or gc > gtyp) and long_enough):
        return None
    took = f" and took {gc_ms:.2f} ms" if finite(gc_ms) else ""
    cpu = f"; CPU time {share:.0%} of wall (this strategy's copies: {typ:.0%})" if finite(share) else ""
    return (
        f"{slow}; Python's garbage collector ran {int(gc)} time(s) during the copy{took} (its neighbours: "
        f"{0 if not finite(gtyp) else gtyp:g}), pausing the thread that issues it{cpu}"
    )


def _shared(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> str | None:
    """gpu_shared: more other processes on the GPU than the run's copies usually saw."""
    procs, pmed = _get(row, "gpu_procs"), ctx["procs_med"]
    if not (finite(procs) and procs > 0 and (not finite(pmed) or procs > pmed)):
        return None
    return (
        f"{slow}; {int(procs)} other process(es) used the GPU when the copy ended (NVML), where the run's "
        f"copies usually saw {0 if not finite(pmed) else pmed:g}: the copy shared the GPU"
    )


def _clock_low(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> str | None:
    """gpu_clock_low: the SM clock at most :data:`CLOCK_LOW` of the run's median."""
    clock, cmed = _get(row, "sm_clock_mhz"), ctx["clock_med"]
    if not (finite(clock) and finite(cmed) and clock <= CLOCK_LOW * cmed):
        return None
    return (
        f"{slow}; the SM clock read {clock:.0f} MHz after the copy, {clock / cmed:.0%} of the run's median "
        f"{cmed:.0f} MHz: the GPU was clocked down (power or thermal limit, or idling)"
    )


#: The per-copy evidence of table schemas 2 to 5, one entry per cause, in the order tried.
PER_COPY = Registry(
    "per-copy evidence",
    [
        PAGE_FAULTS,
        Cause(
            "host_preempted",
            "the timing thread waited to run while another task had its CPU (its run-queue wait; in "
            "tables without it, wall time far above its CPU time)",
            needs=(("run_delay_ms", "cpu_ms"),),
            test=_preempted,
        ),
        Cause(
            "host_blocked",
            "the timing thread slept during the copy (a lock, the kernel, another thread)",
            needs=("run_delay_ms", "cpu_ms"),
            test=_blocked,
        ),
        Cause("gc_pause", "Python's garbage collector ran during the copy", needs=("gc_count",), test=_gc),
        OTHER_THREADS,
        HOST_PARALLEL,
        HOST_CROWDED,
        Cause(
            "gpu_shared",
            "other processes used the GPU during the copy, more than during its neighbours",
            needs=("gpu_procs",),
            test=_shared,
        ),
        Cause(
            "gpu_clock_low",
            "the GPU's SM clock was well below the run's median",
            needs=("sm_clock_mhz",),
            test=_clock_low,
        ),
    ],
)


def evidence_cause(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> tuple[str, str] | None:
    """The schema-2/3 cause of one flagged row with its evidence sentence, or None: the first
    of :data:`PER_COPY` whose test holds.

    Parameters
    ----------
    row, ctx, val, slow
        As a cause's test takes them (:data:`h2dlab.explain.registry.Test`).

    Returns
    -------
    tuple of str or None
        ``(cause, evidence)``.
    """
    return PER_COPY.first(row, ctx, val, slow)


def ruled_out(row: pd.Series, ctx: pd.Series) -> dict[str, str]:
    """What the table lets us rule out for one copy, check by check, in words that quote
    the numbers (the ``unexplained`` evidence joins them). A check the table cannot make
    (no column, or NaN) is left out; those of ``UNCHECKED`` are named under "not checked".

    Parameters
    ----------
    row, ctx
        As a cause's test takes them (:data:`h2dlab.explain.registry.Test`).

    Returns
    -------
    dict
        Check name (one of :data:`CHECKS`, in that order) to sentence.
    """
    out: dict[str, str] = {}
    dallocs = row["device_allocs"]
    if np.isfinite(row["host_allocs"]) and row["host_allocs"] == 0:
        out["pinned block"] = "no new pinned block"
    if np.isfinite(dallocs):
        out["device segments"] = f"{int(dallocs)} new device segment(s), no more than its neighbours"
    if row["empty_cache"] and not np.isfinite(dallocs):
        out["empty_cache"] = (
            "empty_cache() ran before it, as before every copy of its kind, and the table has no "
            "counters to tell more"
        )
    if finite(ctx["faults"]):
        f = ctx["faults"]
        out["page faults"] = (
            "no page faults" if f == 0 else f"{int(f)} page faults, no more than its neighbours"
        )
    if finite(ctx["cpu_share"]):
        usual = f" (this strategy's copies: {ctx['cpu_typ']:.0%})" if finite(ctx["cpu_typ"]) else ""
        out["CPU time"] = f"CPU time {ctx['cpu_share']:.0%} of wall{usual}"
    rd = _get(row, "run_delay_ms")
    if finite(rd):
        rd_in = run_delay_inside(rd, row["wall_ms"], _get(row, "cpu_ms"))
        out["run-queue wait"] = (
            "no wait to run"
            if rd == 0
            else f"{rd:.3f} ms waiting to run"
            + (f" (at most {rd_in:.3f} ms inside the copy)" if rd - rd_in > max(0.001, 0.01 * rd) else "")
        )
    switches = _switches(row)
    if switches:
        out["context switches"] = switches
    others, exact = others_ms(row)
    if finite(others):
        usual = (
            f" (its neighbours: {ctx['others_typ']:.0%} of their wall time)"
            if finite(ctx["others_typ"])
            else ""
        )
        if exact:
            # Schema 4: the share is over the window the clocks were read in, not the wall
            # time, and the baseline is the one other_threads compares against.
            top, name = _get(row, "busiest_cpu_ms"), row.get("busiest_thread", "")
            who = f", the busiest ({name}) {top:.2f} ms" if name and finite(top) else ""
            window = _get(row, "others_window_ms")
            share, like = usual_share(ctx)
            usual = f" ({like}: {share:.1f} CPUs' worth, median)" if finite(share) else ""
            span = (
                f" in the {window:.2f} ms around it, {others / window:.1f} CPUs' worth"
                if finite(window) and window > 0
                else ""
            )
            out["other threads"] = (
                f"other threads of the process ran {others:.2f} ms of CPU{span}{who}{usual}"
            )
        else:
            out["other threads"] = f"other threads of the process used {others:.2f} ms of CPU{usual}"
    longest = _get(row, "longest_wait_ms")
    if finite(longest):  # schema 5: did a worker lose its CPU to another thread?
        out["other threads"] = out.get("other threads", "other threads of the process") + (
            f"; the longest any of them waited to run {longest:.2f} ms"
        )
    gc = _get(row, "gc_count")
    if finite(gc):
        out["GC"] = "no GC" if gc == 0 else f"{int(gc)} GC, as usual"
    clock = _get(row, "sm_clock_mhz")
    if finite(clock):
        out["SM clock"] = f"SM clock {clock:.0f} MHz (run median {ctx['clock_med']:.0f} MHz)"
    procs = _get(row, "gpu_procs")
    if finite(procs):
        out["GPU processes"] = (
            "no other process on the GPU"
            if procs == 0
            else f"{int(procs)} other process(es) on the GPU, as usual"
        )
    issue, wall = _get(row, "issue_ms"), row["wall_ms"]
    if finite(issue) and finite(ctx["issue_typ"]):
        then = (  # a call longer than the whole copy: the clocks disagree, no negative wait
            f"then {wall - issue:.2f} ms waiting for the GPU"
            if issue <= wall
            else f"longer than the copy's {wall:.2f} ms wall time (the two clocks disagree)"
        )
        out["time in the call"] = (
            f"{issue:.2f} ms in the timed call (its neighbours: {ctx['issue_typ']:.0%} of their time), {then}"
        )
    if missing := ", ".join(words for check, words in UNCHECKED.items() if check not in out):
        out["not checked"] = f"not recorded for it, so not checked: {missing}"
    if idle := wake_check(row, ctx):
        out["idle gap"] = idle
    return out
