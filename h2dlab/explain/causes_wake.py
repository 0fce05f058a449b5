"""The ``gpu_wake`` rule: a small copy a little slow when no copy ran for a while before it.

A longer gap since the previous copy goes with a slower small copy, consistent with some
part (the GPU's copy engine, its PCIe link, the driver, the host) waking up; the tables
cannot say which, nor prove the mechanism. The kit measures it with ``h2dlab measure
--pause MS`` (the ``idle`` kind of a recording: the timer submits a tiny GPU operation and
waits for it, spins MS ms with the GPU idle, then times the copy). That submission does
not remove the cost: a probe on the H200 (kit commit b0713c3, host clock) timed 64 KiB
pageable copies through the kit's timer with a zero pause, the submission right before
each copy: a median 108 us after 3 ms of spinning since the previous copy, 186 us after
100 ms; and in the recorded idle runs the copy after a 82-109 ms gap (a garbage
collection in the loop, see ``gc_steady``) was slow even in the runs with pauses of 0-3
ms. So the gap is measured from the previous *copy*; it is not the only factor (in the
same probe, sleeping 3 ms instead of spinning made the copy slower too). When the cost
starts, and what it is, varies between machines and between recordings of one machine:
so the rule uses only a :class:`WakeCalibration` made from idle runs recorded on the
copy's machine (``factors_idle.wake_calibration``, attached per run by
``wake_source.attach``); without one, ``gpu_wake`` never fires.

The table records when each copy's timing began (``t_s``) and how long it took
(``wall_ms``): :func:`idle_gap_ms` is the host time from the end of the previous timed
copy to the start of this one, in every run, paused or not (a paused run's gaps hold its
pause and the loop's own work). :func:`wake_cause` names a flagged copy ``gpu_wake`` when
that gap is at least the calibration's ``gap_ms`` (the gap its idle runs showed the cost
at) and the copy's extra time at most its ``extra_ms``; ``outliers.explain`` tries it
after every rule with direct evidence and after the episode search, so it only names
copies nothing else explains. :func:`wake_check` is what an ``unexplained`` copy's
evidence says about it. Of the kit, this imports only ``spec`` and ``rows``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from h2dlab.explain.registry import Cause, said
from h2dlab.explain.rows import number
from h2dlab.measure.spec import MAX_PAUSE_MS

__all__ = [
    "GPU_WAKE",
    "TIMELINE_COLUMNS",
    "WakeCalibration",
    "calibration_of",
    "idle_gap_ms",
    "pause_of",
    "run_pauses",
    "wake_cause",
    "wake_check",
]

#: The columns whose values make one timeline of copies, where the table has them: the
#: run, and in a concurrent run the process count and the GPU (each GPU's copies have
#: their own clock and do not wake another GPU).
TIMELINE_COLUMNS = ("run_id", "world", "gpu")


@dataclass(frozen=True)
class WakeCalibration:
    """What a pause with the GPU idle cost the next copy on one machine, from its idle
    runs (``factors_idle.wake_calibration`` makes it).

    Attributes
    ----------
    idle_ms
        The shortest recorded pause after which, for every strategy, at least
        ``min_share`` of the smallest size's copies took ``slow_ratio`` times their
        median after the shortest pause; None when no pause did (no wake-up cost shown).
    extra_ms
        Over the cells after pauses of at least ``idle_ms``, the largest p90 less the
        same cell's median after the shortest pause; None with ``idle_ms``.
    pauses
        The recorded pauses (ms), ascending.
    shares
        Per pause, the smallest share over strategies of the smallest size's copies at
        least ``slow_ratio`` times that median.
    source
        Which runs it was made from, in words.
    slow_ratio, min_share
        The thresholds it was made with.
    gap_ms
        The median host time from the end of one copy to the start of the next
        (:func:`idle_gap_ms`) over the timed copies after pauses of ``idle_ms``: the pause
        plus the loop's own work between copies, and the gap from which :func:`wake_cause`
        names a copy ``gpu_wake``. None with ``idle_ms``, or where the idle runs record no
        start times (the pause itself is then the threshold: :attr:`threshold_ms`).
    """

    idle_ms: float | None
    extra_ms: float | None
    pauses: tuple[float, ...]
    shares: tuple[float, ...]
    source: str
    slow_ratio: float
    min_share: float
    gap_ms: float | None = None

    @property
    def threshold_ms(self) -> float | None:
        """The gap (ms) from which a copy may be ``gpu_wake``: ``gap_ms``, else ``idle_ms``."""
        return self.gap_ms if self.gap_ms is not None else self.idle_ms

    def share_at(self, pause: float) -> float:
        """The share (see ``shares``) after ``pause`` ms, NaN for a pause not recorded."""
        return dict(zip(self.pauses, self.shares, strict=True)).get(pause, np.nan)


def pause_of(env: object) -> float:
    """The pause (ms) a run's env.json records (``spec.pause_ms``), NaN when it records
    none or one ``measure --pause`` could not have taken: not a number (a string, a list,
    a bool...), or outside 0 to :data:`spec.MAX_PAUSE_MS`. Never raises."""
    spec = env.get("spec") if isinstance(env, dict) else None
    v = spec.get("pause_ms") if isinstance(spec, dict) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_PAUSE_MS:
        return np.nan  # NaN fails the range check too
    return float(v) + 0.0  # -0 is 0


def run_pauses(df: pd.DataFrame) -> dict[object, float]:
    """The runs of ``df`` measured with ``--pause MS``: run_id to its pause (ms), read from
    each run's env.json (``df.attrs["envs"][run_id]["spec"]["pause_ms"]``, see
    :func:`pause_of`); runs without one, or with one no run could have taken, are left out.

    Parameters
    ----------
    df
        A measurement table as ``datasets.load`` returns it (its ``attrs`` hold ``envs``).

    Returns
    -------
    dict
        run_id to pause in ms (empty when no run paused or the table carries no envs).
    """
    out: dict[object, float] = {}
    for run_id, env in (df.attrs.get("envs") or {}).items():
        v = pause_of(env)
        if np.isfinite(v):
            out[run_id] = v
    return out


def idle_gap_ms(df: pd.DataFrame) -> pd.Series:
    """Per row, the host time (ms) between the end of the previous timed copy of its run
    and the start of this one's timing.

    Within one run (``run_id``; and ``world`` and ``gpu`` where the table has them, see
    :data:`TIMELINE_COLUMNS`), in time order: ``1000 * (t_s - t_s_prev) - wall_ms_prev``,
    where the previous row is the latest row of the run with a finite ``t_s`` and
    ``wall_ms`` that began strictly earlier. Warm-up rows and rows with an error count as
    previous rows when they have both (they ran on the GPU); a row without a finite
    ``wall_ms`` ran nothing that was timed and is passed over. Rows that began at the same
    instant (a bidirectional copy's two directions) are one operation, ending with the
    longest. The result does not depend on the rows' order in ``df``.

    It is an upper bound on how long the GPU sat idle before the copy, when nothing ran on
    it in between: the measuring loop's own work between copies can touch the GPU (a
    strategy's preparation for its next size, ``empty_cache()``, the byte-wise check of a
    cell's first copy, which copies it back), and so can a live recording's other
    threads. A negative gap means this copy's timing began before the previous one ended
    (overlapping copies).

    A run measured with ``--pause MS`` (see :func:`run_pauses`) is measured the same way:
    its timer spins MS ms after ``t_s`` and before the copy, every row alike, so the
    difference of two rows' ``t_s`` still spans the previous copy's end to this copy's
    start, pause included (a run with MS 10 shows gaps of about 10 ms plus the loop's own
    work). The pause is not substituted: the tiny GPU submission the timer makes before
    the pause does not undo what a spell without copies costs (see the module's notes).

    Parameters
    ----------
    df
        A measurement table with ``run_id`` and ``wall_ms``; ``t_s`` (seconds on the run's
        host clock when the copy's timing began) where recorded.

    Returns
    -------
    pandas.Series
        Milliseconds, on ``df``'s index; NaN for a run's first row (no earlier row with a
        finite ``t_s`` and ``wall_ms``), for a row whose ``t_s`` is not finite, and
        everywhere when ``df`` has no ``t_s`` column.

    Raises
    ------
    ValueError
        ``df`` lacks ``run_id`` or ``wall_ms``.
    """
    missing = [c for c in ("run_id", "wall_ms") if c not in df.columns]
    if missing:
        raise ValueError(f"idle_gap_ms needs the column(s) {', '.join(missing)}")
    out = np.full(len(df), np.nan)
    if "t_s" not in df.columns or df.empty:
        return pd.Series(out, index=df.index, name="idle_gap_ms")
    t = pd.to_numeric(df["t_s"], errors="coerce").to_numpy(float)
    wall = pd.to_numeric(df["wall_ms"], errors="coerce").to_numpy(float)
    keys = [c for c in TIMELINE_COLUMNS if c in df.columns]
    run = df.groupby(keys, sort=False, dropna=False).ngroup().to_numpy(np.int64)
    ended = np.isfinite(t) & np.isfinite(wall)
    # Each run's operations: one per start time, ending with its longest row.
    ops = (
        pd.DataFrame({"run": run[ended], "t": t[ended], "w": wall[ended]})
        .groupby(["run", "t"], sort=False)["w"]
        .max()
        .reset_index()
        .assign(t_prev=lambda d: d["t"])
        .sort_values("t", kind="stable")
    )
    has_t = np.flatnonzero(np.isfinite(t))
    rows = pd.DataFrame({"run": run[has_t], "t": t[has_t], "pos": has_t}).sort_values("t", kind="stable")
    prev = pd.merge_asof(rows, ops, on="t", by="run", allow_exact_matches=False, direction="backward")
    out[prev["pos"].to_numpy(int)] = 1000.0 * (prev["t"] - prev["t_prev"]).to_numpy(float) - prev[
        "w"
    ].to_numpy(float)
    return pd.Series(out, index=df.index, name="idle_gap_ms")


def _issue_text(row: pd.Series, ctx: pd.Series) -> str:
    """How long the timed call took beside its neighbours' (``issue_ms``), or ``""``."""
    issue, wall = number(row.get("issue_ms")), number(row.get("wall_ms"))
    if not np.isfinite(issue):
        return ""
    cell, typ = number(ctx.get("issue_cell")), number(ctx.get("issue_typ"))
    if np.isfinite(cell):
        return f"; the timed call itself took {issue:.2f} ms where its neighbours' of this size took {cell:.2f} ms (median)"
    if np.isfinite(typ) and wall > 0:
        return (
            f"; the timed call itself took {issue:.2f} ms, {issue / wall:.0%} of its time, where its neighbours' "
            f"took {typ:.0%} of theirs"
        )
    return ""


def calibration_of(ctx: pd.Series) -> WakeCalibration | None:
    """The :class:`WakeCalibration` in a row of ``causes.neighbours()`` (``ctx["wake"]``), or
    None where the row's run has none (``ctx["wake"]`` is then None or says why, in words)."""
    cal = ctx.get("wake")
    return cal if isinstance(cal, WakeCalibration) else None


def _calibrated(cal: WakeCalibration) -> str:
    between = (
        f" (a median {cal.gap_ms:.2f} ms from the end of one copy to the start of the next, with the loop's own work)"
        if cal.gap_ms is not None
        else ""
    )
    return (
        f"in this machine's idle runs, after pauses of {cal.idle_ms:g} ms{between}, "
        f"{cal.share_at(cal.idle_ms):.0%} of the smallest copies took at least {cal.slow_ratio:g}x their median "
        f"after the shortest pause, and every cell's 90th percentile at most {cal.extra_ms:.2f} ms above its "
        f"median after the shortest pause ({cal.source})"
    )


def _gap_text(gap: float, ctx: pd.Series) -> str:
    """The idle gap in words: host time since the previous copy ended, and how much of it
    was the run's ``--pause`` (``ctx["idle_pause_ms"]``) where it paused and the gap holds it."""
    pause = number(ctx.get("idle_pause_ms"))
    held = f" ({pause:g} ms of it the run's --pause)" if np.isfinite(pause) and pause <= gap else ""
    return f"host time since the previous copy ended {gap:.2f} ms{held}"


def wake_cause(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> tuple[str, str] | None:
    """``gpu_wake`` with its evidence sentence for one flagged row, or None.

    It fires only with a calibration (``ctx["wake"]``, a :class:`WakeCalibration` whose
    ``idle_ms`` is not None): when the row's idle gap (``ctx["idle_gap_ms"]``,
    :func:`idle_gap_ms`) is at least its :attr:`~WakeCalibration.threshold_ms` and the
    row's extra time ``val - row["expected_ms"]`` is above 0 and at most its ``extra_ms``.
    The caller tries it only when no other cause applies: the gap makes a wake-up likely,
    not certain.

    Parameters
    ----------
    row, ctx, val, slow
        As a cause's test takes them (:data:`h2dlab.explain.registry.Test`).

    Returns
    -------
    tuple of str or None
        ``("gpu_wake", evidence)``.
    """
    cal = calibration_of(ctx)
    if cal is None or cal.idle_ms is None or cal.extra_ms is None:
        return None
    gap, extra = number(ctx.get("idle_gap_ms")), val - number(row["expected_ms"])
    if not (np.isfinite(gap) and gap >= cal.threshold_ms and 0 < extra <= cal.extra_ms):
        return None
    return "gpu_wake", (
        f"{slow}; {_gap_text(gap, ctx)}, and the extra {extra:.2f} ms is within what a wake-up costs: "
        f"{_calibrated(cal)}; the first copy after a spell without copies can pay a wake-up (of the GPU's "
        f"copy engine, its PCIe link, the driver or the host: these columns cannot say which); the gap makes "
        f"a wake-up likely, not certain, and no other evidence points anywhere"
        f"{_issue_text(row, ctx)}"
    )


def wake_check(row: pd.Series, ctx: pd.Series) -> str | None:
    """What the idle gap rules out for one copy, in words that quote the numbers, or
    None where the gap or the timing is unknown (``causes_evidence.ruled_out``'s
    ``idle gap`` check). Without a calibration it gives the reason ``ctx["wake"]`` holds
    (a str), else says that no idle runs tell what a pause costs on this machine.

    Parameters
    ----------
    row, ctx
        As a cause's test takes them (:data:`h2dlab.explain.registry.Test`).

    Returns
    -------
    str or None
        E.g. ``"host time since the previous copy ended 3.60 ms, under the 12.86 ms
        between copies after which this machine's idle runs show a wake-up (...)"``.
    """
    gap = number(ctx.get("idle_gap_ms"))
    event, wall = number(row.get("event_ms")), number(row.get("wall_ms"))
    extra = (event if np.isfinite(event) else wall) - number(row.get("expected_ms"))
    if not np.isfinite(gap):
        return None
    if gap < 0:
        return f"no idle time before it (its timing began {-gap:.2f} ms before the previous copy ended)"
    idle = _gap_text(gap, ctx)
    cal = calibration_of(ctx)
    if cal is None:
        why = ctx.get("wake")
        return f"{idle}; {why if isinstance(why, str) else 'no idle runs recorded beside this table to tell what a pause costs on this machine'}"
    if cal.idle_ms is None or cal.extra_ms is None:
        return (
            f"{idle}; this machine's idle runs show no wake-up cost after pauses up to {max(cal.pauses):g} ms "
            f"({cal.source})"
        )
    if gap < cal.threshold_ms:
        return (
            f"{idle}, under the {cal.threshold_ms:.2f} ms between copies after which this machine's idle runs "
            f"show a wake-up (at least {cal.min_share:.0%} of each strategy's smallest copies {cal.slow_ratio:g}x slow)"
        )
    if not np.isfinite(extra):
        return None
    if extra > cal.extra_ms:
        return (
            f"{idle}, but the extra {extra:.2f} ms is more than the {cal.extra_ms:.2f} ms a wake-up cost in the "
            f"idle runs"
        )
    return f"{idle}: long enough for a wake-up, which can cost the extra {extra:.2f} ms"


#: The cause's entry (``causes.LIKELY``, tried first: after the episode search).
GPU_WAKE = Cause(
    "gpu_wake",
    "a small copy a little slow after a spell without copies, consistent with some part waking up (the GPU's "
    "copy engine, its PCIe link, the driver or the host: not shown which); named only where idle runs "
    "recorded beside the table show after how long a spell, and at what cost (likely, not certain: only the "
    "gap points to it)",
    needs=("t_s",),
    test=said("gpu_wake", wake_cause),
)
