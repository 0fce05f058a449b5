"""Find the slow copies and say why: ``detect()`` then ``explain()``.

detect() compares each row with what its size should cost. With repetitions (3 or more
timed rows of a strategy at a size) the expectation is that cell's median; with single
shots (the forum's table) it is the physical model, overhead + bytes / bandwidth, fitted
through the strategy's rows with a Cauchy loss, so neither a spike nor a stretch of slow
rows can pull it up. Residuals are
in log space, so a 100x range of latencies is handled alike, and the noise scale is the
median absolute deviation of those residuals. Only slow rows are flagged: a spike is a
copy that took longer than it should.

explain() gives every flagged row one cause from ``CAUSES`` with an evidence sentence
(the rules live in ``h2dlab.causes``):

- ``context_init``: the first timed operation of the run, seconds not milliseconds;
- ``host_alloc_growth``: a pinned request whose power-of-two block no cached block could
  serve, so PyTorch's caching host allocator called ``cudaHostAlloc``; evidence from the
  ``num_host_alloc`` counter where the run has it, else from the sizes and their order;
- ``device_alloc``: the copy made more new device segments (``cudaMalloc``) than its
  neighbours, after ``empty_cache()``;
- ``page_faults``, ``host_preempted``, ``host_blocked``, ``gc_pause``, ``other_threads``,
  ``gpu_shared``, ``gpu_clock_low``: per-copy evidence of table schemas 2 and 3 (page
  faults, CPU time beside wall time, the scheduler's run-queue wait and context switches,
  Python GC, the CPU time of the process's other threads, other processes on the GPU,
  the SM clock), where the table has those columns;
- ``host_parallel``: (tables that read each thread's own CPU clock) the extra time went
  into the timed host call, the timing thread on its CPU, while PyTorch's worker threads
  ran beside it (``causes_parallel``; tried after ``other_threads``, before ``gpu_shared``);
- ``episode``: part of a time-ordered stretch of slow rows, found with a change-point
  method (ruptures' kernel change-point search with a linear kernel: the l2 cost, PELT);
- ``gpu_wake``: none of the above, the GPU had sat idle a few ms before the copy (the host
  time since the previous copy ended, ``causes_wake.idle_gap_ms``) at least as long as,
  and the copy slower by no more than, the machine's own idle runs show a wake-up needs
  and costs (``causes_wake``; never without such runs);
- ``unexplained``: none of the above, said plainly, with what was ruled out.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from h2dlab import causes_evidence
from h2dlab.causes import CAUSES, generic_cause, group_columns, neighbours, specific_cause
from h2dlab.causes_wake import WakeCalibration, run_pauses
from h2dlab.model import MODEL_COLUMNS, check_values, fit_line, value_ms

__all__ = [
    "CAUSES",
    "MIN_RATIO",
    "MIN_REPS",
    "MIN_SIGMA",
    "Z_THRESHOLD",
    "detect",
    "explain",
    "pelt_l2",
    "robust_curve",
    "ruled_out",
    "summary",
]

#: Columns explain() reads besides the model's.
EXPLAIN_COLUMNS = (*MODEL_COLUMNS, "order", "rep", "host_allocs", "device_allocs", "empty_cache")

#: A row is flagged when it is this many noise scales slower than expected ...
Z_THRESHOLD = 5.0
#: ... and at least this much slower (ratio), so that tiny but consistent deviations in
#: very quiet data are not called spikes.
MIN_RATIO = 1.5
#: Noise scale floor (log units, ~1 %): the quietest cells still jitter this much.
MIN_SIGMA = 0.01
#: Cells with this many timed rows use their own median as the expectation.
MIN_REPS = 3


def robust_curve(size: np.ndarray, log_y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """Expected log-time for single-shot rows: the physical model, overhead + bytes /
    bandwidth, fitted with a Cauchy loss on log residuals (a spike's pull fades to
    nothing). Two parameters, so a stretch of slow rows cannot bend it to itself; a
    smoother with more freedom was tried and bent towards the sparse small sizes of
    the forum's grid. Returns a function giving log-time at any size."""
    a, b = fit_line(size, np.exp(log_y), loss="cauchy")
    return lambda s: np.log(a + np.asarray(s, float) * b)


def detect(
    df: pd.DataFrame, *, z_threshold: float = Z_THRESHOLD, min_ratio: float = MIN_RATIO
) -> pd.DataFrame:
    """Add ``expected_ms``, ``robust_z`` and ``is_outlier`` to every row.

    Groups are (run_id, direction, strategy, n_tensors), see ``causes.group_columns``.
    Error rows get NaN and are never flagged. Warm-up rows are scored against the timed
    rows' expectation but do not shape it.

    Raises
    ------
    ValueError
        A column ``detect`` reads is missing, or a row without an error holds a negative
        or infinite value (the column is named).
    """
    check_values(df, (*MODEL_COLUMNS, "order"))
    out = df.copy()
    # A copy without attrs: pandas deep-copies attrs (every run's env) on each row access.
    out.attrs = {}
    out["expected_ms"] = np.nan
    out["robust_z"] = np.nan
    v = value_ms(out)
    usable = (out["error"] == "") & (v > 0)
    for _, g in out[usable].groupby(group_columns(out), sort=False):
        idx = g.index
        y = np.log(v[idx].to_numpy(float))
        size = g["size_bytes"].to_numpy(float)
        train = ~g["warmup"].to_numpy(bool)
        if train.sum() < 3:
            continue
        exp_log = np.full(len(g), np.nan)
        reps = g[train].groupby("size_bytes").size()
        many = reps.index[reps >= MIN_REPS]
        if len(many):
            cell_med = pd.Series(y[train]).groupby(size[train]).median()
            m = np.isin(size, many)
            exp_log[m] = cell_med.reindex(size[m]).to_numpy()
        rest = np.isnan(exp_log)
        if rest.any():
            if len(np.unique(size[train])) >= 4:
                at = robust_curve(size[train], y[train])
                exp_log[rest] = at(size[rest])
            else:
                exp_log[rest] = np.median(y[train])
        r = y - exp_log
        sigma = max(1.4826 * float(np.nanmedian(np.abs(r[train] - np.nanmedian(r[train])))), MIN_SIGMA)
        out.loc[idx, "expected_ms"] = np.exp(exp_log)
        out.loc[idx, "robust_z"] = r / sigma
    ratio = value_ms(out) / out["expected_ms"]
    # Warm-ups are labelled already and expected to be slow: scored, never flagged.
    out["is_outlier"] = (out["robust_z"] > z_threshold) & (ratio > min_ratio) & ~out["warmup"].astype(bool)
    out["is_outlier"] = out["is_outlier"].fillna(False).astype(bool)
    out.attrs = dict(df.attrs)
    return out


def pelt_l2(x: np.ndarray, pen: float, min_size: int = 3) -> list[int]:
    """Change points of ``x`` by PELT with the l2 cost (sum of squared deviations from
    each segment's mean) and a penalty ``pen`` per segment.

    Written after ``ruptures.Pelt(model="l2", min_size=min_size, jump=1)`` (its admissible
    set, pruning and tie-breaking), with each step's costs computed at once from cumulative
    sums instead of one numpy call per candidate: milliseconds instead of seconds on a few
    thousand points, and no ruptures (or its scipy.stats import) needed. It is not always
    the same: on 3000 random short integer series (penalty 1, ``min_size`` 3) 5 differed
    from ruptures, 4 of them ties of equal cost broken the other way and one a costlier
    segmentation (``[0,2,0,1,2,1,0,0,0,2]``: ``[6, 10]``, cost 9.0, where ruptures finds
    ``[10]``, 8.6), probably pruning that is not exact when ``min_size`` > 1; not yet
    fixed (tests/mutation-report.md, run 3).

    Returns
    -------
    list of int
        Segment ends, increasing; the last is ``len(x)``.
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
    admissible = np.empty(0, dtype=np.int64)
    for end in [*range(min_size, n), n]:
        admissible = np.append(admissible, end - min_size)
        admissible = admissible[~np.isnan(best[admissible])]  # no partition of x[:t] exists
        length = end - admissible
        cost = (s2[end] - s2[admissible]) - (s1[end] - s1[admissible]) ** 2 / length
        total = best[admissible] + (cost + pen)
        k = int(np.argmin(total))  # the first of equals, as ruptures' min()
        best[end], prev[end] = total[k], admissible[k]
        admissible = admissible[total <= best[end] + pen]
    out = [n]
    while prev[out[-1]] > 0:
        out.append(int(prev[out[-1]]))
    return out[::-1]


def _episodes(r: np.ndarray, sigma: float, min_len: int = 4) -> list[tuple[int, int]]:
    """Stretches [start, end) of slow rows in time order.

    PELT (l2 cost, ``pelt_l2``) cuts the residual series where its level changes; a
    segment is slow when at least 3/4 of its rows are slow (residual above both 3
    noise scales and log 1.25), so two isolated spikes never make an episode.
    Adjacent slow segments (a decay seen as steps) are merged, and each stretch is
    grown over slow neighbours and trimmed of normal rows at its ends.
    """
    n = len(r)
    if n < 2 * min_len:
        return []
    hi = r > max(3.0 * sigma, math.log(1.25))
    rc = np.clip(r, -10 * sigma, None)  # fast rows cannot form episodes
    pen = 3.0 * (3.0 * sigma) ** 2 * math.log(n)
    bkps = pelt_l2(rc, pen, min_size=3)
    segs: list[list[int]] = []
    start = 0
    for end in bkps:
        if hi[start:end].mean() >= 0.75:
            if segs and segs[-1][1] == start:
                segs[-1][1] = end
            else:
                segs.append([start, end])
        start = end
    out = []
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


def explain(
    df: pd.DataFrame, wake: WakeCalibration | None = None, pauses: dict[object, float] | None = None
) -> pd.DataFrame:
    """Add ``episode`` (id or -1), ``cause`` and ``evidence`` to ``detect()``'s output.

    ``cause`` (from ``CAUSES``) and ``evidence`` are filled for flagged rows
    (``is_outlier``) only; every other row gets empty strings. Causes with direct
    evidence (context start-up, allocator growth, and the per-copy evidence of schema-2
    tables) are decided first; episodes are then looked for among the rows those causes
    leave unexplained, so a burst of first-time allocations is not called a
    time-correlated episode. A flagged row in no episode and with no direct evidence is
    ``gpu_wake`` when the idle gap before it and its small extra time fit a wake-up, else
    ``unexplained``: episodes win over ``gpu_wake`` (a stretch of slow copies is not one
    copy's wake-up). ``gpu_wake`` needs a calibration from idle runs recorded on the same
    machine: ``wake`` (``factors_idle.wake_calibration``), else
    ``df.attrs["wake_calibration"]``, which ``datasets.load`` attaches to a kind of a
    recording that has an ``idle`` kind; without one no copy is ``gpu_wake``. ``pauses``
    (run_id to ``--pause`` ms) is read from ``df.attrs["envs"]`` when None
    (``causes_wake.run_pauses``).

    Raises
    ------
    ValueError
        A column ``explain`` reads is missing, or a row without an error holds a negative
        or infinite value (the column is named).
    """
    check_values(df, EXPLAIN_COLUMNS)
    if "is_outlier" not in df.columns:
        df = detect(df)
    out = df.copy()
    out.attrs = {}  # see detect(): row access would deep-copy them
    out["episode"] = -1
    out["cause"] = ""
    out["evidence"] = ""
    v = value_ms(out)
    wake = df.attrs.get("wake_calibration") if wake is None else wake
    pauses = run_pauses(df) if pauses is None else pauses
    ctx = neighbours(out, pauses, wake)  # --pause and calibration, from the attrs out no longer has

    flagged = out.index[out["is_outlier"].to_numpy(bool)]
    specific: dict = {}
    for i in flagged:
        found = specific_cause(out.loc[i], ctx.loc[i], v[i])
        if found:
            specific[i] = found

    next_id = 0
    for _, g in out[out["robust_z"].notna()].groupby(group_columns(out), sort=False):
        g = g.sort_values(["order", "rep"])
        r = np.log(v[g.index].to_numpy(float) / g["expected_ms"].to_numpy(float))
        sigma = max(1.4826 * float(np.median(np.abs(r - np.median(r)))), MIN_SIGMA)
        r[np.isin(g.index, list(specific))] = 0.0  # explained rows are neutral here
        for a, b in _episodes(r, sigma):
            out.loc[g.index[a:b], "episode"] = next_id
            next_id += 1

    for i in flagged:
        row = out.loc[i]
        cause, ev = specific.get(i) or generic_cause(row, ctx.loc[i], v[i], int(row["episode"]))
        out.at[i, "cause"] = cause
        out.at[i, "evidence"] = ev
    out.attrs = {**df.attrs, "wake_calibration": wake} if wake is not None else dict(df.attrs)
    return out


def summary(explained: pd.DataFrame) -> pd.DataFrame:
    """Flagged rows per (run, strategy) and cause."""
    f = explained[explained["is_outlier"]]
    return f.groupby(["run_id", "strategy", "cause"]).size().rename("rows").reset_index()


def ruled_out(explained: pd.DataFrame) -> pd.DataFrame:
    """What was ruled out for each copy ``explain()`` left ``unexplained``, check by check.

    Parameters
    ----------
    explained
        ``explain()``'s output.

    Returns
    -------
    pandas.DataFrame
        One row per unexplained flagged copy (``explained``'s index): ``run_id``,
        ``order``, ``strategy``, ``size_bytes``, ``ms`` (its timing), ``expected_ms``, then
        one column per check in ``causes_evidence.CHECKS`` the table could make for some
        copy, holding the sentence that quotes its numbers (empty where that copy's row
        could not be checked). The same sentences make up each row's ``evidence``.

    Raises
    ------
    ValueError
        ``explained`` lacks the ``cause`` column (run ``explain()`` first).
    """
    if "cause" not in explained.columns:
        raise ValueError("ruled_out() reads explain()'s output: run outliers.explain(table) first")
    ctx = neighbours(explained)
    u = explained.index[
        explained["is_outlier"].to_numpy(bool) & (explained["cause"] == "unexplained").to_numpy()
    ]
    checks = {i: causes_evidence.ruled_out(explained.loc[i], ctx.loc[i]) for i in u}
    cols = [c for c in causes_evidence.CHECKS if any(c in found for found in checks.values())]
    head = explained.loc[u, ["run_id", "order", "strategy", "size_bytes"]].assign(
        ms=value_ms(explained.loc[u]), expected_ms=explained.loc[u, "expected_ms"]
    )
    body = pd.DataFrame([[checks[i].get(c, "") for c in cols] for i in u], index=u, columns=cols)
    return pd.concat([head, body], axis=1)
