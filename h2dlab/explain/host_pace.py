"""Stretches of a run in which the host itself ran slow, told by the kit's own loop.

Between two timed copies the measuring loop does the same small host work each time:
write the row, read the counters, prepare the next copy. How long that takes (the idle gap
since the previous copy ended, ``causes_wake.idle_gap_ms``) is a clock of the host's pace
that no copy's timing touches. On the lent H200 it showed stretches of several seconds in
which the loop's gaps ran 1.4-1.6x their run's median while copies of every strategy and
size ran slower too (plan 3's ``sweep/pow2-interleaved`` at commit 1fb1d2d from about 28 s
on: a median gap 2.27 -> 3.31 ms, small copies 0.75x -> 1.05x their cell's median; the
recording at commit 250f304 from 31.71 s to 35.70 s: median gaps of 25 copies about 2.7 ->
4.3 ms, copies a median 1.20x their expected time against 0.97x elsewhere): the host CPU ran slower for a while, whatever was copied.

:func:`slow_stretches` finds them: per timeline, in time order, the rolling median of the
gaps over :data:`WINDOW` timed copies; where it is at least :data:`GAP_RATIO` times the
run's usual pace for at least :data:`MIN_ROWS` copies in a row, that is a candidate, kept
where the gaps before its copies were longer than before copies of the same cell elsewhere
and its copies took a median at least :data:`MIN_SLOWER` times their expected time over
the copies elsewhere (:func:`slow_stretches` says how). ``outliers.explain`` makes a flagged copy with no direct evidence in
such a stretch an ``episode``, as it does a copy in a stretch of slow copies the
change-point search finds; the sentence says how many of the stretch's flagged copies the
rest of the run's rate would have given.
Of the kit, this imports only ``causes_wake`` (for the gaps) and ``rows``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from h2dlab.explain.causes_wake import TIMELINE_COLUMNS, idle_gap_ms
from h2dlab.explain.rows import check_values

__all__ = [
    "BASE_QUANTILE",
    "GAP_RATIO",
    "MIN_ROWS",
    "MIN_SLOWER",
    "WINDOW",
    "PaceStretch",
    "pace_text",
    "slow_stretches",
]

#: Timed copies in the rolling median of the loop's gaps.
WINDOW = 25
#: A stretch's rolling median gap is at least this times the run's usual pace (below).
GAP_RATIO = 1.3
#: The run's usual pace is this quantile of the rolling median of its gaps.
BASE_QUANTILE = 0.25
#: ... for at least this many timed copies in a row.
MIN_ROWS = 20
#: The copies in it took a median at least this times their expected time over the others'.
MIN_SLOWER = 1.1
#: ... and its copies were flagged at least this many times as often as the others.
MIN_FLAG_RATE = 2.0


@dataclass(frozen=True)
class PaceStretch:
    """A stretch of a run's timeline in which the loop's gaps and the copies both ran slow."""

    rows: tuple  #: the index labels of its timed copies, in time order
    start_s: float  #: ``t_s`` of its first copy
    end_s: float  #: ``t_s`` of its last copy
    gap: float  #: the median of its gaps over the usual gap before a copy of the same cell elsewhere
    compared: int  #: how many of its copies had copies of their cell elsewhere to compare with
    ratio: float  #: the median copy's time over its expected time in it
    ratio_elsewhere: float  #: ... in the rest of the run
    flagged: int  #: how many of its copies were flagged slow
    flagged_elsewhere: int  #: ... of the rest of the run's
    elsewhere: int  #: the rest of the run's timed copies


_NONE = np.empty(0)


def _median_without(sorted_values: np.ndarray, removed: np.ndarray) -> float:
    """The median (as ``np.median``) of ``sorted_values`` with one occurrence of each of
    ``removed`` (a few values, all in it) taken out: O(k log n), not a pass over n values.
    NaN when nothing is left."""
    n, k = len(sorted_values), len(removed)
    m = n - k
    if m <= 0:
        return float("nan")
    rem = np.sort(np.asarray(removed, float))
    # the positions taken out: the first free occurrence of each removed value
    left = np.searchsorted(sorted_values, rem, side="left")
    first = np.r_[True, rem[1:] != rem[:-1]]
    run_start = np.maximum.accumulate(np.where(first, np.arange(k), 0))
    pos = np.sort(left + (np.arange(k) - run_start))

    def at(j: int) -> float:  # the j-th value (0-based) of what is left
        i = j
        while True:
            nxt = j + int(np.searchsorted(pos, i, side="right"))
            if nxt == i:
                return float(sorted_values[i])
            i = nxt

    lo, hi = at((m - 1) // 2), at(m // 2)
    return lo if lo == hi else (lo + hi) / 2


def _runs_of(mask: np.ndarray) -> list[tuple[int, int]]:
    """``[start, end)`` of each run of True values."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(int), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


def slow_stretches(
    df: pd.DataFrame,
    ratio: pd.Series,
    flagged: pd.Series,
    curves: list[str] | None = None,
    gaps: pd.Series | None = None,
) -> list[PaceStretch]:
    """The stretches of every timeline of ``df`` in which the host ran slow.

    Candidates are found on the gaps as measured: per timeline, in time order, where the
    rolling median of :data:`WINDOW` gaps is at least :data:`GAP_RATIO` times its lower
    quartile (:data:`BASE_QUANTILE`: the run's usual pace) for :data:`MIN_ROWS` copies or more. A candidate is kept when the same work
    took longer there: each of its gaps over the median gap before the copies of the same
    cell (curve and size) outside it, a median of at least :data:`GAP_RATIO` over at least
    half its copies (a plan whose later cells only take longer to prepare, larger sizes in
    ascending order, is no slow host: its cells have no copies elsewhere to compare), and
    when its copies took a median at least :data:`MIN_SLOWER` times the others' ratio and
    were flagged at least :data:`MIN_FLAG_RATE` times as often (the slow host made slow
    copies likelier: most of its flagged copies would not have been flagged at the others'
    rate).

    Parameters
    ----------
    df
        A measurement table with ``t_s`` and ``wall_ms`` (``detect()``'s output or a table).
    ratio
        Each row's time over its expected time (NaN where unknown), on ``df``'s index.
    flagged
        Whether each row was flagged slow (``detect()``'s ``is_outlier``), on ``df``'s index.
    curves
        The columns whose values make one curve (``causes.group_columns``); with the size
        they make a cell. Default ``run_id`` and ``strategy``.
    gaps
        ``causes_wake.idle_gap_ms(df)`` where the caller has it already (computed if None).

    Returns
    -------
    list of PaceStretch
        In the order of the timelines, then of time. Empty for a table without start times.

    Raises
    ------
    TypeError
        ``df`` is no DataFrame, ``ratio``, ``flagged`` or ``gaps`` no Series, ``curves`` no list
        of names.
    ValueError
        ``df`` lacks a column it reads (``rows.check_values``).
    """
    curves = ["run_id", "strategy"] if curves is None else curves
    if isinstance(curves, str) or not all(isinstance(c, str) for c in curves):
        raise TypeError(f"curves must be a list of column names, not {curves!r}")
    check_values(df, ("run_id", "warmup", "error", "wall_ms", "size_bytes", *curves))
    for name, s in (("ratio", ratio), ("flagged", flagged), ("gaps", pd.Series() if gaps is None else gaps)):
        if not isinstance(s, pd.Series):
            raise TypeError(f"{name} must be a pandas Series on the table's index, not {type(s).__name__}")
    if "t_s" not in df.columns or df["t_s"].isna().all():
        return []
    timed = (~df["warmup"].astype(bool)) & (df["error"] == "") & ratio.notna()
    raw = idle_gap_ms(df) if gaps is None else gaps
    cells = df.groupby([*curves, "size_bytes"], sort=False).ngroup().to_numpy()
    keys = [c for c in TIMELINE_COLUMNS if c in df.columns]
    out: list[PaceStretch] = []
    for _, g in df[timed].groupby(keys, sort=True):
        g = g.sort_values("t_s", kind="stable")
        gap = raw.reindex(g.index).to_numpy(float)
        ok = np.isfinite(gap) & (gap > 0)
        if ok.sum() < 2 * MIN_ROWS:
            continue
        level = pd.Series(np.where(ok, gap, np.nan)).rolling(WINDOW, center=True, min_periods=WINDOW // 2 + 1)
        level = level.median().to_numpy()
        r = ratio.reindex(g.index).to_numpy(float)
        f = flagged.reindex(g.index).fillna(False).to_numpy(bool)
        cell = cells[df.index.get_indexer(g.index)]  # one integer per (curve, size)
        # The run's usual pace: a lower quartile of the rolling level, not the median, which a
        # slow stretch of half the run would move.
        usual_level = float(np.nanquantile(level, BASE_QUANTILE))
        f_all = int(f.sum())
        r_sorted = np.sort(r)
        ok_cell, ok_gap = cell[ok], gap[ok]
        sort = np.lexsort((ok_gap, ok_cell))
        ok_cell, ok_gap = ok_cell[sort], ok_gap[sort]
        bounds = np.flatnonzero(np.diff(ok_cell)) + 1
        by_cell = (
            dict(zip(ok_cell[np.r_[0, bounds]].tolist(), np.split(ok_gap, bounds), strict=True))
            if len(ok_cell)
            else {}
        )
        for a, b in _runs_of(np.nan_to_num(level, nan=0.0) >= GAP_RATIO * usual_level):
            if b - a < MIN_ROWS or b - a == len(g):
                continue  # (a stretch of the whole run has no rest to compare with)
            # The three tests, cheapest first (a long run has many candidates; each test
            # over the rest of the run costs its length): flag rate, ratio, then gaps.
            n_in = int(f[a:b].sum())
            n_out = f_all - n_in
            if n_in == 0 or n_in / (b - a) < MIN_FLAG_RATE * n_out / (len(g) - (b - a)):
                continue
            inside = np.zeros(len(g), bool)
            inside[a:b] = True
            r_in, r_out = float(np.median(r[a:b])), _median_without(r_sorted, r[a:b])
            if not r_in >= MIN_SLOWER * r_out:
                continue
            usual = {  # the median gap of each of its cells in the rest of the run
                c: _median_without(by_cell.get(c, _NONE), gap[a:b][ok[a:b] & (cell[a:b] == c)])
                for c in np.unique(cell[a:b]).tolist()
            }
            base = np.array([usual[c] for c in cell[a:b].tolist()], float)
            rel = gap[inside] / base
            rel = rel[np.isfinite(rel)]
            if len(rel) < (b - a) / 2 or not np.median(rel) >= GAP_RATIO:
                continue
            out.append(
                PaceStretch(
                    rows=tuple(g.index[a:b]),
                    start_s=float(g["t_s"].iloc[a]),
                    end_s=float(g["t_s"].iloc[b - 1]),
                    gap=float(np.median(rel)),
                    compared=len(rel),
                    ratio=r_in,
                    ratio_elsewhere=r_out,
                    flagged=n_in,
                    flagged_elsewhere=n_out,
                    elsewhere=int((~inside).sum()),
                )
            )
    return out


def pace_text(s: PaceStretch, episode: int, own: int = 0) -> str:
    """The evidence for a flagged copy in stretch ``s`` (episode ``episode``), ``own`` of
    whose flagged copies have causes of their own."""
    n = len(s.rows)
    at_rest = s.flagged_elsewhere / s.elsewhere * n
    others = f" ({own} with causes of their own)" if own else ""
    return (
        f"one of {s.flagged} slow copies among {n} in a stretch in which the host itself ran slow (episode "
        f"{episode}, {s.start_s:.2f} s to {s.end_s:.2f} s of the run, {n} of its {n + s.elsewhere} timed "
        f"copies){others}: the kit's own loop took a median "
        f"{s.gap:.2f}x as long between copies there as before copies of the same strategy and size elsewhere "
        f"in the run (the same work; {s.compared} copies compared), the copies in it took a median "
        f"{s.ratio:.2f}x their expected time against {s.ratio_elsewhere:.2f}x elsewhere, and "
        f"{s.flagged / n:.1%} of them were flagged against {s.flagged_elsewhere / s.elsewhere:.1%} of the "
        f"rest (at the rest's rate about {at_rest:.1f} of the {s.flagged}): consistent with the host CPU "
        f"running slower for a while (a busier host, a lower clock: the tables cannot say which), whatever was "
        f"copied; which of its slow copies would have been slow anyway, the tables cannot say"
    )
