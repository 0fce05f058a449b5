"""The answer to "what is the fastest way?": bandwidth per strategy, what pinning costs,
the small-copy floor, and ONE advice table that notebooks 01, 02, 04 and the README share.

Each function takes its tables explicitly (a sweep run such as ``h200_sweep``'s
``pow2-interleaved``, whose interleaved order keeps slow moments from posing as sizes)
and returns a :class:`h2dlab.findings.Finding` or a table. No torch here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from h2dlab.findings import Finding, spread
from h2dlab.model import medians, timed, value_ms
from h2dlab.units import fmt_bytes

__all__ = [
    "WAYS",
    "advice",
    "bandwidth",
    "best_way",
    "host_copy_ceiling",
    "memory_kind",
    "pin_first_pays",
    "registering_cost",
    "size_text",
    "small_copy_floor",
]

#: The ways the advice table compares: (key, what a user writes, how it is measured).
WAYS = (
    ("pinned_reuse", "dst.copy_(pinned_buf, non_blocking=True)", "pinned buffer, reused"),
    ("pin_cached", "x.pin_memory().to('cuda')", "pin_memory() each step, its block cached"),
    ("pin_cold", "x.pin_memory().to('cuda')", "pin_memory() first call: a new pinned block"),
    ("staged", "h2dlab.transfer.to_device(x)", "to_device: staged through a pinned ring"),
    (
        "pinned_in_place",
        "xp = h2dlab.transfer.pinned(x); xp.to('cuda')",
        "pinned() in place once, then copies",
    ),
    ("pageable", "x.to('cuda')", "pageable .to()"),
)


def size_text(n: float) -> str:
    """``1073741824`` -> ``'1 GiB'`` (binary units; :func:`h2dlab.units.fmt_bytes`, compact)."""
    return fmt_bytes(n, compact=True)


def _ms_text(ms: float) -> str:
    """``0.055`` -> ``'55 µs'``, ``19.47`` -> ``'19.5 ms'``."""
    return f"{ms * 1e3:.0f} µs" if ms < 1 else f"{ms:.3g} ms"


def _cell(rows: pd.DataFrame, size_bytes: int, *, allow_scale: bool = True) -> dict[str, Any]:
    """Median and quartiles (ms) of ``rows`` at ``size_bytes``; where that size was not
    measured, scaled from the GB/s of rows within 4x of it (``basis`` says which)."""
    v = value_ms(rows)
    at = v[rows.size_bytes == size_bytes]
    if len(at):
        s = spread(at)
        return {
            "ms": s["median"],
            "q1": s["q1"],
            "q3": s["q3"],
            "n": s["n"],
            "basis": f"{s['n']} row(s) at this size",
        }
    near = rows[(rows.size_bytes >= size_bytes / 4) & (rows.size_bytes <= size_bytes * 4)]
    if not allow_scale or near.empty:
        return {"ms": np.nan, "q1": np.nan, "q3": np.nan, "n": 0, "basis": "not measured"}
    g = spread(near.size_bytes / value_ms(near) / 1e6)
    return {
        "ms": size_bytes / g["median"] / 1e6,
        "q1": size_bytes / g["q3"] / 1e6,
        "q3": size_bytes / g["q1"] / 1e6,
        "n": g["n"],
        "basis": f"scaled from the GB/s of {g['n']} row(s) at {size_text(near.size_bytes.min())}–"
        f"{size_text(near.size_bytes.max())}",
    }


def _strategy(df: pd.DataFrame, name: str) -> pd.DataFrame:
    return timed(df[df.strategy == name])


def registering_cost(df: pd.DataFrame, size_bytes: int = 2**30) -> Finding:
    """What pinning a buffer in place costs once: ``host_register`` (register, copy,
    unregister) minus the median ``pinned_reuse`` copy, per ``host_register`` repetition
    at ``size_bytes``. The one number every notebook quotes for it."""
    hr = _strategy(df, "host_register")
    hr = hr[hr.size_bytes == size_bytes]
    pr = _strategy(df, "pinned_reuse")
    pr = pr[pr.size_bytes == size_bytes]
    if hr.empty or pr.empty:
        raise ValueError(
            f"registering_cost needs host_register and pinned_reuse rows at {size_text(size_bytes)}"
        )
    cost = spread(value_ms(hr) - float(value_ms(pr).median()))
    verdict = (
        f"Pinning {size_text(size_bytes)} in place (cudaHostRegister, then unregister) costs "
        f"{cost['median']:.0f} ms once (range {cost['min']:.0f}–{cost['max']:.0f} ms over {cost['n']} repetitions)."
    )
    return Finding(verdict, bool(cost["median"] > 0), {"ms": cost, "size_bytes": size_bytes})


def advice(
    sweep: pd.DataFrame,
    size_bytes: int,
    *,
    cold: pd.DataFrame | None = None,
    d2h: pd.DataFrame | None = None,
    batch: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The advice table at ``size_bytes``: one row per way in :data:`WAYS`.

    ``sweep`` is one sweep run with the six strategies; ``pin_memory()`` rows are split by
    the allocator's counter into cached (``host_allocs == 0``) and cold (a new block).
    ``cold`` adds more cold rows (e.g. ``h200_allocator``'s ``pin-emptied`` run).
    ``d2h`` (device→host rows) and ``batch`` (batch rows) add the cases "results back to
    the host" and "a batch of many tensors" (:func:`h2dlab.advice_ways.extra_rows`), each
    compared with its own plain way.

    Returns
    -------
    pandas.DataFrame
        ``way``, ``code``, ``what``, ``per_copy_ms`` with ``q1_ms``/``q3_ms``, ``gbps``,
        ``upfront_ms`` (paid once before the first copy), ``once_ms`` (upfront + one
        copy), ``vs_pageable`` (the plain way's time over this per-copy time: ``x.to()``,
        ``y.cpu()`` or a loop of ``.to()``), ``verdict``, ``basis`` (which rows it comes
        from), ``case`` and ``compared_with`` (its plain way).
    """
    pin = sweep[(sweep.strategy == "pin_then_copy") & (sweep.error == "")]
    cached = timed(pin[pin.host_allocs == 0])
    new = [pin[pin.host_allocs > 0]]
    if cold is not None:
        c = cold[(cold.strategy.isin(["pin_then_copy", "pin_memory"])) & (cold.error == "")]
        new.append(c[c.host_allocs > 0] if c.host_allocs.notna().any() else c[c.rep == 0])
    cold_rows = pd.concat(new)
    src = {
        "pinned_reuse": _strategy(sweep, "pinned_reuse"),
        "pin_cached": cached,
        "pin_cold": cold_rows,
        "staged": _strategy(sweep, "staged"),
        "pinned_in_place": _strategy(sweep, "pinned_reuse"),
        "pageable": _strategy(sweep, "pageable"),
    }
    try:
        upfront = registering_cost(sweep, size_bytes)["ms"]["median"]
    except ValueError:
        upfront = np.nan
    rows = []
    for key, code, what in WAYS:
        c = _cell(src[key], size_bytes)
        rows.append(
            {
                "way": key,
                "code": code,
                "what": what,
                "per_copy_ms": c["ms"],
                "q1_ms": c["q1"],
                "q3_ms": c["q3"],
                "upfront_ms": upfront if key == "pinned_in_place" else 0.0,
                "basis": c["basis"],
            }
        )
    t = pd.DataFrame(rows)
    page = float(t.loc[t.way == "pageable", "per_copy_ms"].iloc[0])
    t = t.assign(
        size_bytes=int(size_bytes), case="one tensor to the GPU", baseline_ms=page, compared_with="x.to()"
    )
    if (
        d2h is not None or batch is not None
    ):  # issue 16: results back, and batches, each against its plain way
        from h2dlab.advice_ways import extra_rows

        t = pd.concat([t, extra_rows(size_bytes, d2h=d2h, batch=batch)], ignore_index=True)
    t["gbps"] = t.size_bytes / t.per_copy_ms / 1e6
    t["once_ms"] = t.upfront_ms + t.per_copy_ms
    t["vs_pageable"] = t.baseline_ms / t.per_copy_ms
    t["verdict"] = np.select(
        [t.vs_pageable > 1.05, t.vs_pageable < 0.95],
        ["faster than " + t.compared_with, "slower than " + t.compared_with],
        "same as " + t.compared_with,
    )
    cols = [
        "size_bytes",
        "way",
        "what",
        "code",
        "per_copy_ms",
        "q1_ms",
        "q3_ms",
        "gbps",
        "upfront_ms",
        "once_ms",
    ]
    return t[cols + ["vs_pageable", "verdict", "basis", "case", "compared_with"]].reset_index(drop=True)


def best_way(table: pd.DataFrame, copies: int = 1, *, case: str = "one tensor to the GPU") -> Finding:
    """The fastest way in an :func:`advice` table for ``copies`` copies of the same data:
    least ``upfront_ms + copies * per_copy_ms``, among the rows of ``case`` (the table's
    ``case`` column). The cached ``pin_memory()`` and the reused pinned buffer presume
    earlier steps, so a single copy (``copies == 1``) to the GPU is judged among the ways
    a fresh pageable tensor can take. ``holds`` when a way beats the case's plain one."""
    t = table[table.case == case] if "case" in table else table
    t = t.dropna(subset=["per_copy_ms"]).copy()
    if t.empty:
        raise ValueError(f"the advice table has no rows for {case!r}")
    if copies == 1:
        t = t[~t.way.isin(["pinned_reuse", "pin_cached"])]
    t["total_ms"] = t.upfront_ms + copies * t.per_copy_ms
    plain = t.way.iloc[0] if "case" in t and case != "one tensor to the GPU" else "pageable"
    base = f"`{t.compared_with.iloc[0]}`" if plain != "pageable" else "`x.to('cuda')`"
    page = float(t.loc[t.way == plain, "total_ms"].iloc[0])
    t = t.sort_values("total_ms")
    b = t.iloc[0]
    size = size_text(int(b.size_bytes))
    what = f"{copies} cop{'y' if copies == 1 else 'ies'} of {size}"
    if plain != "pageable":  # the other cases name their size themselves (a batch: its total)
        what = (case if size in case else f"{case}, {size}") + ("" if copies == 1 else f", {copies} times")
    verdict = (
        f"For {what}: {b.what} (`{b.code}`), {b.total_ms:.1f} ms in all, {page / b.total_ms:.1f}x {base}."
    )
    return Finding(verdict, bool(b.way != plain), {"way": b.way, "total_ms": float(b.total_ms)}, t)


def pin_first_pays(table: pd.DataFrame) -> Finding:
    """PyTorch's tutorial says ``x.pin_memory().to()`` can be slower than ``x.to()``; when?

    From an :func:`advice` table: the cached and the first-call (cold) ``pin_memory()``
    rows against ``x.to()``. ``holds`` when pinning first pays with its block cached.
    ``values['cold_pays']`` says the same for the first call."""
    t = table.set_index("way")
    page, hot, cold = (float(t.loc[k, "per_copy_ms"]) for k in ("pageable", "pin_cached", "pin_cold"))
    size = size_text(int(table.size_bytes.iloc[0]))
    hot_pays, cold_pays = bool(hot < page), bool(cold < page)

    def word(pays: bool) -> str:
        return "faster than" if pays else "slower than"

    basis = str(t.loc["pin_cold"].get("basis", ""))
    estimated = (
        f" (estimated: no first call was timed at {size}; {basis})" if basis.startswith("scaled") else ""
    )
    first = (
        f"on its first call, when the allocator must make a new block, {cold:.2f} ms{estimated}, "
        f"{word(cold_pays)} it. "
        if not np.isnan(cold)
        else "its first call (a new block) was not measured near this size. "
    )
    verdict = (
        f"At {size}, `x.pin_memory().to('cuda')` with its pinned block cached took {hot:.2f} ms, "
        f"{word(hot_pays)} `x.to('cuda')` ({page:.2f} ms); {first}"
        + (
            "The tutorial's warning holds exactly when a new pinned block is made."
            if hot_pays and not cold_pays and not np.isnan(cold)
            else "With its block cached, pinning first pays."
            if hot_pays and np.isnan(cold)
            else "Pinning first pays in both cases here."
            if hot_pays and cold_pays
            else "Pinning first does not pay here, cached or not."
        )
    )
    return Finding(
        verdict, hot_pays, {"pageable_ms": page, "cached_ms": hot, "cold_ms": cold, "cold_pays": cold_pays}
    )


def bandwidth(df: pd.DataFrame) -> Finding:
    """GB/s per (strategy, size) from the median time, with the interquartile range
    (``gbps_lo`` from the slow quartile, ``gbps_hi`` from the fast one). ``holds`` when
    ``pinned_reuse`` is the fastest at the largest size measured."""
    m = medians(df)
    m["gbps_lo"] = m.size_bytes / m.q3_ms / 1e6
    m["gbps_hi"] = m.size_bytes / m.q1_ms / 1e6
    top = int(m.size_bytes.max())
    at = m[m.size_bytes == top].set_index("strategy").gbps.sort_values(ascending=False)
    pk = m.loc[m.gbps.idxmax()]
    holds = bool(at.index[0] == "pinned_reuse")
    order = ", ".join(f"`{s}` {g:.1f}" for s, g in at.items())
    verdict = (
        f"At {size_text(top)} (GB/s, median): {order}. The peak is {pk.gbps:.1f} GB/s "
        f"(`{pk.strategy}` at {size_text(pk.size_bytes)})."
    )
    return Finding(verdict, holds, {"peak_gbps": float(pk.gbps), "at_largest": at.to_dict()}, m)


def memory_kind(df: pd.DataFrame, size_bytes: int, *, margin: float = 1.1) -> Finding:
    """Pinned against pageable at one size: the ratio of median times, with the range the
    quartiles allow. ``holds`` (the memory kind matters) when pinned is over ``margin``
    x faster."""
    m = medians(df).set_index(["strategy", "size_bytes"])
    try:
        p, q = m.loc[("pageable", size_bytes)], m.loc[("pinned_reuse", size_bytes)]
    except KeyError:
        raise ValueError(
            f"memory_kind needs pageable and pinned_reuse rows at {size_text(size_bytes)}"
        ) from None
    r = float(p.median_ms / q.median_ms)
    lo, hi = float(p.q1_ms / q.q3_ms), float(p.q3_ms / q.q1_ms)
    holds = r > margin
    verdict = (
        f"At {size_text(size_bytes)} a pinned copy takes {_ms_text(q.median_ms)}, a pageable one {_ms_text(p.median_ms)}: "
        + (
            f"pinned is {r:.1f}x faster (quartiles allow {lo:.1f}–{hi:.1f}x); the memory kind matters at this size."
            if holds
            else f"within {margin:.1f}x ({r:.2f}x): the per-copy overhead, not the memory kind, sets the time."
        )
    )
    return Finding(verdict, holds, {"ratio": r, "ratio_lo": lo, "ratio_hi": hi})


def small_copy_floor(df: pd.DataFrame, *, same_within: float = 1.5) -> Finding:
    """What the smallest measured copy costs, per strategy (CUDA events and host clock,
    median and quartiles in µs). ``holds`` ("whatever the strategy") when the slowest
    strategy is within ``same_within`` x the fastest."""
    t = timed(df)
    t = t[t.size_bytes == t.size_bytes.min()]
    t = t.assign(event_us=value_ms(t) * 1e3, wall_us=t.wall_ms * 1e3)
    by = (
        t.groupby("strategy")
        .agg(
            event_us=("event_us", "median"),
            q1_us=("event_us", lambda v: v.quantile(0.25)),
            q3_us=("event_us", lambda v: v.quantile(0.75)),
            wall_us=("wall_us", "median"),
        )
        .sort_values("event_us")
    )
    lo, hi = by.event_us.iloc[0], by.event_us.iloc[-1]
    holds = bool(hi / lo <= same_within)
    size = size_text(int(t.size_bytes.iloc[0]))
    verdict = (
        f"At {size} a copy costs {lo:.0f}–{hi:.0f} µs by CUDA events (medians): `{by.index[0]}` fastest, "
        f"`{by.index[-1]}` slowest, {hi / lo:.1f}x apart; by the host clock {by.wall_us.min():.0f}–"
        f"{by.wall_us.max():.0f} µs. "
        + ("The strategy hardly matters at this size." if holds else "The strategy matters even here.")
    )
    return Finding(verdict, holds, {"lo_us": float(lo), "hi_us": float(hi)}, by.reset_index())


def host_copy_ceiling(bench: dict[str, Any], *, method: str = "to_device") -> Finding:
    """Is the host memcpy throughput, measured alone, a ceiling for ``method`` (a staged
    path) in the same benchmark run? Each ``host_copy_<size>_gbps`` is compared with
    ``method`` at that size. ``holds`` when ``method`` beat none of them."""
    rows = pd.DataFrame(bench["rows"])
    ceil = {k: v for k, v in bench["ceilings"].items() if k.startswith("host_copy")}
    if not ceil or method not in set(rows.method):
        raise ValueError(f"the benchmark has no host_copy ceilings or no {method} rows")
    m = rows[rows.method == method].set_index("size_bytes").gbps_median
    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    parts, beaten = [], []
    for k, v in ceil.items():
        label = k.split("_")[2]
        n = int(label[:-3]) * units[label[-3:]]
        if n not in m.index:  # never compare a ceiling with the method at another size
            parts.append(
                f"{v:.0f} GB/s alone at {fmt_bytes(n, compact=True)}, where `{method}` was not timed"
            )
            continue
        got = float(m[n])
        parts.append(f"{v:.0f} GB/s alone against `{method}` {got:.1f} GB/s at {fmt_bytes(n, compact=True)}")
        if got > v:
            beaten.append(label)
    holds = not beaten
    verdict = (
        "The multithreaded host copy (pageable to pinned, all cores), measured in the same run: "
        + "; ".join(parts)
        + ". "
        + (
            "The staged path stayed below it: on this host the memory copy is the wall."
            if holds
            else f"`{method}` beat it at {', '.join(beaten)}: a host copy measured once and alone is no ceiling."
        )
    )
    return Finding(verdict, holds, {"ceilings": ceil, "best_gbps": float(m.max()), "beaten_at": beaten})
