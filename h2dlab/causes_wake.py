"""The ``gpu_wake`` rule: a small copy is slow when the GPU sat idle just before it.

A probe on the H200 (4 KiB pinned copies timed with CUDA events) found that the first
work after the GPU idles a few milliseconds pays for waking it: back to back a copy took
a median 11 us; after the host busy-waited 0.5-2 ms, 15 us; after 3 ms, 30 us (half of
the copies at least 30 us); after 10 ms, 53 us, and the host call itself 98 us. NVML saw
no change of SM or memory clock, P-state or PCIe link. h2dlab's measuring loop spends a
few ms between copies, about that threshold, so some of its small copies pay the
wake-up and others do not.

The table records no GPU idle time, but it records when each copy's timing began
(``t_s``) and how long it took (``wall_ms``): :func:`idle_gap_ms` is the host time from
the end of the previous timed copy to the start of this one. :func:`wake_cause` names a
flagged copy ``gpu_wake`` when that gap is at least :data:`WAKE_IDLE_MS` and the copy's
extra time is at most :data:`WAKE_EXTRA_MS`; ``outliers.explain`` tries it after every
rule with direct evidence and after the episode search, so it only names copies nothing
else explains. :func:`wake_check` is what an ``unexplained`` copy's evidence says about it.

This module imports no other module of the kit (``causes_evidence`` imports it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = [
    "TIMELINE_COLUMNS",
    "WAKE_EXTRA_MS",
    "WAKE_IDLE_MS",
    "idle_gap_ms",
    "run_pauses",
    "wake_cause",
    "wake_check",
]

#: gpu_wake: the host time since the previous copy ended (ms) is at least this ...
WAKE_IDLE_MS = 2.0
#: ... and the copy's extra time (its timing less the expected) at most this many ms: what
#: a wake-up can cost.
WAKE_EXTRA_MS = 0.25
#: The columns whose values make one timeline of copies, where the table has them: the
#: run, and in a concurrent run the process count and the GPU (each GPU's copies have
#: their own clock and do not wake another GPU).
TIMELINE_COLUMNS = ("run_id", "world", "gpu")


def _num(x: object) -> float:
    try:
        return float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return np.nan


def run_pauses(df: pd.DataFrame) -> dict[object, float]:
    """The runs of ``df`` measured with ``--pause MS``: run_id to its pause (ms), read from
    each run's env.json (``df.attrs["envs"][run_id]["spec"]["pause_ms"]``); runs without
    one are left out.

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
        v = _num(((env or {}).get("spec") or {}).get("pause_ms"))
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
    issue, wall = _num(row.get("issue_ms")), _num(row.get("wall_ms"))
    if not np.isfinite(issue):
        return ""
    cell, typ = _num(ctx.get("issue_cell")), _num(ctx.get("issue_typ"))
    if np.isfinite(cell):
        return f"; the timed call itself took {issue:.2f} ms where its neighbours' of this size took {cell:.2f} ms (median)"
    if np.isfinite(typ) and wall > 0:
        return (
            f"; the timed call itself took {issue:.2f} ms, {issue / wall:.0%} of its time, where its neighbours' "
            f"took {typ:.0%} of theirs"
        )
    return ""


def wake_cause(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> tuple[str, str] | None:
    """``gpu_wake`` with its evidence sentence for one flagged row, or None.

    It fires when the row's idle gap (``ctx["idle_gap_ms"]``, :func:`idle_gap_ms`) is at
    least :data:`WAKE_IDLE_MS` and its extra time ``val - row["expected_ms"]`` is above 0
    and at most :data:`WAKE_EXTRA_MS`. The caller tries it only when no other cause
    applies: the gap makes a wake-up likely, not certain.

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
    gap, extra = _num(ctx.get("idle_gap_ms")), val - _num(row["expected_ms"])
    if not (np.isfinite(gap) and gap >= WAKE_IDLE_MS and 0 < extra <= WAKE_EXTRA_MS):
        return None
    since = (
        "the run's --pause: the GPU was woken, then left idle"
        if ctx.get("idle_paused", False)
        else "host time since the previous copy ended"
    )
    return "gpu_wake", (
        f"{slow}; the GPU had sat idle {gap:.2f} ms before it ({since}), and "
        f"the extra {extra:.2f} ms is within the {WAKE_EXTRA_MS:.2f} ms a wake-up costs: the first work after the "
        f"GPU idles a few ms pays for waking it (NVML shows no change of clock, P-state or PCIe link); the gap "
        f"makes a wake-up likely, not certain, and no other evidence points anywhere{_issue_text(row, ctx)}"
    )


def wake_check(row: pd.Series, ctx: pd.Series) -> str | None:
    """What the idle gap rules out for one copy, in words that quote the numbers, or
    None where the gap or the timing is unknown (``causes_evidence.ruled_out``'s
    ``idle gap`` check).

    Parameters
    ----------
    row
        The row of ``outliers.detect()``'s output.
    ctx
        Its row of ``causes.neighbours()``.

    Returns
    -------
    str or None
        E.g. ``"the GPU idle 0.40 ms before it (too short for a wake-up: under 2 ms)"``.
    """
    gap = _num(ctx.get("idle_gap_ms"))
    event, wall = _num(row.get("event_ms")), _num(row.get("wall_ms"))
    extra = (event if np.isfinite(event) else wall) - _num(row.get("expected_ms"))
    if not np.isfinite(gap):
        return None
    if gap < 0:
        return f"no idle time before it (its timing began {-gap:.2f} ms before the previous copy ended)"
    idle = f"the GPU idle {gap:.2f} ms before it"
    if gap < WAKE_IDLE_MS:
        return f"{idle} (too short for a wake-up: under {WAKE_IDLE_MS:g} ms)"
    if not np.isfinite(extra):
        return None
    if extra > WAKE_EXTRA_MS:
        return f"{idle}, but the extra {extra:.2f} ms is more than a wake-up's {WAKE_EXTRA_MS:.2f} ms"
    return f"{idle}: long enough for a wake-up, which can cost the extra {extra:.2f} ms"
