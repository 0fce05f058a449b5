"""The host clock against CUDA events (``clocks``): how often the two disagree, for small
and large copies apart, and what events read for host-only work. Re-exported by
:mod:`h2dlab.findings.claims`, where the notebooks call it. No torch here.
"""

from __future__ import annotations

import pandas as pd

from h2dlab.explain.finding import Finding, first_rows, spread

__all__ = ["clocks"]

MIB = 2**20


def clocks(df: pd.DataFrame, *, tolerance: float = 0.05, large_bytes: int = 4 * MIB) -> Finding:
    """Host clock against CUDA events, first operation of each run left out.

    ``holds`` when the claim "for copies of ``large_bytes`` and up the two agree" is true:
    under ``tolerance`` (5 %) of large rows disagree by more than ``tolerance``. Also
    reports, per strategy, the median event / host-clock ratio: near 1.0 for host-only
    work (``pin_memory``) means the events bracketed host work on an idle GPU.
    """
    d = df[(df.error == "") & df.event_ms.notna() & (df.event_ms > 0)]
    d = d[~d.index.isin(first_rows(df).index)]
    if d.empty:
        raise ValueError("the table has no CUDA event times: clocks() compares the host clock with events")
    rel = d.wall_ms / d.event_ms - 1
    off = rel > tolerance
    large = d.size_bytes >= large_bytes
    by = (
        d.assign(disagree=off, large=large, ratio=d.event_ms / d.wall_ms)
        .groupby(["strategy", "large"])
        .agg(rows=("ratio", "size"), event_over_wall=("ratio", "median"), disagree_share=("disagree", "mean"))
        .reset_index()
    )
    gap = spread((d.wall_ms - d.event_ms) * 1000)
    large_share = float(off[large].mean()) if large.any() else float("nan")
    off_large = float(large[off].mean()) if off.any() else float("nan")
    holds = bool(large_share < tolerance)
    ratio = d.event_ms / d.wall_ms
    host = {s: float(ratio[d.strategy == s].median()) for s in d.strategy.unique()}
    small = ~large
    verdict = (
        f"Over {len(d)} steps the host clock read a median {gap['median']:.0f} µs more than the events; "
        f"{off.mean():.0%} of steps differ by over {tolerance:.0%}: "
        + (
            f"{int(off[small].sum())} of the {int(small.sum())} copies under {large_bytes // MIB} MiB and "
            if small.any()
            else f"no copy was under {large_bytes // MIB} MiB; "
        )
        + f"{large_share:.0%} of the {int(large.sum())} of {large_bytes // MIB} MiB or more. "
        + (
            f"At {large_bytes // MIB} MiB and up the two agree ({large_share:.0%} of those steps differ)."
            if holds
            else f"Large copies disagree too ({large_share:.0%} of steps of {large_bytes // MIB} MiB or more): "
            "say which clock you used."
        )
    )
    if "pin_memory" in host:
        r = host["pin_memory"]
        verdict += f" `pin_memory()`, host work only, read {r:.2f}x its host-clock time by CUDA events: " + (
            "with the GPU idle, events bracket host work too; they are no proof that time was spent on the GPU."
            if r > 0.8
            else "the events left most of the host work out."
        )
    return Finding(
        verdict,
        holds,
        {
            "gap_us": gap,
            "share_over": float(off.mean()),
            "large_share_over": large_share,
            "over_that_are_large": off_large,
            "event_over_wall": host,
        },
        by,
    )
