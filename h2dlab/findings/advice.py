"""The answer to "what is the fastest way?": ONE advice engine, :func:`advice`, whose table
notebooks 01, 02, 04, the README and the report's workbook share (:func:`of_recording` picks
the runs they read), what pinning in place costs, the fastest way for n copies, and when
``pin_memory()`` first pays.

Each function takes its tables explicitly (a sweep run such as ``h200_sweep``'s
``pow2-interleaved``, whose interleaved order keeps slow moments from posing as sizes)
and returns a :class:`h2dlab.explain.finding.Finding` or a table. The speed claims (bandwidth
per strategy, pinned against pageable, the small-copy floor, the host-copy ceiling) live
in :mod:`h2dlab.findings.speed` and ``size_text`` in :mod:`h2dlab.explain.finding`; both are
re-exported here. No torch here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from h2dlab.explain.finding import Finding, copies, size_text, spread
from h2dlab.explain.model import timed, value_ms
from h2dlab.explain.rows import check_values, column, normalised
from h2dlab.findings.speed import bandwidth, host_copy_ceiling, memory_kind, small_copy_floor

__all__ = [
    "WAYS",
    "advice",
    "bandwidth",
    "best_way",
    "host_copy_ceiling",
    "memory_kind",
    "of_recording",
    "pin_cached_pays",
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
    ("staged", "h2dlab.transfer.fastpath.to_device(x)", "to_device: staged through a pinned ring"),
    (
        "pinned_in_place",
        "xp = h2dlab.transfer.fastpath.pinned(x); xp.to('cuda')",
        "pinned() in place once, then copies",
    ),
    ("pageable", "x.to('cuda')", "pageable .to()"),
)


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
            "basis": f"{copies(s['n'])} at this size",
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
        "basis": f"scaled from the GB/s of {copies(g['n'])} at {size_text(near.size_bytes.min())}–"
        f"{size_text(near.size_bytes.max())}",
    }


def _strategy(df: pd.DataFrame, name: str) -> pd.DataFrame:
    return timed(df[df.strategy == name])


def registering_cost(df: pd.DataFrame, size_bytes: int = 2**30) -> Finding:
    """What pinning a buffer in place costs once: ``host_register`` (register, copy,
    unregister) minus the median ``pinned_reuse`` copy, per ``host_register`` repetition
    at ``size_bytes``. The one number every notebook quotes for it."""
    df = normalised(df)
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
    the host" and "a batch of many tensors" (:func:`h2dlab.findings.advice_ways.extra_rows`), each
    compared with its own plain way.

    Returns
    -------
    pandas.DataFrame
        ``way``, ``code``, ``what``, ``per_copy_ms`` with ``q1_ms``/``q3_ms``, ``gbps``,
        ``upfront_ms`` (paid once before the first copy), ``once_ms`` (upfront + one
        copy), ``vs_pageable`` (the plain way's time over this per-copy time: ``x.to()``,
        ``y.cpu()`` or a loop of ``.to()``), ``verdict`` ("faster than", "slower than" or
        "same as" its plain way; "not measured" where the way, or "<plain way> not
        measured" where its plain way, has no time), ``basis`` (which rows it comes from),
        ``case`` and ``compared_with`` (its plain way).

    Raises
    ------
    TypeError
        A table is not a DataFrame.
    ValueError
        ``size_bytes`` is not a positive whole number; a table lacks a column the advice
        reads, or ``rows.normalised`` refuses it (one line, naming the argument); the
        sweep has no timed rows. A table built in pandas (``pd.read_csv``) is read as
        ``datasets.read`` reads it.
    """
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, (int, np.integer)) or size_bytes <= 0:
        raise ValueError(f"advice: size_bytes must be a positive whole number of bytes, not {size_bytes!r}")
    sweep = _table(sweep, "sweep")
    if timed(sweep).empty:
        raise ValueError(
            "advice: the sweep has no timed rows (every row a warm-up or an error): nothing to advise from"
        )
    pin = sweep[(sweep.strategy == "pin_then_copy") & (sweep.error == "")]
    allocs = column(pin, "host_allocs")  # NaN where the table has no allocator counters
    cached = timed(pin[allocs == 0])
    new = [pin[allocs > 0]]
    if cold is not None:
        cold = _table(cold, "cold")
        c = cold[(cold.strategy.isin(["pin_then_copy", "pin_memory"])) & (cold.error == "")]
        c_allocs = column(c, "host_allocs")
        new.append(c[c_allocs > 0] if c_allocs.notna().any() else c[c.rep == 0])
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
    # to_device's first calls in a process make its pinned ring: the slowest staged warm-up
    # shows what that cost (not counted in per_copy_ms; best_way's verdict says so)
    warm = sweep[(sweep.strategy == "staged") & sweep.warmup.astype(bool) & (sweep.error == "")]
    first_staged = float(value_ms(warm).max()) if len(warm) else np.nan
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
        from h2dlab.findings.advice_ways import extra_rows

        d2h = None if d2h is None else _table(d2h, "d2h")
        batch = None if batch is None else _table(batch, "batch")
        t = pd.concat([t, extra_rows(size_bytes, d2h=d2h, batch=batch)], ignore_index=True)
    t["gbps"] = t.size_bytes / t.per_copy_ms / 1e6
    t["once_ms"] = t.upfront_ms + t.per_copy_ms
    t["vs_pageable"] = t.baseline_ms / t.per_copy_ms
    t["verdict"] = np.select(  # "same as" only where both times were measured
        [t.per_copy_ms.isna(), t.baseline_ms.isna(), t.vs_pageable > 1.05, t.vs_pageable < 0.95],
        ["not measured", t.compared_with + " not measured", "faster than " + t.compared_with,
         "slower than " + t.compared_with],
        "same as " + t.compared_with,
    )  # fmt: skip
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
    out = t[cols + ["vs_pageable", "verdict", "basis", "case", "compared_with"]].reset_index(drop=True)
    out.attrs["staged_first_call_ms"] = first_staged
    return out


def _table(df: object, name: str) -> pd.DataFrame:
    """``df`` read as ``datasets.read`` would (a ``pd.read_csv`` table's NaN errors are none,
    ``rows.normalised``), or a one-line error naming the argument and what it lacks."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(
            f"advice: {name} must be a pandas DataFrame (a measurement table), not {type(df).__name__}"
        )
    try:
        df = normalised(df)
        check_values(df, ("strategy", "size_bytes", "warmup", "wall_ms", "event_ms", "error"))
    except ValueError as e:
        raise ValueError(f"advice: {name}: {e}") from None
    return df


def of_recording(rec: Any, size_bytes: int) -> pd.DataFrame | None:
    """The advice table at ``size_bytes`` from a recording, read as the notebooks and the
    README read it: the sweep's ``pow2-interleaved`` run (else ``pow2``), the first-call
    ``pin_memory()`` rows of the allocator's ``pin-emptied`` run, and the ``d2h`` run and the
    batch's ``equal`` run where the recording has them.

    Parameters
    ----------
    rec
        A ``h2dlab.recording.session.Recorded``.
    size_bytes
        The payload, a positive whole number of bytes.

    Returns
    -------
    pandas.DataFrame or None
        :func:`advice`'s table; None where the recording has no such sweep run.
    """
    run = next((r for r in ("pow2-interleaved", "pow2") if rec.has("sweep", r)), None)
    sweep = None if run is None else rec.get("sweep", run)  # None: a sweep made with --device cpu
    if sweep is None:
        return None
    cold = rec.get("allocator", "pin-emptied")
    extra = {kind: rec.table(kind, r) for kind, r in (("d2h", "d2h"), ("batch", "equal")) if rec.has(kind, r)}
    return advice(sweep, size_bytes, cold=cold, **extra)


def best_way(table: pd.DataFrame, copies: int = 1, *, case: str = "one tensor to the GPU") -> Finding:
    """The fastest way in an :func:`advice` table for ``copies`` copies of the same data:
    least ``upfront_ms + copies * per_copy_ms``, among the rows of ``case`` (the table's
    ``case`` column). The cached ``pin_memory()`` and the reused pinned buffer presume
    earlier steps, so a single copy (``copies == 1``) to the GPU is judged among the ways
    a fresh pageable tensor can take; for more copies, where one of those two wins, the
    verdict also names the fastest a pageable tensor can take (their up-front cost is not
    counted). ``holds`` when a way beats the case's plain one."""
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
    verdict = f"For {what}: {b.what} (`{b.code}`), {b.total_ms:.1f} ms in all, {page / b.total_ms:.1f}x as fast as {base}."
    fresh = t[~t.way.isin(["pinned_reuse", "pin_cached"])]
    if b.way in ("pinned_reuse", "pin_cached") and len(fresh):  # they presume the data pinned already
        a = fresh.iloc[0]
        verdict += (
            f" That presumes the data already in pinned memory, its pinning not counted; from a pageable tensor "
            f"the fastest is {a.what} (`{a.code}`), {a.total_ms:.1f} ms in all, {page / a.total_ms:.1f}x."
        )
    first = table.attrs.get("staged_first_call_ms", np.nan)
    if b.way == "staged" and np.isfinite(first):
        verdict += (
            f" Not counted: its first calls in a process also make its pinned ring (the sweep's "
            f"slowest staged warm-up took {first:.1f} ms)."
        )
    return Finding(verdict, bool(b.way != plain), {"way": b.way, "total_ms": float(b.total_ms)}, t)


def pin_cached_pays(sweep: pd.DataFrame) -> Finding:
    """From which size does ``x.pin_memory().to('cuda')`` with its pinned block cached beat
    ``x.to('cuda')``? Per size of ``sweep``: the median ``pin_then_copy`` copy that made no
    new block (``host_allocs == 0``) over the median ``pageable`` copy. ``from_bytes`` is the
    smallest size from which every larger size has the ratio below 1. ``holds`` when some
    size has the cached pin slower (the size matters, not only the cache)."""
    sweep = normalised(sweep)
    allocs = column(sweep, "host_allocs")
    pin = timed(sweep[(sweep.strategy == "pin_then_copy") & (allocs == 0)])
    page = _strategy(sweep, "pageable")
    a = pin.assign(_v=value_ms(pin)).groupby("size_bytes")["_v"].median()
    b = page.assign(_v=value_ms(page)).groupby("size_bytes")["_v"].median()
    ratio = (a / b).dropna().sort_index()
    if ratio.empty:
        raise ValueError("pin_cached_pays needs pin_then_copy rows with a cached block and pageable rows")
    slower = ratio[ratio >= 1]
    start = int(ratio.index[-1]) if ratio.iloc[-1] >= 1 else None
    if start is None:
        tail = ratio[::-1].lt(1).cummin()[::-1]  # True from the last size at or above 1 onwards
        start = int(tail[tail].index.min())
    above = ratio[ratio.index >= start]
    holds = bool(len(slower))
    head = "With its pinned block cached, `x.pin_memory().to('cuda')`"
    if ratio.iloc[-1] >= 1:
        verdict = f"{head} was slower than `x.to('cuda')` at the largest size, {size_text(start)}."
    elif not holds:
        verdict = (
            f"{head} took {above.min():.2f}–{above.max():.2f}x the time of `x.to('cuda')` at every size "
            f"measured ({size_text(ratio.index.min())} up)."
        )
    else:
        verdict = (
            f"{head} took {above.min():.2f}–{above.max():.2f}x the time of `x.to('cuda')` from "
            f"{size_text(start)} up. Below {size_text(start)} it was slower at {len(slower)} of "
            f"{int((ratio.index < start).sum())} sizes, up to {slower.max():.1f}x: there pinning first does not "
            "pay even with its block cached."
        )
    return Finding(
        verdict,
        holds,
        {"from_bytes": start, "slower_sizes": [int(x) for x in slower.index]},
        ratio.rename("ratio").reset_index(),
    )


def pin_first_pays(table: pd.DataFrame) -> Finding:
    """PyTorch's tutorial says ``x.pin_memory().to()`` can be slower than ``x.to()``; when?

    From an :func:`advice` table: the cached and the first-call (cold) ``pin_memory()``
    rows against ``x.to()``. ``holds`` when pinning first pays with its block cached.
    ``values['cold_pays']`` says the same for the first call."""
    t = table.set_index("way")
    page, hot, cold = (float(t.loc[k, "per_copy_ms"]) for k in ("pageable", "pin_cached", "pin_cold"))
    size = size_text(int(table.size_bytes.iloc[0]))
    if np.isnan(page) or np.isnan(hot):
        missing = "`x.to('cuda')`" if np.isnan(page) else "cached `pin_memory()`"
        raise ValueError(
            f"pin_first_pays: no {missing} copy was measured at or near {size}: use a size the sweep holds"
        )
    hot_pays, cold_pays = bool(hot < page), bool(cold < page)

    def word(pays: bool) -> str:
        return "faster than" if pays else "slower than"

    basis = str(t.loc["pin_cold"].get("basis", ""))
    estimated = (
        f" (estimated: no copy at {size} made a new block; {basis})" if basis.startswith("scaled") else ""
    )
    estimated = estimated or (f" ({basis})" if basis.endswith("at this size") else "")
    first = (
        f"On its first call, which makes a new block, it took {cold:.2f} ms{estimated}, "
        f"{word(cold_pays)} `x.to('cuda')`. "
        if not np.isnan(cold)
        else "Its first call (a new block) was not measured near this size. "
    )
    verdict = (
        f"At {size}, `x.pin_memory().to('cuda')` with its pinned block cached took {hot:.2f} ms, "
        f"{word(hot_pays)} `x.to('cuda')` ({page:.2f} ms). {first}"
        + (
            f"At {size}, the tutorial's warning holds exactly when a new pinned block is made."
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
