"""Findings for both directions, both at once and many tensors, computed from tables.

Like :mod:`h2dlab.findings.claims`: each function takes its data explicitly and returns a
:class:`~h2dlab.findings.claims.Finding` whose verdict follows the data. Bandwidth is GB/s
(1e9 bytes per second). No torch here.

- :func:`direction_bandwidth`: GB/s per direction and strategy (sweeps of h2d and d2h).
- :func:`pageable_back`: what ``.cpu()`` into fresh pageable memory costs, with its page faults.
- :func:`duplex_summary`: both directions at once against each alone (kind ``bidir``).
- :func:`batch_overhead` and :func:`best_batch_method`: what each extra tensor costs, and
  the fastest way per batch shape (kind ``batch``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from h2dlab.explain.model import timed, value_ms
from h2dlab.explain.rows import normalised
from h2dlab.findings.claims import Finding
from h2dlab.units import fmt_bytes

__all__ = ["batch_overhead", "best_batch_method", "direction_bandwidth", "duplex_summary", "pageable_back"]

ARROW = {"h2d": "host→device", "d2h": "device→host"}


def _q(v: pd.Series, q: float) -> float:
    return float(v.quantile(q)) if len(v) else np.nan


def _col(df: pd.DataFrame, name: str, default) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(default, index=df.index)


def _rows(df: pd.DataFrame) -> pd.DataFrame:
    """Timed rows with ``direction`` and ``n_tensors`` filled (schema 1 tables: h2d, 1), of
    ``df`` as ``rows.normalised`` reads it (a table from ``pd.read_csv`` included)."""
    t = timed(normalised(df))
    return t.assign(direction=_col(t, "direction", "h2d"), n_tensors=_col(t, "n_tensors", 1), ms=value_ms(t))


def direction_bandwidth(df: pd.DataFrame) -> Finding:
    """Median GB/s (and quartiles) per direction, strategy and size; the verdict compares
    the best strategy of each direction at the largest size both have.

    Parameters
    ----------
    df
        One table or several concatenated (e.g. an h2d sweep and a d2h sweep).

    Returns
    -------
    Finding
        ``table``: direction, strategy, size_bytes, gbps (median), q1, q3, n. ``values``:
        ``size_bytes``, ``best_h2d``/``best_d2h`` (strategy), ``h2d_gbps``/``d2h_gbps``,
        ``d2h_over_h2d``. ``holds``: both directions were measured.
    """
    t = _rows(df)
    t = t.assign(gbps=t.size_bytes / t.ms / 1e6)
    g = t.groupby(["direction", "strategy", "size_bytes"])["gbps"]
    table = pd.DataFrame({"gbps": g.median(), "q1": g.quantile(0.25), "q3": g.quantile(0.75), "n": g.size()})
    table = table.reset_index()
    dirs = set(table.direction)
    if not {"h2d", "d2h"} <= dirs:
        have = ", ".join(ARROW[d] for d in sorted(dirs) if d in ARROW) or "no timed copies"
        return Finding(f"Only one direction was measured ({have}): nothing to compare.", False, {}, table)
    common = set(table[table.direction == "h2d"].size_bytes) & set(table[table.direction == "d2h"].size_bytes)
    if not common:
        return Finding("The two directions share no size: nothing to compare.", False, {}, table)
    size = max(common)
    at = table[table.size_bytes == size]
    best = {d: at[at.direction == d].sort_values("gbps").iloc[-1] for d in ("h2d", "d2h")}
    ratio = best["d2h"].gbps / best["h2d"].gbps
    values = {"size_bytes": int(size), "best_h2d": best["h2d"].strategy, "best_d2h": best["d2h"].strategy,
              "h2d_gbps": float(best["h2d"].gbps), "d2h_gbps": float(best["d2h"].gbps),
              "d2h_over_h2d": float(ratio)}  # fmt: skip
    back = at[at.direction == "d2h"].sort_values("gbps", ascending=False)
    # a runner-up within 1 %: which of the two wins is noise, so both are named
    tied = [r.strategy for r in back.iloc[1:].itertuples() if r.gbps >= best["d2h"].gbps * 0.99]
    way = best["d2h"].strategy + (f", tied within 1 % with {', '.join(tied)}" if tied else "")
    values["tied_d2h"] = tied
    verdict = (
        f"At {fmt_bytes(size, compact=True)}, the fastest way back (device→host, {way}) moves "
        f"{best['d2h'].gbps:.1f} GB/s, {ratio:.0%} of the fastest way there (host→device, "
        f"{best['h2d'].strategy}: {best['h2d'].gbps:.1f} GB/s; medians)."
    )
    return Finding(verdict, True, values, table)


def pageable_back(df: pd.DataFrame, *, strategy: str = "d2h_pageable", faulting: float = 0.9) -> Finding:
    """``y.cpu()`` (``strategy``: device→host into a new pageable tensor) per size, with the
    per-copy evidence the table records: minor page faults per 4 KiB page of the output.

    ``holds`` when the largest size moves under half the best GB/s of the sizes below the
    first faulting one (a size whose every copy took ``faulting`` or more faults per page).
    The verdict says from which size on the copies faulted and what the smaller ones did;
    it names no cause beyond the counted faults.

    Returns
    -------
    Finding
        ``table``: size_bytes, gbps (median), faults_per_page (median), n. ``values``:
        ``size_bytes`` (the largest), ``from_bytes`` (first faulting size, or None),
        ``gbps_before``, ``gbps_largest``, ``vs_pageable`` (over ``x.to('cuda')`` from
        pageable memory at the largest size, whose median GB/s is ``pageable_gbps``; both
        NaN without such copies) and ``faults_per_page`` (median over the faulting sizes).
    """
    t = _rows(df)
    t = t[(t.direction == "d2h") & (t.strategy == strategy)]
    if t.empty:
        return Finding(f"The table has no `{strategy}` copies back to the host.", False)
    t = t.assign(gbps=t.size_bytes / t.ms / 1e6, fpp=_col(t, "minflt", np.nan) / (t.size_bytes / 4096))
    g = t.groupby("size_bytes")
    table = pd.DataFrame(
        {"gbps": g.gbps.median(), "faults_per_page": g.fpp.median(), "n": g.size(), "_low": g.fpp.min()}
    ).reset_index()
    largest = table.iloc[-1]
    size = fmt_bytes(int(largest.size_bytes), compact=True)
    head = f"`y.cpu()` ({strategy}) moved {largest.gbps:.1f} GB/s at {size}"
    h2d = _rows(df)
    h2d = h2d[
        (h2d.direction == "h2d") & (h2d.strategy == "pageable") & (h2d.size_bytes == largest.size_bytes)
    ]
    if len(h2d):
        there = float((h2d.size_bytes / h2d.ms / 1e6).median())
        head += f", {largest.gbps / there:.2f}x `x.to('cuda')` from pageable memory ({there:.1f} GB/s)"
        vs = largest.gbps / there
    else:
        vs = there = np.nan
    faulting_rows = table[table._low >= faulting]
    values = {"size_bytes": int(largest.size_bytes), "from_bytes": None, "gbps_before": np.nan,
              "gbps_largest": float(largest.gbps), "vs_pageable": np.nan, "faults_per_page": np.nan,
              "pageable_gbps": float(there)}  # fmt: skip
    if table.faults_per_page.isna().all():
        return Finding(head + "; the table has no page-fault counts (`minflt`) to say more.", False, values,
                       table.drop(columns="_low"))  # fmt: skip
    if faulting_rows.empty:
        return Finding(
            head + "; no size faulted its output in page by page.", False, values, table.drop(columns="_low")
        )
    start = int(faulting_rows.size_bytes.min())
    before = table[table.size_bytes < start]
    after = table[table.size_bytes >= start]
    values.update(from_bytes=start, gbps_before=float(before.gbps.max()) if len(before) else np.nan,
                  vs_pageable=float(vs), faults_per_page=float(after.faults_per_page.median()))  # fmt: skip
    holds = bool(len(before) and largest.gbps < 0.5 * values["gbps_before"])
    start_text = fmt_bytes(start, compact=True)
    lo, hi = f"{after.faults_per_page.min():.2f}", f"{after.faults_per_page.max():.2f}"
    few = float(before.faults_per_page.max()) if len(before) else np.nan
    verdict = (
        f"{head}. Each call makes a new pageable output. From {start_text} on, every copy took at least "
        f"{faulting} minor page faults per 4 KiB page of it ({lo if lo == hi else f'{lo}–{hi}'}, median per size): "
        "the kernel mapped the output page by page during the copy"
        + (
            f". Below {start_text}: {'no faults' if few == 0 else f'at most {few:.2f} per page'}, and up to "
            f"{values['gbps_before']:.1f} GB/s. The drop comes with the faults: copy results back into a "
            "reused buffer (pinned for full speed)."
            if holds
            else "."
        )
    )
    return Finding(verdict, holds, values, table.drop(columns="_low"))


def duplex_summary(df: pd.DataFrame) -> Finding:
    """Both directions at once against each alone, per size (a ``bidir`` table).

    Per size: the median GB/s of each direction alone and within the duplex pairs, the
    pairs' aggregate (both sizes over the later of the two ends, median over pairs), the
    sum of the two alone (what a perfect full-duplex link would give) and the ratio.

    Returns
    -------
    Finding
        ``table``: size_bytes, alone_h2d_gbps, alone_d2h_gbps, duplex_h2d_gbps,
        duplex_d2h_gbps, aggregate_gbps, aggregate_q1, aggregate_q3, ideal_gbps,
        of_ideal, of_one_way (aggregate over the faster direction alone), pairs.
        ``holds``: at the largest size, both at once move at least 1.5 times the faster
        direction alone (the link behaves as full duplex).
    """
    t = _rows(df)
    t = t.assign(gbps=t.size_bytes / t.ms / 1e6)
    out = []
    for size, s in t.groupby("size_bytes"):
        alone, duo = s[s.strategy == "alone"], s[s.strategy == "duplex"]
        pairs = duo.groupby(["run_id", "rep"]).filter(lambda g: set(g.direction) == {"h2d", "d2h"})
        span = pairs.groupby(["run_id", "rep"])["ms"].max()
        agg = 2 * size / span / 1e6
        rec = {"size_bytes": int(size)}
        for d in ("h2d", "d2h"):
            rec[f"alone_{d}_gbps"] = float(alone[alone.direction == d].gbps.median())
            rec[f"duplex_{d}_gbps"] = float(pairs[pairs.direction == d].gbps.median())
        rec.update(aggregate_gbps=float(agg.median()), aggregate_q1=_q(agg, 0.25), aggregate_q3=_q(agg, 0.75),
                   pairs=len(span))  # fmt: skip
        rec["ideal_gbps"] = rec["alone_h2d_gbps"] + rec["alone_d2h_gbps"]
        rec["of_ideal"] = rec["aggregate_gbps"] / rec["ideal_gbps"]
        rec["of_one_way"] = rec["aggregate_gbps"] / max(rec["alone_h2d_gbps"], rec["alone_d2h_gbps"])
        out.append(rec)
    table = pd.DataFrame(out)
    whole = table[table.pairs.gt(0) & table.ideal_gbps.notna()] if len(table) else table
    if whole.empty:
        return Finding(
            "No size has a complete both-ways pair and each direction alone: nothing to compare.",
            False,
            {},
            table,
        )
    last = whole.iloc[-1]  # the largest size with all three
    holds = bool(last.of_one_way >= 1.5)
    verdict = (
        f"At {fmt_bytes(int(last.size_bytes), compact=True)} each way, both directions at once move "
        f"{last.aggregate_gbps:.1f} GB/s together: both copies' bytes over the time until the later ended, "
        f"median of {int(last.pairs)} pairs. Each on its own clock, host→device moved {last.duplex_h2d_gbps:.1f} "
        f"GB/s and device→host {last.duplex_d2h_gbps:.1f}. Together that is {last.of_ideal:.0%} of the two directions alone "
        f"({last.alone_h2d_gbps:.1f} + {last.alone_d2h_gbps:.1f} = {last.ideal_gbps:.1f} GB/s) and "
        f"{last.of_one_way:.2f}× the faster one alone: "
        + (
            "the link is full duplex."
            if holds
            else "here the two directions did not add up. One run cannot tell the link from the host "
            "(its memory, its cores) as the cause: compare another recording of the same machine."
        )
    )
    return Finding(verdict, holds, last.to_dict(), table)


def _batch_medians(df: pd.DataFrame) -> pd.DataFrame:
    """Median host-clock ms per (strategy, size_bytes, n_tensors): a batch is ready when
    its last tensor is, so the synchronised host clock is the honest measure."""
    t = timed(df)
    t = t.assign(n_tensors=_col(t, "n_tensors", 1), ms=t.wall_ms)
    g = t.groupby(["strategy", "size_bytes", "n_tensors"])["ms"]
    m = pd.DataFrame({"ms": g.median(), "q1": g.quantile(0.25), "q3": g.quantile(0.75), "n": g.size()})
    return m.reset_index()


def batch_overhead(df: pd.DataFrame) -> Finding:
    """What each extra tensor in a batch costs, per method and batch total.

    ``per_tensor_us`` = (median ms of N tensors − median ms of one tensor of the same
    total) / (N − 1), in µs: the price of splitting the same bytes into more tensors.

    Returns
    -------
    Finding
        ``table``: strategy, size_bytes, n_tensors, ms, q1, q3, n, gbps, us_per_tensor
        (ms / N), per_tensor_us (NaN where N = 1 or no single-tensor batch was measured).
        ``values``: per method, its median ``per_tensor_us`` at the largest N.
        ``holds``: every method measured has a finite per-tensor cost.
    """
    m = _batch_medians(df)
    one = m[m.n_tensors == 1].set_index(["strategy", "size_bytes"])["ms"]
    base = pd.Series(
        [one.get((s, b), np.nan) for s, b in zip(m.strategy, m.size_bytes, strict=True)], index=m.index
    )
    extra = m.n_tensors > 1
    m["gbps"] = m.size_bytes / m.ms / 1e6
    m["us_per_tensor"] = m.ms * 1e3 / m.n_tensors
    m["per_tensor_us"] = np.where(extra, (m.ms - base) * 1e3 / (m.n_tensors - 1).clip(lower=1), np.nan)
    if m.empty:
        return Finding("No timed batch copies.", False, {}, m)
    top = m[m.n_tensors == m.n_tensors.max()]
    per = top.groupby("strategy")["per_tensor_us"].median().sort_values()
    if per.isna().all():
        return Finding(
            "No single-tensor batches to compare with: the per-tensor cost is unknown.", False, {}, m
        )
    n = int(top.n_tensors.iloc[0])
    parts = ", ".join(f"{s} {v:+.1f} µs" for s, v in per.dropna().items())
    verdict = f"Each extra tensor in a batch of {n} costs (median over totals, vs one tensor of the same bytes): {parts}."
    if (per.dropna() < 0).any():
        verdict += " A negative cost means the split batch was faster than one tensor of the same bytes."
    return Finding(verdict, bool(per.notna().all()), per.to_dict(), m)


def best_batch_method(df: pd.DataFrame, *, baseline: str = "loop_to", tie: float = 0.02) -> Finding:
    """The fastest method per batch shape (total, N), and its speed-up over ``baseline``;
    the verdict names the runner-up when its median is within ``tie`` (a fraction) of the best.

    Returns
    -------
    Finding
        ``table``: size_bytes, n_tensors, best, best_ms, baseline_ms, speedup, runner_up,
        runner_up_ms.
        ``values``: the row of the largest total with the most tensors. ``holds``: some
        method beats the baseline at that shape.
    """
    m = _batch_medians(df)
    rows = []
    for (size, n), g in m.groupby(["size_bytes", "n_tensors"]):
        g = g.sort_values("ms")
        base = g.loc[g.strategy == baseline, "ms"]
        b = float(base.iloc[0]) if len(base) else np.nan
        rows.append({"size_bytes": int(size), "n_tensors": int(n), "best": g.strategy.iloc[0],
                     "best_ms": float(g.ms.iloc[0]), "baseline_ms": b, "speedup": b / float(g.ms.iloc[0]),
                     "runner_up": g.strategy.iloc[1] if len(g) > 1 else "",
                     "runner_up_ms": float(g.ms.iloc[1]) if len(g) > 1 else np.nan})  # fmt: skip
    table = pd.DataFrame(rows)
    if table.empty:
        return Finding("No timed batch copies.", False, {}, table)
    last = table.sort_values(["size_bytes", "n_tensors"]).iloc[-1]
    holds = bool(last.best != baseline and np.isfinite(last.speedup))
    verdict = (
        f"For {int(last.n_tensors)} tensors totalling {fmt_bytes(int(last.size_bytes), compact=True)}, the fastest way is "
        f"`{last.best}` ({last.best_ms:.2f} ms, median)"
        + (
            f", {last.speedup:.1f}× a loop of .to() ({last.baseline_ms:.2f} ms)."
            if np.isfinite(last.speedup)
            else "."
        )
        + (
            f" `{last.runner_up}` came within {last.runner_up_ms / last.best_ms - 1:.1%} of it "
            f"({last.runner_up_ms:.2f} ms): for practical purposes a tie."
            if last.runner_up_ms <= last.best_ms * (1 + tie)
            else ""
        )
        + _beforehand_note(last)
        + _unmeasured_note(df)
    )
    return Finding(verdict, holds, last.to_dict(), table)


def _unmeasured_note(df: pd.DataFrame) -> str:
    """ " `tensordict` was not measured here (unavailable: ...)." for a method every timed row
    of which failed, so a reader does not look for it in the figure or the verdict."""
    t = df[~df["warmup"].astype(bool)] if "warmup" in df.columns else df
    if "error" not in t.columns or t.empty:
        return ""
    failed = t.groupby("strategy")["error"].agg(lambda e: bool((e.astype(str) != "").all()))
    parts = []
    for name in failed[failed].index:
        first = str(t.loc[t["strategy"] == name, "error"].iloc[0]).split(":", 1)[0]
        parts.append(f"`{name}` ({first})")
    if not parts:
        return ""
    return f" Not measured in this recording, every copy failed: {', '.join(parts)}."


def _beforehand_note(last: pd.Series) -> str:
    """A sentence naming the methods in the verdict whose sources were pinned beforehand."""
    from h2dlab.measure.names import PINNED_BEFOREHAND

    named = [m for m in dict.fromkeys((last.best, last.runner_up)) if m in PINNED_BEFOREHAND]
    if not named:
        return ""
    return (
        f" {' and '.join(f'`{m}`' for m in named)} copied from tensors pinned beforehand: the pinning was not "
        "timed. A program that pins every step pays it too."
    )
