"""Stretches of slow copies in time order: the change-point search behind ``explain()``'s
``episode`` cause.

``stretches`` cuts one series of log residuals (log of time over expected) with PELT
(``pelt_l2``, the l2 cost) and keeps the segments where most rows are slow. ``explain()``
runs it twice:

- per curve (one run, direction, strategy and tensors per copy, in ``order``): a strategy
  that was slow for a while;
- across curves (``across_curves``): each run's timeline (``run_id``, plus ``world`` and
  ``gpu`` where the table has them, ``causes_wake.TIMELINE_COLUMNS``), every timed row with
  a start time, of every strategy and size, in time order (``t_s``, then ``order``, ``rep``).
  A run that interleaves many strategies gives each curve only a few rows in any stretch of
  time, so a machine-wide slow period, when every copy was slower whatever was copied, makes
  no per-curve stretch but does make one here. Such a stretch counts only when its rows
  come from at least two curves and no curve holds more than ``MAX_CURVE_SHARE`` of them
  (one curve's own stretch is the per-curve pass's to find or not); a table without start
  times (``t_s``) gives none, as its time order across curves is not known.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from h2dlab.explain.causes_wake import TIMELINE_COLUMNS

__all__ = [
    "EXACT_MAX",
    "MAX_CURVE_SHARE",
    "Stretch",
    "across_curves",
    "noise_scale",
    "pelt_l2",
    "stretches",
    "time_order",
    "windowed_pelt",
]

#: A run's rows in time order: start time, then the plan's order; the rest only break exact
#: ties (a bidirectional copy's two rows), so the order never depends on the table's row order.
TIME_KEYS = ("t_s", "order", "rep", "direction", "strategy", "n_tensors", "size_bytes")
#: A stretch across curves counts when no one curve holds more than this share of its rows.
MAX_CURVE_SHARE = 0.5


@dataclass(frozen=True)
class Stretch:
    """One stretch of slow copies in a run's time order, across strategies and sizes.

    Attributes
    ----------
    rows
        The stretch's row labels, in time order (every row in it, slow or not).
    start_s, end_s
        ``t_s`` of its first and last row.
    median_ratio
        Median over its rows of time over expected time.
    strategies, sizes
        How many strategies and sizes its rows copied.
    """

    rows: tuple
    start_s: float
    end_s: float
    median_ratio: float
    strategies: int
    sizes: int

    @property
    def n(self) -> int:
        """Number of rows in the stretch."""
        return len(self.rows)


def pelt_l2(x: np.ndarray, pen: float, min_size: int = 3, prune_ties: bool = False) -> list[int]:
    """Change points of ``x`` by PELT with the l2 cost (sum of squared deviations from
    each segment's mean) and a penalty ``pen`` per segment.

    Written after ``ruptures.Pelt(model="l2", min_size=min_size, jump=1)`` (its admissible
    set and tie-breaking), with each step's costs computed at once from cumulative sums
    instead of one numpy call per candidate: milliseconds instead of seconds on a few
    thousand points, and no ruptures (or its scipy.stats import) needed. Its pruning is
    exact where ruptures' is not: a start beaten at one end is dropped only ``min_size``
    ends later, once a segment from the end that beat it is allowed. So it finds a
    segmentation of the least penalised cost (tests/explain/test_outliers_synthetic.py checks it
    against every segmentation); ruptures can miss it (``[0,2,0,1,2,1,0,0,0,2]``, penalty
    1, ``min_size`` 3: it finds ``[10]``, 8.6; here ``[6, 10]`` was found before this
    change, cost 9.0, and now ``[10]``), and where two segmentations cost the same up to
    rounding either may be returned.

    Parameters
    ----------
    x
        The series.
    pen
        Penalty per segment.
    min_size
        Shortest segment.
    prune_ties
        Also drop a start that only ties the best (up to rounding): a flat series is then cut
        in linear time, and of two segmentations of equal cost the one with the later
        change point may be returned (``windowed_pelt`` uses it; the default keeps ruptures'
        choice).

    Returns
    -------
    list of int
        Segment ends, increasing; the last is ``len(x)``.

    Raises
    ------
    ValueError
        ``x`` has fewer than ``min_size`` points.
    """
    x = np.asarray(x, float).ravel()
    n = len(x)
    if n < min_size:
        raise ValueError(f"pelt_l2 needs at least min_size={min_size} points, got {n}")
    x = x - x.mean()  # centred, so the cumulative sums lose little precision
    s1 = np.concatenate([[0.0], np.cumsum(x)])
    s2 = np.concatenate([[0.0], np.cumsum(x * x)])
    best = np.full(n + 1, np.nan)  # best[t]: optimal penalised cost of x[:t]
    best[0] = 0.0
    prev = np.zeros(n + 1, dtype=np.int64)
    buf = np.empty(n + 1, dtype=np.int64)  # the admissible starts, in buf[:m]
    dead = np.empty(n + 1, dtype=np.int64)  # from which end on each may be dropped
    m = 0
    for end in [*range(min_size, n), n]:
        start = end - min_size
        if not np.isnan(best[start]):  # else no partition of x[:start] exists; every older
            buf[m], dead[m] = start, n + 1  # start in buf has one (best[] never changes once set)
            m += 1
        live = dead[:m] > end
        if not live.all():
            m = int(live.sum())
            buf[:m], dead[:m] = buf[: len(live)][live], dead[: len(live)][live]
        admissible = buf[:m]
        length = end - admissible
        d = s1[end] - s1[admissible]
        cost = (s2[end] - s2[admissible]) - d * d / length
        total = best[admissible] + (cost + pen)
        k = int(total.argmin())  # the first of equals, as ruptures' min()
        best[end], prev[end] = total[k], admissible[k]
        # A start t beaten here (its cost to `end` already more than best[end] + pen) is beaten
        # at every later end by a segment from `end`, but only where that segment is allowed:
        # min_size on. Dropping it at once (as ruptures does) can lose the optimum.
        beaten = (
            total > best[end] + pen - 1e-9 * (abs(best[end]) + pen) if prune_ties else total > best[end] + pen
        )
        dead[:m][beaten] = np.minimum(dead[:m][beaten], end + min_size)
    out = [n]
    while prev[out[-1]] > 0:
        out.append(int(prev[out[-1]]))
    return out[::-1]


#: Series up to this many rows are cut by one exact PELT over the whole (every bundled
#: timeline: the longest has 4,620 rows). PELT's pruning fails where a series has few level
#: changes, the usual case, so its time grows with the square of the length: 51.7 s at
#: 100,000 rows. Longer series (a long recording, a fleet's table) go to ``windowed_pelt``.
EXACT_MAX = 20_000
#: ``windowed_pelt`` cuts a long series in the middle of every run of at least this many
#: rows that are not slow, and any window still longer than :data:`WINDOW_MAX` into equal parts.
GAP_ROWS = 64
WINDOW_MAX = 1_024


def windowed_pelt(x: np.ndarray, hi: np.ndarray, pen: float, min_size: int = 3) -> list[int]:
    """Segment ends of a long series ``x`` (``pelt_l2``'s output shape) in about linear time.

    A slow segment needs 3/4 of its rows slow (``hi``), so a run of :data:`GAP_ROWS` rows
    that are not slow ends any episode: the series is cut in the middle of each such run,
    and each window solved alone by ``pelt_l2`` with the whole series' penalty ``pen``
    (:data:`WINDOW_MAX` rows at most, so each costs a bounded time). A window holding fewer
    than 3 slow rows, or no two adjacent ones, can hold no slow segment (3 rows or more, 3/4
    of them slow): it stays one segment and costs nothing. Exact PELT over the whole would only move
    where long normal stretches are cut, which ``stretches`` does not report.
    """
    n = len(x)
    hi = np.asarray(hi, bool)
    step = np.diff(np.concatenate([[1], hi.astype(np.int8), [1]]))
    starts, ends = np.flatnonzero(step == -1), np.flatnonzero(step == 1)  # runs of rows not slow
    mid = (starts + ends) // 2
    cuts = [0, *mid[(ends - starts >= GAP_ROWS) & (mid > 0) & (mid < n)].tolist(), n]
    nhi = np.concatenate([[0], np.cumsum(hi)])
    pairs = np.concatenate([[0], np.cumsum(hi[1:] & hi[:-1]), [0]])  # adjacent slow rows up to i
    pairs[-1] = pairs[-2]
    out: list[int] = []
    for s, e in zip(cuts[:-1], cuts[1:], strict=True):
        parts = max(1, -(-(e - s) // WINDOW_MAX))
        edges = [s + (e - s) * k // parts for k in range(parts + 1)]
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            # 3/4 of 3 or more rows slow means two adjacent slow rows: without a pair, no
            # segment of the window can be slow
            if nhi[b] - nhi[a] < 3 or pairs[b - 1] - pairs[a] < 1 or b - a < 2 * min_size:
                out.append(b)
            else:
                out += [a + k for k in pelt_l2(x[a:b], pen, min_size=min_size, prune_ties=True)]
    return out


def noise_scale(r: np.ndarray, floor: float) -> float:
    """1.4826 times the median absolute deviation of ``r``, at least ``floor``."""
    r = np.asarray(r, float)
    return max(1.4826 * float(np.median(np.abs(r - np.median(r)))), floor)


def stretches(r: np.ndarray, sigma: float, min_len: int = 4) -> list[tuple[int, int]]:
    """Stretches [start, end) of slow rows in the series ``r`` (log residuals, in time order).

    PELT (l2 cost, ``pelt_l2``) cuts the residual series where its level changes; a
    segment is slow when at least 3/4 of its rows are slow (residual above both 3
    noise scales and log 1.25), so two isolated spikes never make an episode.
    Adjacent slow segments (a decay seen as steps) are merged, and each stretch is
    grown over slow neighbours and trimmed of normal rows at its ends.

    Parameters
    ----------
    r
        Log of time over expected time, in time order.
    sigma
        Noise scale of ``r`` (log units).
    min_len
        Fewest rows in a stretch.

    Returns
    -------
    list of (int, int)
        Positions [start, end) in ``r``, increasing and disjoint.
    """
    r = np.asarray(r, float)
    n = len(r)
    if n < 2 * min_len:
        return []
    hi = r > max(3.0 * sigma, math.log(1.25))
    rc = np.clip(r, -10 * sigma, None)  # fast rows cannot form episodes
    pen = 3.0 * (3.0 * sigma) ** 2 * math.log(n)
    bkps = pelt_l2(rc, pen, min_size=3) if n <= EXACT_MAX else windowed_pelt(rc, hi, pen)
    segs: list[list[int]] = []
    start = 0
    for end in bkps:
        if hi[start:end].mean() >= 0.75:
            if segs and segs[-1][1] == start:
                segs[-1][1] = end
            else:
                segs.append([start, end])
        start = end
    out: list[tuple[int, int]] = []
    for a, b in segs:
        while a > 0 and hi[a - 1]:
            a -= 1
        while b < n and hi[b]:
            b += 1
        while a < b and not hi[a]:
            a += 1
        while b > a and not hi[b - 1]:
            b -= 1
        if b - a >= min_len and (not out or a >= out[-1][1]):
            out.append((a, b))
    return out


def time_order(df: pd.DataFrame) -> pd.Index:
    """``df``'s row labels in time order: ``t_s`` (rows without one last), then ``order``,
    ``rep`` and, for exact ties, direction, strategy, tensors per copy and size. The same
    rows give the same order whatever their order in ``df``."""
    keys = [c for c in TIME_KEYS if c in df.columns]
    return df.sort_values(keys, kind="stable", na_position="last").index


def across_curves(
    df: pd.DataFrame, ratio: pd.Series, neutral: Sequence, floor: float, curves: Sequence[str]
) -> list[Stretch]:
    """Stretches of slow copies in each run's time order, across strategies and sizes.

    Parameters
    ----------
    df
        ``detect()``'s output; rows with a finite ``robust_z`` (the timed rows, warm-ups
        included) and a finite ``t_s`` take part.
    ratio
        Each row's time over its expected time (``df``'s index).
    neutral
        Row labels already explained by a specific cause: their residual counts as 0, so
        a burst of allocations is not taken for a slow period.
    floor
        Lowest noise scale (log units).
    curves
        The columns that make one curve (``causes.group_columns``).

    Returns
    -------
    list of Stretch
        Per timeline (``causes_wake.TIMELINE_COLUMNS`` present in ``df``), its stretches
        in time order, found by ``stretches`` on the timeline's log residuals with the noise
        scale of those residuals (``noise_scale``, before the neutral rows are zeroed);
        only those of at least two curves, none holding more than ``MAX_CURVE_SHARE``.
    """
    if "t_s" not in df.columns:
        return []
    z = pd.to_numeric(df["robust_z"], errors="coerce").to_numpy(float)
    t_s = pd.to_numeric(df["t_s"], errors="coerce").to_numpy(float)
    timed = df[np.isfinite(z) & np.isfinite(t_s)]
    keys = [c for c in TIMELINE_COLUMNS if c in timed.columns]
    out: list[Stretch] = []
    if timed.empty:
        return out
    for _, g in timed.groupby(keys, sort=True, dropna=False):
        idx = time_order(g)
        ratios = ratio[idx].to_numpy(float)
        r = np.log(ratios)
        sigma = noise_scale(r, floor)
        r[np.isin(idx, list(neutral))] = 0.0
        t = pd.to_numeric(g.loc[idx, "t_s"], errors="coerce").to_numpy(float)
        curve = g.loc[idx].groupby(list(curves), sort=False, dropna=False).ngroup().to_numpy()
        for a, b in stretches(r, sigma):
            share = np.bincount(curve[a:b]).max() / (b - a)
            if len(np.unique(curve[a:b])) < 2 or share > MAX_CURVE_SHARE:
                continue
            rows = g.loc[idx[a:b]]
            out.append(
                Stretch(
                    rows=tuple(idx[a:b]),
                    start_s=float(t[a]),
                    end_s=float(t[b - 1]),
                    median_ratio=float(np.median(ratios[a:b])),
                    strategies=int(rows["strategy"].nunique()),
                    sizes=int(rows["size_bytes"].nunique()),
                )
            )
    return out
