"""What a pause costs the next copy: the ``idle`` runs of a recording (``h2dlab measure
--pause MS``: the kit wakes the GPU, spins MS ms with the GPU idle, then times the copy),
compared from the tables. Re-exported by :mod:`h2dlab.factors`. No torch here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from h2dlab.causes_wake import WakeCalibration
from h2dlab.finding import Finding
from h2dlab.rows import timed, value_ms
from h2dlab.units import fmt_bytes

__all__ = ["SLOW_RATIO", "WAKE_SHARE", "idle_wake", "pauses", "wake_calibration"]

#: A copy counts as slowed by the pause at this multiple of the same cell's median after
#: the shortest pause.
SLOW_RATIO = 1.5
#: A pause wakes the GPU up when at least this share of every strategy's smallest copies
#: after it are slowed (:data:`SLOW_RATIO`): ``wake_calibration``'s threshold.
WAKE_SHARE = 0.2


def pauses(df: pd.DataFrame) -> pd.Series:
    """Per row, the pause (ms) its run spun with the GPU idle before each timed copy, read
    from the run's env.json (``spec.pause_ms``); NaN for runs measured without ``--pause``."""
    envs = df.attrs.get("envs") or {}

    def of(run_id: object) -> float:
        v = ((envs.get(run_id) or {}).get("spec") or {}).get("pause_ms")
        return float(v) if v is not None else np.nan

    return df["run_id"].map(of).astype(float)


def _us(ms: float) -> str:
    return f"{ms * 1e3:.0f} µs" if ms < 1 else f"{ms:.2f} ms"


def _cells(df: pd.DataFrame, who: str = "idle_wake") -> tuple[pd.DataFrame, list[float]]:
    """:func:`idle_wake`'s cells (see there) and the pauses, ascending."""
    t = timed(df)
    p = pauses(t)
    levels = sorted(p.dropna().unique())
    if len(levels) < 2:
        raise ValueError(
            f"{who} needs runs measured with at least two different pauses (h2dlab measure --pause MS); "
            f"this table has {len(levels)}"
        )
    t = t.assign(pause_ms=p, v=value_ms(t)).dropna(subset=["pause_ms"])
    g = t.groupby(["strategy", "size_bytes", "pause_ms"])["v"]
    cells = pd.DataFrame({"median_ms": g.median(), "p90_ms": g.quantile(0.9), "n": g.size()}).reset_index()
    base = _base(cells, levels)
    key = pd.MultiIndex.from_frame(cells[["strategy", "size_bytes"]])
    cells["ratio"] = cells["median_ms"].to_numpy() / base.reindex(key).to_numpy()
    tb = base.reindex(pd.MultiIndex.from_frame(t[["strategy", "size_bytes"]])).to_numpy()
    t = t.assign(slow=t["v"].to_numpy() >= SLOW_RATIO * tb)
    share = t.groupby(["strategy", "size_bytes", "pause_ms"])["slow"].mean().reset_index(name="slow_share")
    cells = cells.merge(share, on=["strategy", "size_bytes", "pause_ms"])
    return cells, levels


def _base(cells: pd.DataFrame, levels: list[float]) -> pd.Series:
    """Each (strategy, size)'s median after the shortest pause."""
    return cells[cells["pause_ms"] == levels[0]].set_index(["strategy", "size_bytes"])["median_ms"]


def idle_wake(df: pd.DataFrame) -> Finding:
    """Median time of each (strategy, size) after each pause, from runs measured with
    ``--pause`` (the ``idle`` kind of a recording).

    ``values["cells"]``: one row per strategy, size and pause with ``median_ms``,
    ``p90_ms``, ``n``, ``ratio`` (median over the same cell's median after the shortest
    pause) and ``slow_share`` (share of copies at least :data:`SLOW_RATIO` times that
    median). ``values["pauses"]``: the pauses, ascending; ``values["extra_p90_ms"]``: over
    every cell, the largest p90 less the shortest pause's median, after pauses of at least
    ``values["pauses"][1]`` (how much a pause can add). ``holds`` when, for every
    strategy, the smallest size's median after the longest pause is at least
    :data:`SLOW_RATIO` times its median after the shortest.

    Raises
    ------
    ValueError
        When the table holds fewer than two distinct pauses.
    """
    cells, levels = _cells(df)
    base = _base(cells, levels)
    longer = cells[cells["pause_ms"] >= levels[1]]
    extra = longer["p90_ms"].to_numpy() - base.reindex(
        pd.MultiIndex.from_frame(longer[["strategy", "size_bytes"]])
    )
    values: dict[str, Any] = {"cells": cells, "pauses": levels, "extra_p90_ms": float(np.nanmax(extra))}
    parts, holds, smaller_hurt = [], True, True
    for strategy, c in cells.groupby("strategy", sort=True):
        small, large = c["size_bytes"].min(), c["size_bytes"].max()
        s = c[c["size_bytes"] == small].set_index("pause_ms")
        lg = c[c["size_bytes"] == large].set_index("pause_ms")
        steps = ", ".join(
            f"{_us(s.loc[q, 'median_ms'])} after {q:g} ms ({s.loc[q, 'slow_share']:.0%} of copies at least "
            f"{SLOW_RATIO:g}x the median after {levels[0]:g} ms)"
            for q in levels[1:]
        )
        holds &= bool(s.loc[levels[-1], "ratio"] >= SLOW_RATIO)
        add = lg.loc[levels[-1], "median_ms"] - lg.loc[levels[0], "median_ms"]
        smaller_hurt &= bool(s.loc[levels[-1], "ratio"] > lg.loc[levels[-1], "ratio"])
        parts.append(
            f"a {fmt_bytes(small)} `{strategy}` copy took a median {_us(s.loc[levels[0], 'median_ms'])} after "
            f"{levels[0]:g} ms, {steps}; at {fmt_bytes(large)} the longest pause added {_us(add)} to "
            f"{_us(lg.loc[levels[0], 'median_ms'])} ({lg.loc[levels[-1], 'ratio']:.2f}x)"
        )
    verdict = (
        "With the GPU woken and then left idle for a pause before each timed copy (the CPU spinning "
        "meanwhile): "
        + "; ".join(parts)
        + f". After pauses of {levels[1]:g} ms or more, the slowest tenth of "
        f"copies took at most {_us(values['extra_p90_ms'])} more than the same copy right after a wake."
    )
    longest = cells[cells["pause_ms"] == levels[-1]]
    first = base.reindex(pd.MultiIndex.from_frame(longest[["strategy", "size_bytes"]])).to_numpy()
    added = longest["median_ms"].to_numpy() - first
    values["added_ms"] = (float(np.nanmin(added)), float(np.nanmax(added)))
    if smaller_hurt:
        verdict += (
            f" The longest pause added {_us(values['added_ms'][0])} to {_us(values['added_ms'][1])} to the "
            "medians, and for every strategy it slowed the smallest copy by a larger factor than the largest: "
            "it weighs most on the shortest copies."
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
    cell's median after the shortest pause. ``shares``: per pause, the smallest such share
    over the strategies (NaN where a strategy lacks the pause).

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
    ValueError
        When the table holds fewer than two distinct pauses.
    """
    cells, levels = _cells(df, "wake_calibration")
    small = cells[cells["size_bytes"] == cells.groupby("strategy")["size_bytes"].transform("min")]
    by_pause = small.pivot_table(index="pause_ms", columns="strategy", values="slow_share").reindex(levels)
    shares = tuple(float(v) for v in by_pause.min(axis=1, skipna=False))
    idle = next((q for q, sh in zip(levels[1:], shares[1:], strict=True) if sh >= WAKE_SHARE), None)
    extra = None
    if idle is not None:
        after = cells[cells["pause_ms"] >= idle]
        key = pd.MultiIndex.from_frame(after[["strategy", "size_bytes"]])
        extra = float(np.nanmax(after["p90_ms"].to_numpy() - _base(cells, levels).reindex(key).to_numpy()))
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
    )
