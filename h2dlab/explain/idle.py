"""What a pause costs the next copy: the ``idle`` runs of a recording (``h2dlab measure
--pause MS``: the kit submits a tiny GPU operation and waits for it, spins MS ms with the
GPU idle, then times the copy), compared from the tables. The pause comes on top of the
loop's own work between copies (a few ms), so the runs also record how long each copy
followed the previous one (``causes_wake.idle_gap_ms``). Re-exported by
:mod:`h2dlab.findings.factors`. No torch here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from h2dlab.explain.causes_wake import WakeCalibration, idle_gap_ms, pause_of
from h2dlab.explain.finding import Finding
from h2dlab.explain.rows import check_values, timed, value_ms
from h2dlab.explain.spacing import spacing_words
from h2dlab.recording.machines import MACHINE_KEYS, machine_of, off_gpu
from h2dlab.units import fmt_bytes

__all__ = ["SLOW_RATIO", "WAKE_SHARE", "idle_wake", "pauses", "wake_calibration"]

#: A copy counts as slowed by the pause at this multiple of the same cell's median after
#: the shortest pause.
SLOW_RATIO = 1.5
#: A pause wakes the GPU up when at least this share of every strategy's smallest copies
#: after it are slowed (:data:`SLOW_RATIO`): ``wake_calibration``'s threshold.
WAKE_SHARE = 0.2


def _envs(df: pd.DataFrame) -> dict:
    envs = df.attrs.get("envs")
    return envs if isinstance(envs, dict) else {}


def pauses(df: pd.DataFrame) -> pd.Series:
    """Per row, the pause (ms) its run spun with the GPU idle before each timed copy, read
    from the run's env.json (``spec.pause_ms``, see ``causes_wake.pause_of``); NaN for runs
    measured without ``--pause`` and for a pause no run could have taken."""
    envs = _envs(df)
    return df["run_id"].map(lambda run_id: pause_of(envs.get(run_id))).astype(float)


def _us(ms: float) -> str:
    return f"{ms * 1e3:.0f} µs" if ms < 1 else f"{ms:.2f} ms"


def _and(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _pauses_text(levels: list[float]) -> str:
    return ", ".join(f"{q:g}" for q in levels) + " ms"


def _runs(df: pd.DataFrame) -> tuple[pd.DataFrame, list[float], dict[str, list[float]]]:
    """The timed rows of paused runs (``pause_ms``, ``v``: the time), the pauses ascending,
    and per strategy the pauses that some of its sizes lack (strategies lacking none are
    not in it)."""
    check_values(df)  # a table, with the columns a model reads (TypeError/ValueError naming them)
    t = timed(df.assign(gap_ms=idle_gap_ms(df)))  # warm-ups count as previous copies
    t = t.assign(pause_ms=pauses(t), v=value_ms(t)).dropna(subset=["pause_ms"])
    envs = _envs(df)
    t = t[~t["run_id"].map(lambda r: off_gpu(envs.get(r))).astype(bool)]  # no GPU sat idle
    levels = sorted(float(q) for q in t["pause_ms"].unique())
    missing: dict[str, list[float]] = {}
    for (strategy, _size), g in t.groupby(["strategy", "size_bytes"], sort=True):
        lack = set(levels) - set(g["pause_ms"])
        if lack:
            missing[str(strategy)] = sorted(set(missing.get(str(strategy), [])) | lack)
    return t, levels, missing


def _lacks_text(t: pd.DataFrame, missing: dict[str, list[float]]) -> str:
    """``missing`` in words: per strategy the pauses it lacks at every size, and those it
    lacks at some of its sizes only (timed after them at others)."""
    parts = []
    for strategy, lack in sorted(missing.items()):
        have = set(t.loc[t["strategy"].astype(str) == strategy, "pause_ms"])
        nowhere, partly = [q for q in lack if q not in have], [q for q in lack if q in have]
        said = [_pauses_text(nowhere)] if nowhere else []
        said += [f"{_pauses_text(partly)} at some of its sizes"] if partly else []
        parts.append(f"`{strategy}` lacks {' and '.join(said)}")
    return "; ".join(parts)


def _shortfall(
    df: pd.DataFrame, t: pd.DataFrame, levels: list[float], missing: dict[str, list[float]]
) -> str | None:
    """Why the runs ``df`` (``t``: the timed rows of its paused runs) cannot tell what a pause
    costs, in one plain sentence (None when they can)."""
    again = "record them with `h2dlab record --only idle` (it times each strategy after each pause)"
    envs = _envs(df)
    machines = sorted({m for r in t["run_id"].unique() if (m := machine_of(envs.get(r)))})
    if len(machines) > 1:
        differ = [k for i, k in enumerate(MACHINE_KEYS) if len({m[i] for m in machines}) > 1]
        return (
            f"The idle runs were measured on {len(machines)} machines or boots (their env.json differs in "
            f"{', '.join(differ)}): what a pause costs is compared within one machine, so give the idle runs "
            f"of one; {again}."
        )
    if len(levels) < 2:
        held = f"one pause ({_pauses_text(levels)})"
        paused = pauses(df).notna()
        if not levels and paused.any() and df.loc[paused, "run_id"].map(lambda r: off_gpu(envs.get(r))).all():
            held = (
                "no run on a CUDA GPU (their env.json's spec.device: copies within host memory, no GPU idle)"
            )
        elif not levels and paused.any():  # paused runs, but no copy timed
            held = "no timed copy (every row a warm-up, an error or no time)"
        elif not levels:
            held = "no pause (no run records a `spec.pause_ms` it could have taken)"
        return (
            f"The idle runs hold {held}: at least two pauses with timed copies are needed to tell "
            f"what a pause costs (the shortest is the baseline); {again}."
        )
    if set(missing) >= set(t["strategy"].astype(str)):
        lacks = _lacks_text(t, missing)
        return (
            f"No strategy of the idle runs was timed after every pause ({_pauses_text(levels)}: {lacks}), "
            f"so no copy can be compared across them; {again}."
        )
    return None


def _cells(t: pd.DataFrame, levels: list[float], missing: dict[str, list[float]]) -> pd.DataFrame:
    """:func:`idle_wake`'s cells (see there) of the strategies timed after every pause."""
    t = t[~t["strategy"].astype(str).isin(list(missing))]
    g = t.groupby(["strategy", "size_bytes", "pause_ms"])["v"]
    cells = pd.DataFrame({"median_ms": g.median(), "p90_ms": g.quantile(0.9), "n": g.size()}).reset_index()
    base = _base(cells, levels)
    key = pd.MultiIndex.from_frame(cells[["strategy", "size_bytes"]])
    cells["ratio"] = cells["median_ms"].to_numpy() / base.reindex(key).to_numpy()
    tb = base.reindex(pd.MultiIndex.from_frame(t[["strategy", "size_bytes"]])).to_numpy()
    t = t.assign(slow=t["v"].to_numpy() >= SLOW_RATIO * tb)
    share = t.groupby(["strategy", "size_bytes", "pause_ms"])["slow"].mean().reset_index(name="slow_share")
    return cells.merge(share, on=["strategy", "size_bytes", "pause_ms"])


def _gaps(t: pd.DataFrame) -> dict[float, float]:
    """Per pause, the median ``gap_ms`` of :func:`_runs`'s timed rows ``t`` (host time from
    the end of one copy to the start of the next); pauses without a finite gap left out, and
    those whose median gap is shorter than the pause itself (the gap spans the pause: start
    times that contradict it tell nothing)."""
    med = t.groupby("pause_ms")["gap_ms"].median().dropna()
    return {float(q): float(v) for q, v in med.items() if v >= q}


def _base(cells: pd.DataFrame, levels: list[float]) -> pd.Series:
    """Each (strategy, size)'s median after the shortest pause."""
    return cells[cells["pause_ms"] == levels[0]].set_index(["strategy", "size_bytes"])["median_ms"]


def _added(ms: float, to: float) -> str:
    """What a pause did (``ms``) to a time (``to``), never as a negative duration."""
    return f"added {_us(ms)} to a {_us(to)} median" if ms >= 0 else f"took {_us(-ms)} off a {_us(to)} median"


def _faster(cells: pd.DataFrame, levels: list[float]) -> str:
    """Words for a pause after which every cell ran faster than after the shortest: how much,
    a measure of that spread between processes (the h200 recording's 1 ms runs: 0.84-0.93x)."""
    out, widest = [], 0.0
    for q in levels[1:]:
        r = cells.loc[cells["pause_ms"] == q, "ratio"]
        if len(r) and (r < 1).all():
            out.append(
                f"after {q:g} ms every cell ran faster than after {levels[0]:g} ms ({r.min():.2f}x to {r.max():.2f}x)"
            )
            widest = max(widest, 1 - float(r.min()))
    if not out:
        return ""
    effects = (cells.loc[cells["pause_ms"] == levels[-1], "ratio"] - 1).abs()
    some = " as large as some of the longest pause's effects" if (effects <= widest).any() else ""
    first = "; ".join(out)
    return f". {first[0].upper()}{first[1:]}: a spread{some}"


def _range(lo: float, hi: float) -> str:
    """What a pause did to the medians, from ``lo`` to ``hi`` ms, never as negative durations."""
    if lo >= 0:
        return f"added {_us(lo)} to {_us(hi)} to the medians"
    if hi <= 0:
        return f"took {_us(-hi)} to {_us(-lo)} off the medians"
    return f"changed the medians by {_us(-lo)} less to {_us(hi)} more"


def idle_wake(df: pd.DataFrame) -> Finding:
    """Median time of each (strategy, size) after each pause, from runs measured with
    ``--pause`` (the ``idle`` kind of a recording).

    ``values["cells"]``: one row per strategy, size and pause with ``median_ms``,
    ``p90_ms``, ``n``, ``ratio`` (median over the same cell's median after the shortest
    pause) and ``slow_share`` (share of copies at least :data:`SLOW_RATIO` times that
    median). ``values["pauses"]``: the pauses, ascending; ``values["gaps_ms"]``: per pause,
    the median host time from the end of one copy to the start of the next (the pause plus
    the loop's own work; pauses without start times, or whose median gap is shorter than the pause, left out); ``values["extra_p90_ms"]``: over
    the cells after the longest pause, the largest p90 less the same cell's median after
    the shortest (how much that pause can add). ``holds`` when, for every
    strategy, the smallest size's median after the longest pause is at least
    :data:`SLOW_RATIO` times its median after the shortest. ``values["missing"]``:
    strategy to the pauses it lacks; such a strategy is left out (the verdict says so).

    With fewer than two pauses, or no strategy timed after every pause, nothing can be
    compared: ``holds`` is False, ``values["cells"]`` is empty and the verdict says what is
    missing and how to record it. Never raises for such data.
    """
    t, levels, missing = _runs(df)
    short = _shortfall(df, t, levels, missing)
    if short is not None:
        empty = pd.DataFrame(
            columns=["strategy", "size_bytes", "pause_ms", "median_ms", "p90_ms", "n", "ratio"]
        )
        values = {"cells": empty, "pauses": levels, "missing": missing, "extra_p90_ms": np.nan}
        return Finding(short, False, {**values, "added_ms": (np.nan, np.nan), "smaller_hurt": False}, empty)
    cells = _cells(t, levels, missing)
    base = _base(cells, levels)
    longer = cells[cells["pause_ms"] == levels[-1]]
    extra = longer["p90_ms"].to_numpy() - base.reindex(
        pd.MultiIndex.from_frame(longer[["strategy", "size_bytes"]])
    )
    x = float(np.nanmax(extra))
    values: dict[str, Any] = {"cells": cells, "pauses": levels, "missing": missing, "extra_p90_ms": x}
    parts, holds, smaller_hurt = [], True, True
    for strategy, c in cells.groupby("strategy", sort=True):
        small, large = c["size_bytes"].min(), c["size_bytes"].max()
        s = c[c["size_bytes"] == small].set_index("pause_ms")
        lg = c[c["size_bytes"] == large].set_index("pause_ms")
        steps = ", ".join(f"{_us(s.loc[q, 'median_ms'])} after {q:g} ms" for q in levels[1:])
        shares = ", ".join(f"{s.loc[q, 'slow_share']:.0%}" for q in levels)
        holds &= bool(s.loc[levels[-1], "ratio"] >= SLOW_RATIO)
        add = lg.loc[levels[-1], "median_ms"] - lg.loc[levels[0], "median_ms"]
        smaller_hurt &= bool(s.loc[levels[-1], "ratio"] > lg.loc[levels[-1], "ratio"])
        parts.append(
            f"A {fmt_bytes(small)} `{strategy}` copy took a median {_us(s.loc[levels[0], 'median_ms'])} after "
            f"{levels[0]:g} ms, {steps}. Copies at least {SLOW_RATIO:g}x the median after {levels[0]:g} ms: "
            f"{shares}. At {fmt_bytes(large)} the longest pause "
            f"{_added(add, lg.loc[levels[0], 'median_ms'])} ({lg.loc[levels[-1], 'ratio']:.2f}x)."
        )
    tail = (
        f"was at most {_us(x)} above the same cell's median after {levels[0]:g} ms"
        if x >= 0
        else f"was at least {_us(-x)} below the same cell's median after {levels[0]:g} ms"
    )
    values["gaps_ms"] = gaps = _gaps(t)
    have = [q for q in levels if q in gaps]
    spans = (
        f" Counting the loop's own work, a copy began a median {_and([f'{gaps[q]:.2f}' for q in have])} ms "
        f"after the previous one ended, for pauses of {_and([f'{q:g}' for q in have])} ms."
        if have
        else ""
    ) + spacing_words(gaps, have)  # back to back, or after an idle gap (issue #30)
    verdict = (
        "Before each timed copy came a pause: a tiny GPU operation waited for, then the CPU spinning with the "
        "GPU idle. "
        + " ".join(parts)
        + f" After the longest pause, {levels[-1]:g} ms, every cell's 90th percentile {tail}."
        + spans
        # a run's pause is its env.json's: each pause lies in runs of its own
        + " Each pause ran in its own process, so part of any difference between pauses is the "
        "spread between processes" + _faster(cells, levels) + "."
    )
    if missing:
        lacks = _lacks_text(t, missing)
        verdict += f" Left out, as not timed after every pause: {lacks}."
    envs = _envs(df)
    off = sorted(str(r) for r in set(df.loc[pauses(df).notna(), "run_id"]) if off_gpu(envs.get(r)))
    if off:
        verdict += f" Left out, as timed on no CUDA GPU (copies within host memory): run(s) {', '.join(off)}."
    longest = cells[cells["pause_ms"] == levels[-1]]
    first = base.reindex(pd.MultiIndex.from_frame(longest[["strategy", "size_bytes"]])).to_numpy()
    added = longest["median_ms"].to_numpy() - first
    values["added_ms"] = (float(np.nanmin(added)), float(np.nanmax(added)))
    if smaller_hurt:
        verdict += (
            f" The longest pause {_range(*values['added_ms'])}. For every strategy it slowed the smallest "
            "copy by a larger factor than the largest: it weighs most on the shortest copies."
        )
    values["smaller_hurt"] = smaller_hurt
    return Finding(verdict, holds, values, cells)


def wake_calibration(df: pd.DataFrame, source: str | None = None) -> WakeCalibration:
    """After how long a pause this machine's GPU needs waking, and what that costs, from
    runs measured with ``--pause`` (the ``idle`` kind of a recording): what
    ``outliers.explain`` needs to name a copy ``gpu_wake``.

    ``idle_ms`` is the shortest pause, longer than the shortest recorded, after which for
    every strategy at least :data:`WAKE_SHARE` of the smallest size's copies took at
    least :data:`SLOW_RATIO` times that size's median after the shortest pause (None when
    no pause did: the runs show no wake-up cost). ``extra_ms`` is, over the cells (every
    strategy and size) after pauses of at least ``idle_ms``, the largest p90 less the
    cell's median after the shortest pause. ``gap_ms`` is the median host time from the end
    of one copy to the start of the next over the timed copies after pauses of ``idle_ms``
    (the pause plus the loop's own work): the gap from which ``gpu_wake`` may name a copy,
    since what counts is the time since the previous copy, not the pause alone (see
    ``causes_wake``); None without start times, or where their median gap is shorter than
    the pause. ``shares``: per pause, the smallest such share
    over the strategies. A strategy not timed after every pause is left out.

    Parameters
    ----------
    df
        Runs measured with at least two different pauses (their env.json in
        ``df.attrs["envs"]``).
    source
        The runs in words; by default from ``df.attrs["dataset"]`` and the pauses.

    Returns
    -------
    causes_wake.WakeCalibration

    Raises
    ------
    TypeError
        ``df`` is not a DataFrame (``rows.check_values``; so does :func:`idle_wake`).
    ValueError
        When the table holds fewer than two distinct pauses, or no strategy was timed
        after every pause (the runs cannot tell; the message says what is missing); or
        lacks a column a model reads (``rows.MODEL_COLUMNS``; so does :func:`idle_wake`).
    """
    t, levels, missing = _runs(df)
    short = _shortfall(df, t, levels, missing)
    if short is not None:
        raise ValueError(f"wake_calibration: {short}")
    cells = _cells(t, levels, missing)
    small = cells[cells["size_bytes"] == cells.groupby("strategy")["size_bytes"].transform("min")]
    by_pause = small.pivot_table(index="pause_ms", columns="strategy", values="slow_share").reindex(levels)
    shares = tuple(float(v) for v in by_pause.min(axis=1, skipna=False))
    idle = next((q for q, sh in zip(levels[1:], shares[1:], strict=True) if sh >= WAKE_SHARE), None)
    extra = None
    if idle is not None:
        after = cells[cells["pause_ms"] >= idle]
        key = pd.MultiIndex.from_frame(after[["strategy", "size_bytes"]])
        extra = float(np.nanmax(after["p90_ms"].to_numpy() - _base(cells, levels).reindex(key).to_numpy()))
    gap = _gaps(t).get(idle) if idle is not None else None
    if source is None:
        runs = df.attrs.get("dataset") or "a table"
        source = f"idle runs of {runs}: pauses {', '.join(f'{q:g}' for q in levels)} ms"
    return WakeCalibration(
        idle_ms=None if idle is None else float(idle),
        extra_ms=extra,
        pauses=tuple(float(q) for q in levels),
        shares=shares,
        source=source,
        slow_ratio=SLOW_RATIO,
        min_share=WAKE_SHARE,
        gap_ms=gap,
    )
