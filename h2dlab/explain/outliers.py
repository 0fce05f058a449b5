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
(the causes are data: one entry each in the registries of ``h2dlab.explain.causes``, tried
in order where the table has the columns an entry needs):

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
- ``host_crowded``: (the same tables) as ``host_parallel``, but the workers had taken the
  CPUs: the timing thread waited to run for part of the extra time (a quarter to a half),
  then on its CPU for them (``causes_crowded``; tried right after ``host_parallel``);
- ``episode``: part of a time-ordered stretch of slow rows, found with a change-point
  method (ruptures' kernel change-point search with a linear kernel: the l2 cost, PELT;
  ``h2dlab.explain.episodes``) in two passes: per curve (one strategy's copies in ``order``),
  then across curves (each run's timed copies of every strategy and size in ``t_s`` order;
  tables with start times only), so a machine-wide slow period in a run that interleaves
  many strategies, where each curve has only a few rows, is an episode too; and a third
  time from the kit's own loop: a stretch in which the host work between copies took
  longer than before copies of the same cell elsewhere, while the copies ran slower too
  and were flagged at least twice as often as the rest (``h2dlab.explain.host_pace``: the host
  itself ran slow);
- ``gpu_wake``: none of the above, no copy had run for a while before this one (the host
  time since the previous copy ended, ``causes_wake.idle_gap_ms``) at least as long as,
  and the copy slower by no more than, the machine's own idle runs show a wake-up needs
  and costs (``causes_wake``; never without such runs);
- ``unexplained``: none of the above, said plainly, with what was ruled out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from h2dlab.explain import causes_evidence, episodes, host_pace
from h2dlab.explain.causes import (
    CAUSES,
    LIKELY,
    generic_cause,
    group_columns,
    neighbours,
    specific_cause,
    usable,
)
from h2dlab.explain.causes_evidence import slow_text
from h2dlab.explain.causes_stall import censuses_by_run, stall_check
from h2dlab.explain.causes_wake import WakeCalibration, run_pauses
from h2dlab.explain.episodes import pelt_l2
from h2dlab.explain.model import MODEL_COLUMNS, check_values, fit_line, value_ms
from h2dlab.explain.rows import normalised
from h2dlab.explain.wake_source import Wake, of_table, shared

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
        A column ``detect`` reads is missing, a row without an error holds a negative
        or infinite value (the column is named), or ``rows.normalised`` refuses the
        table (its index, repeated columns or rows; a table from ``pd.read_csv`` is read).
    """
    return _detect(normalised(df), z_threshold, min_ratio)


def _detect(df: pd.DataFrame, z_threshold: float, min_ratio: float) -> pd.DataFrame:
    """:func:`detect` of a table ``rows.normalised`` has read already (``explain`` has)."""
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


def _detected(df: pd.DataFrame) -> bool:
    """Whether ``df`` already holds ``detect()``'s columns for every row (a table that
    ``explain --out`` wrote); a folder mixing such a table with plain ones does not."""
    cols = ("expected_ms", "robust_z", "is_outlier")
    return all(c in df.columns for c in cols) and not df["is_outlier"].isna().any()


def explain(
    df: pd.DataFrame,
    wake: WakeCalibration | Mapping[object, Wake] | None = None,
    pauses: dict[object, float] | None = None,
    censuses: Mapping[object, dict | None] | None = None,
) -> pd.DataFrame:
    """Add ``episode`` (id or -1), ``cause`` and ``evidence`` to ``detect()``'s output.

    ``cause`` (from ``CAUSES``) and ``evidence`` are filled for flagged rows
    (``is_outlier``) only; every other row gets empty strings. Causes with direct
    evidence (context start-up, allocator growth, and the per-copy evidence of schema-2
    tables) are decided first; episodes are then looked for among the rows those causes
    leave unexplained, so a burst of first-time allocations is not called a
    time-correlated episode. Episodes are looked for twice: per curve (run, direction,
    strategy, tensors per copy; in ``order``), then across curves: each run's timeline
    (``run_id``, plus ``world``/``gpu`` where present) with every row of finite
    ``robust_z`` and ``t_s`` in time order (``t_s``, then ``order``, ``rep``), its residuals'
    own noise scale, and rows with a specific cause at residual 0; a stretch counts when
    its rows come from two curves or more, none holding more than half of them
    (``episodes.across_curves``). A flagged row in such a stretch, in no per-curve episode
    and with no specific cause, gets the next episode id (only flagged rows get one) and an
    evidence sentence saying the stretch ran across strategies and sizes, with its length,
    span and median ratio. Tables without start times get no such episodes. A
    flagged row in no episode and with no direct evidence is
    ``gpu_wake`` when the idle gap before it and its small extra time fit a wake-up, else
    ``host_stall`` when its extra time fits the stalls its run's census counted, else
    ``unexplained``: episodes win over ``gpu_wake`` (a stretch of slow copies is not one
    copy's wake-up). ``gpu_wake`` needs a calibration from idle runs recorded on the copy's
    machine: ``wake``, one (``factors_idle.wake_calibration``) for every run or a mapping
    run_id to its run's (or to a sentence why it has none: ``wake_source.calibrations``),
    else those of the ``idle`` kind of the recording ``df`` was loaded from
    (``wake_source.of_table``); a copy of a run without one is never
    ``gpu_wake``. The output's ``attrs`` hold the calibration used, per run, under
    ``wake_calibrations``, and the one they share under ``wake_calibration``. ``pauses``
    (run_id to ``--pause`` ms) is read from ``df.attrs["envs"]`` when None
    (``causes_wake.run_pauses``), and so is ``censuses`` (run_id to its run's stall census,
    ``env['stall_census']``, or None: ``causes_stall.censuses_by_run``).

    Raises
    ------
    TypeError
        ``censuses`` is not a mapping.
    ValueError
        As :func:`detect`.
    """
    df = normalised(df)
    check_values(df, EXPLAIN_COLUMNS)
    if not _detected(df):  # a table explain() wrote, read back whole, keeps its flags
        df = _detect(df, Z_THRESHOLD, MIN_RATIO)
    out = df.copy()
    out.attrs = {}  # see detect(): row access would deep-copy them
    out["episode"] = -1
    out["cause"] = ""
    out["evidence"] = ""
    v = value_ms(out)
    wake = of_table(df) if wake is None else wake
    pauses = run_pauses(df) if pauses is None else pauses
    # --pause, calibration and stall census, from the attrs out no longer has
    censuses = censuses_by_run(df) if censuses is None else censuses
    ctx = neighbours(out, pauses, wake, censuses=censuses)

    flagged = out.index[out["is_outlier"].to_numpy(bool)]
    direct, likely = usable(out.columns), LIKELY.usable(out.columns)  # the causes this table can have
    specific: dict = {}
    for i in flagged:
        found = specific_cause(out.loc[i], ctx.loc[i], v[i], direct)
        if found:
            specific[i] = found

    next_id = 0
    for _, g in out[out["robust_z"].notna()].groupby(group_columns(out), sort=False):
        g = g.sort_values(["order", "rep"])
        r = np.log(v[g.index].to_numpy(float) / g["expected_ms"].to_numpy(float))
        sigma = episodes.noise_scale(r, MIN_SIGMA)
        r[np.isin(g.index, list(specific))] = 0.0  # explained rows are neutral here
        for a, b in episodes.stretches(r, sigma):
            out.loc[g.index[a:b], "episode"] = next_id
            next_id += 1

    # Across curves: a machine-wide slow period in a run's time order, whatever was copied.
    across: dict = {}
    for s in episodes.across_curves(
        out, v / out["expected_ms"], list(specific), MIN_SIGMA, group_columns(out)
    ):
        new = [
            i for i in s.rows if out.at[i, "is_outlier"] and out.at[i, "episode"] < 0 and i not in specific
        ]
        if new:
            out.loc[new, "episode"] = next_id
            across.update(dict.fromkeys(new, s))
            next_id += 1

    # Stretches in which the host itself ran slow, told by the loop's own gaps (host_pace).
    paced: dict = {}
    ratio = v / out["expected_ms"]
    slow = out["is_outlier"].astype(bool)
    for s in host_pace.slow_stretches(out, ratio, slow, group_columns(out), gaps=ctx["idle_gap_ms"]):
        new = [
            i for i in s.rows if out.at[i, "is_outlier"] and out.at[i, "episode"] < 0 and i not in specific
        ]
        if new:
            out.loc[new, "episode"] = next_id
            own = sum(1 for i in s.rows if i in specific)  # flagged, with a cause of their own
            paced.update({i: (s, next_id, own) for i in new})
            next_id += 1

    said: dict[Any, tuple[str, str]] = {}  # written at once below: one write per row copies a
    for i in flagged:  # text column (arrow strings), which made a long table quadratic
        row = out.loc[i]
        if i in paced:
            s, ep, own = paced[i]
            said[i] = ("episode", f"{slow_text(row, v[i])}; {host_pace.pace_text(s, ep, own)}")
            continue
        said[i] = specific.get(i) or generic_cause(
            row, ctx.loc[i], v[i], int(row["episode"]), across.get(i), likely
        )
    if said:
        at = list(said)
        out.loc[at, "cause"] = [c for c, _ in said.values()]
        out.loc[at, "evidence"] = [e for _, e in said.values()]
    out.attrs = dict(df.attrs)
    out.attrs["stall_censuses"] = dict(censuses)  # ruled_out(out) reads them back, as the wake below
    if wake is not None:  # ruled_out(out) reads it back, one per run
        runs = out["run_id"].unique()
        one = shared(wake, runs) if isinstance(wake, Mapping) else wake
        cals = dict(wake) if isinstance(wake, Mapping) else dict.fromkeys(runs, wake)
        out.attrs.update(wake_calibrations=cals, wake_calibration=one)
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
        ``order``, ``strategy``, ``size_bytes``, ``ms`` (its timing: CUDA events where
        recorded), ``wall_ms`` (the host clock, which "time in the call" splits), ``expected_ms``, then
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
    v = value_ms(explained)
    checks = {i: causes_evidence.ruled_out(explained.loc[i], ctx.loc[i]) for i in u}
    for i in u:  # as generic_cause adds it to the evidence
        census = stall_check(explained.loc[i], ctx.loc[i], v[i])
        if census:
            checks[i]["stall census"] = census
    cols = [c for c in causes_evidence.CHECKS if any(c in found for found in checks.values())]
    head = explained.loc[u, ["run_id", "order", "strategy", "size_bytes"]].assign(
        ms=value_ms(explained.loc[u]),
        wall_ms=explained.loc[u, "wall_ms"],
        expected_ms=explained.loc[u, "expected_ms"],
    )
    body = pd.DataFrame([[checks[i].get(c, "") for c in cols] for i in u], index=u, columns=cols)
    return pd.concat([head, body], axis=1)
