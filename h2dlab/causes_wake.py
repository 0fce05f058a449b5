"""The ``gpu_wake`` rule: a small copy is slow when the GPU sat idle just before it.

The first work after the GPU idles pays for waking it. A probe outside the kit first
showed it on the H200; the kit measures it itself with ``h2dlab measure --pause MS`` (the
``idle`` kind of a recording: the timer wakes the GPU, spins MS ms with it idle, then
times the copy). How long an idle GPU takes to need waking, and what the wake-up costs,
is a property of the machine and even of the VM's boot: one H200 boot showed it after
2 ms, the kit's own recording on another after 10 ms but not after 3 ms. So the rule uses
only a :class:`WakeCalibration` made from idle runs recorded beside the table
(``factors_idle.wake_calibration``, attached by ``datasets.load`` as
``attrs["wake_calibration"]``); without one, ``gpu_wake`` never fires.

The table records no GPU idle time, but it records when each copy's timing began
(``t_s``) and how long it took (``wall_ms``): :func:`idle_gap_ms` is the host time from
the end of the previous timed copy to the start of this one (or a run's ``--pause``).
:func:`wake_cause` names a flagged copy ``gpu_wake`` when that gap is at least the
calibration's ``idle_ms`` and the copy's extra time at most its ``extra_ms``;
``outliers.explain`` tries it after every rule with direct evidence and after the episode
search, so it only names copies nothing else explains. :func:`wake_check` is what an
``unexplained`` copy's evidence says about it.

This module imports only :mod:`h2dlab.spec` of the kit (``causes_evidence`` imports it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from h2dlab.rows import number
from h2dlab.spec import MAX_PAUSE_MS

__all__ = [
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
    """

    idle_ms: float | None
    extra_ms: float | None
    pauses: tuple[float, ...]
    shares: tuple[float, ...]
    source: str
    slow_ratio: float
    min_share: float

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


def idle_gap_ms(df: pd.DataFrame, pauses: dict[object, float] | None = None) -> pd.Series:
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

    A run measured with ``--pause MS`` (see :func:`run_pauses`) is different: its timer
    woke the GPU after ``t_s`` and then spun MS ms with the GPU idle before the copy, so
    every row it timed (finite ``wall_ms``) gets MS, the first one too (the GPU idled that
    plus the counter reads, about 0.1-0.2 ms); a row it did not time keeps its host gap.

    Parameters
    ----------
    df
        A measurement table with ``run_id`` and ``wall_ms``; ``t_s`` (seconds on the run's
        host clock when the copy's timing began) where recorded.
    pauses
        run_id to pause (ms) for runs measured with ``--pause``; None (the default) reads
        them from ``df.attrs`` (:func:`run_pauses`).

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
    pauses = run_pauses(df) if pauses is None else pauses
    if "t_s" not in df.columns or df.empty:
        return _paused(df, pd.Series(out, index=df.index, name="idle_gap_ms"), pauses)
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
    return _paused(df, pd.Series(out, index=df.index, name="idle_gap_ms"), pauses)


def _paused(df: pd.DataFrame, gap: pd.Series, pauses: dict[object, float]) -> pd.Series:
    """``gap`` with each timed row of a paused run set to its run's pause."""
    if not pauses:
        return gap
    pause = df["run_id"].map(pauses).astype(float)
    ran = np.isfinite(pd.to_numeric(df["wall_ms"], errors="coerce").astype(float))
    return gap.where(~(pause.notna() & ran), pause)


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
    """The :class:`WakeCalibration` in a row of ``causes.neighbours()`` (``ctx["wake"]``),
    or None when the table has no idle runs beside it."""
    cal = ctx.get("wake")
    return cal if isinstance(cal, WakeCalibration) else None


def _calibrated(cal: WakeCalibration) -> str:
    return (
        f"in this machine's idle runs, after pauses of {cal.idle_ms:g} ms, {cal.share_at(cal.idle_ms):.0%} "
        f"of the smallest copies took at least {cal.slow_ratio:g}x their median right after a wake, and the "
        f"slowest tenth at most {cal.extra_ms:.2f} ms more ({cal.source})"
    )


def wake_cause(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> tuple[str, str] | None:
    """``gpu_wake`` with its evidence sentence for one flagged row, or None.

    It fires only with a calibration (``ctx["wake"]``, a :class:`WakeCalibration` whose
    ``idle_ms`` is not None): when the row's idle gap (``ctx["idle_gap_ms"]``,
    :func:`idle_gap_ms`) is at least its ``idle_ms`` and the row's extra time
    ``val - row["expected_ms"]`` is above 0 and at most its ``extra_ms``. The caller tries
    it only when no other cause applies: the gap makes a wake-up likely, not certain.

    Parameters
    ----------
    row
        The row of ``outliers.detect()``'s output.
    ctx
        Its row of ``causes.neighbours()``.
    val
        Its timing in ms (``rows.value_ms``).
    slow
        ``causes_evidence.slow_text(row, val)``, the start of the sentence.

    Returns
    -------
    tuple of str or None
        ``("gpu_wake", evidence)``.
    """
    cal = calibration_of(ctx)
    if cal is None or cal.idle_ms is None or cal.extra_ms is None:
        return None
    gap, extra = number(ctx.get("idle_gap_ms")), val - number(row["expected_ms"])
    if not (np.isfinite(gap) and gap >= cal.idle_ms and 0 < extra <= cal.extra_ms):
        return None
    since = (
        "the run's --pause: the GPU was woken, then left idle"
        if ctx.get("idle_paused", False)
        else "host time since the previous copy ended"
    )
    return "gpu_wake", (
        f"{slow}; the GPU had sat idle {gap:.2f} ms before it ({since}), and the extra {extra:.2f} ms is "
        f"within what a wake-up costs: {_calibrated(cal)}; the first work after an idle spell can pay a "
        f"wake-up (of the GPU, its PCIe link or the driver: these columns cannot say which); the gap makes a "
        f"wake-up likely, not certain, and no other evidence points anywhere"
        f"{_issue_text(row, ctx)}"
    )


def wake_check(row: pd.Series, ctx: pd.Series) -> str | None:
    """What the idle gap rules out for one copy, in words that quote the numbers, or
    None where the gap or the timing is unknown (``causes_evidence.ruled_out``'s
    ``idle gap`` check). Without a calibration (``ctx["wake"]``) it says that no idle
    runs tell what a pause costs on this machine.

    Parameters
    ----------
    row
        The row of ``outliers.detect()``'s output.
    ctx
        Its row of ``causes.neighbours()``.

    Returns
    -------
    str or None
        E.g. ``"host time since the previous copy ended 3.60 ms (the GPU idle at most
        that), under the 10 ms after which this machine's idle runs show a wake-up"``.
    """
    gap = number(ctx.get("idle_gap_ms"))
    event, wall = number(row.get("event_ms")), number(row.get("wall_ms"))
    extra = (event if np.isfinite(event) else wall) - number(row.get("expected_ms"))
    if not np.isfinite(gap):
        return None
    if gap < 0:
        return f"no idle time before it (its timing began {-gap:.2f} ms before the previous copy ended)"
    idle = (
        f"the GPU idle {gap:.2f} ms before it (the run's --pause)"
        if ctx.get("idle_paused", False)
        else f"host time since the previous copy ended {gap:.2f} ms (the GPU idle at most that)"
    )
    cal = calibration_of(ctx)
    if cal is None:
        return f"{idle}; no idle runs recorded beside this table to tell what a pause costs on this machine"
    if cal.idle_ms is None or cal.extra_ms is None:
        return (
            f"{idle}; this machine's idle runs show no wake-up cost after pauses up to {max(cal.pauses):g} ms "
            f"({cal.source})"
        )
    if gap < cal.idle_ms:
        return f"{idle}, under the {cal.idle_ms:g} ms after which this machine's idle runs show a wake-up"
    if not np.isfinite(extra):
        return None
    if extra > cal.extra_ms:
        return (
            f"{idle}, but the extra {extra:.2f} ms is more than the {cal.extra_ms:.2f} ms a wake-up cost in the "
            f"idle runs"
        )
    return f"{idle}: long enough for a wake-up, which can cost the extra {extra:.2f} ms"
