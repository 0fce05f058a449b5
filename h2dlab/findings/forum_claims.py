"""Claims about the forum's A100 table and its re-runs: slow stretches in time, the
"1026 faster than 966" question, and what the A100's link can be inferred to be.

Inputs are ``outliers.explain()`` output (for episodes) and raw tables; every function
returns a :class:`h2dlab.findings.claims.Finding`. No torch here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from h2dlab.escape import md_text
from h2dlab.explain.model import fit, timed, value_ms
from h2dlab.findings.claims import Finding, forum_bytes
from h2dlab.recording.datasets import run_env
from h2dlab.recording.env import PCIE_X16_GBPS

__all__ = ["episodes", "link_estimate", "single_shot_spread", "size_pair", "slow_stretch"]

DEVICE_COLUMNS = ("pinned_to_cuda", "direct_to_cuda")


def _need(df: pd.DataFrame, cols: tuple[str, ...], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{what} needs outliers.explain() output: missing column(s) {', '.join(missing)}")


def episodes(explained: pd.DataFrame) -> Finding:
    """The time-ordered stretches of slow rows ``explain()`` found: per (run, strategy,
    episode) the first and last row (``order``), ``rows`` (every row of the stretch) and
    ``flagged`` (those flagged slow, the ones ``explain()`` labels ``episode``), and the
    median and peak of time over expected. ``holds`` when there is at least one."""
    _need(explained, ("episode", "expected_ms"), "episodes()")
    e = explained[explained.episode >= 0]
    e = e.assign(ratio=value_ms(e) / e.expected_ms)
    names = explained.attrs.get("run_names") or {}
    t = (
        e.groupby(["run_id", "strategy", "episode"])
        .agg(
            first_row=("order", "min"),
            last_row=("order", "max"),
            rows=("order", "size"),
            flagged=("is_outlier", "sum"),
            median_ratio=("ratio", "median"),
            peak_ratio=("ratio", "max"),
        )
        .reset_index()
    )
    t.insert(0, "run", t.run_id.map(lambda r: names.get(r, r)))
    t = t.drop(columns="run_id")
    holds = len(t) > 0
    if holds:
        parts = " ".join(
            f"`{r.strategy}`: rows {r.first_row}–{r.last_row}, up to {r.peak_ratio:.1f}x."
            for r in t.itertuples()
        )
        verdict = f"{len(t)} episode(s) of slow copies in time order. {parts}"
    else:
        verdict = "No episode: no stretch of consecutive slow copies in time order."
    return Finding(verdict, holds, {"count": len(t)}, t)


def slow_stretch(
    explained: pd.DataFrame,
    *,
    host_only: str = "pin_memory",
    device: tuple[str, ...] = DEVICE_COLUMNS,
    slow: float = 1.25,
) -> Finding:
    """Over the rows of the episodes in the ``device`` columns, the median time over
    expected per column. ``holds`` when the host-only column stays normal (below
    ``slow``) while every device column is slow together: a slowdown of the device side
    (allocation or the link), not of the host. Where the stretch's sizes ascend with time
    (``values['ascending']``) the verdict says the run cannot tell a moment from a band of
    sizes; where they came in no order, it calls it a moment."""
    _need(explained, ("episode", "expected_ms"), "slow_stretch()")
    d = explained[explained.strategy.isin((host_only, *device))]
    ep = d[(d.episode >= 0) & d.strategy.isin(device)]
    if ep.empty:
        return Finding(
            "No slow stretch in the device columns to examine.", False, {"rows": (None, None)}, pd.DataFrame()
        )
    # The widest stretch may cover two episodes; keep to the last one's span (the latest stretch).
    last = ep[ep.episode == ep.groupby("episode").order.max().idxmax()]
    lo, hi = int(last.order.min()), int(last.order.max())
    for _, g in ep.groupby("episode"):
        if g.order.max() >= lo and g.order.min() <= hi:
            lo, hi = min(lo, int(g.order.min())), max(hi, int(g.order.max()))
    w = d[d.order.between(lo, hi)]
    ratio = (value_ms(w) / w.expected_ms).groupby(w.strategy).median()
    host_r = float(ratio.get(host_only, np.nan))
    dev_r = {s: float(ratio.get(s, np.nan)) for s in device}
    holds = bool(host_r < slow and all(v > slow for v in dev_r.values()))
    devs = " and ".join(f"`{s}` {v:.1f}x" for s, v in dev_r.items())
    # In one run whose sizes ascend with time a moment and a band of sizes look alike.
    ascending = all(
        g.sort_values("order").size_bytes.is_monotonic_increasing for _, g in w.groupby("strategy")
    )
    verdict = f"Rows {lo}–{hi}: {devs} their expected time (median), `{host_only}` {host_r:.2f}x. " + (
        "The host-only column stayed normal while both device-allocating columns slowed together: "
        "consistent with the device side (the cudaMalloc after empty_cache() both share, or the copy itself) "
        "rather than the pinning; the host clock alone cannot say which. "
        + (
            "With sizes ascending in time, this run alone cannot tell a moment from a band of sizes; a "
            "re-run in shuffled order can."
            if ascending
            else "The sizes in the stretch came in no order: a moment, not a property of these sizes."
        )
        if holds
        else "The columns did not split that way: the data does not single out the device side."
    )
    values = {"rows": (lo, hi), "host_ratio": host_r, "device_ratio": dev_r, "ascending": ascending}
    return Finding(verdict, holds, values, ratio.rename("median_ratio").reset_index())


def size_pair(
    explained_a100: pd.DataFrame, reruns: pd.DataFrame, *, small: int = 966, large: int = 1026
) -> Finding:
    """The forum's question "why is seq ``large`` faster than seq ``small``?".

    A100: the two rows (row numbers computed), their times, expected times and episodes.
    Re-runs: per run and strategy the time ratio large / small; per strategy in how many
    runs the larger tensor was faster, and the ratios' range. ``holds`` (the larger is
    really faster) when, for some strategy, it was faster in every re-run and the smaller
    did not make a new pinned block in each of them (``host_allocs``; ``new_block`` names the
    strategies where it did: the allocator's cost, not the size's).
    """
    _need(explained_a100, ("episode", "expected_ms"), "size_pair()")
    bs, bl = forum_bytes(small), forum_bytes(large)
    a = explained_a100[explained_a100.size_bytes.isin([bs, bl])]
    a = a.assign(seq=a.size_bytes.map({bs: small, bl: large}), ms=value_ms(a))
    a100 = a.pivot_table(index="strategy", columns="seq", values=["order", "ms", "expected_ms", "episode"])
    r = reruns[reruns.size_bytes.isin([bs, bl]) & (reruns.error == "")]
    r = r.assign(ms=value_ms(r))
    per = r.pivot_table(index=["run_id", "strategy"], columns="size_bytes", values="ms", aggfunc="median")
    per = (per[bl] / per[bs]).rename("ratio").reset_index()
    by = per.groupby("strategy").ratio.agg(
        runs="size", larger_faster=lambda v: int((v < 1).sum()), lo="min", hi="max", median="median"
    )
    size_ratio = bl / bs
    row_s, row_l = (int(a[a.seq == s].order.min()) for s in (small, large))
    faster_a100 = [s for s in a100.index if a100.loc[s, ("ms", large)] < a100.loc[s, ("ms", small)]]
    in_ep = [s for s in a100.index if a100.loc[s, ("episode", small)] >= 0]
    always = by.index[by.larger_faster == by.runs]
    # A column where seq `small` made a new pinned block in every run is the allocator's, not
    # the size's: the first request of a power-of-two block class pays cudaHostAlloc (issue 31).
    made = r[r.size_bytes == bs].groupby(["run_id", "strategy"]).host_allocs.sum(min_count=1)
    new_block = [s for s in always if (made.xs(s, level="strategy") > 0).sum() == by.loc[s, "runs"]]
    holds = bool(len(set(always) - set(new_block)))
    verdict = (
        f"A100: row {row_s} (seq {small}) and row {row_l} (seq {large}); the larger was faster in "
        f"{', '.join(f'`{s}`' for s in faster_a100) or 'no column'}"
        + (
            f", and row {row_s} lies inside a slow episode in {', '.join(f'`{s}`' for s in in_ep)}"
            if in_ep
            else ""
        )
        + f". Re-runs ({int(by.runs.max())} runs): the time of seq {large} over seq {small}, against a size ratio of "
        f"{size_ratio:.2f}. "
        + " ".join(
            f"`{s}`: median {x['median']:.2f}, range {x.lo:.2f}–{x.hi:.2f}; the larger was faster in "
            f"{int(x.larger_faster)} of {int(x.runs)} runs."
            for s, x in by.iterrows()
        )
        + " "
        + (
            "For at least one column the larger tensor is faster in every run: a real size effect."
            if holds
            else f"In {', '.join(f'`{s}`' for s in new_block)} seq {small} made a new pinned block in every run "
            "(the first request of its power-of-two block class), which the larger one then reused: the "
            "allocator, not a size effect."
            if new_block
            else "No column has the larger tensor faster in every run: run-to-run spread, not a size effect."
        )
    )
    values = {"rows": (row_s, row_l), "size_ratio": size_ratio, "by_strategy": by.to_dict("index"),
              "new_block": list(new_block)}  # fmt: skip
    return Finding(verdict, holds, values, per)


def link_estimate(
    a100: pd.DataFrame, forum_rerun: pd.DataFrame, reuse: pd.DataFrame, *, gen: int = 4
) -> Finding:
    """What the A100 table's pinned copies say about its link, with the per-copy device
    allocation (``empty_cache()`` before each step) taken out.

    The forum protocol's ``pinned_to_cuda`` includes a ``cudaMalloc``; on the re-run
    machine its fitted bandwidth is ``forum_gbps`` against ``reuse_gbps`` for copies into
    a reused buffer (``pinned_reuse``). Their ratio corrects the A100's fitted figure.
    ``holds`` when the corrected figure fits within PCIe Gen``gen`` x16 on paper and exceeds
    the generation below (else the table cannot single out Gen``gen``).
    """

    def gbps(df: pd.DataFrame, strategy: str) -> float:
        f = fit(timed(df[df.strategy == strategy]), by=("strategy",), n_boot=0)
        if f.empty:
            raise ValueError(f"no {strategy} rows to fit")
        return float(f.gbps.iloc[0])

    a_gbps = gbps(a100, "pinned_to_cuda")
    f_gbps = gbps(forum_rerun, "pinned_to_cuda")
    r_gbps = gbps(reuse, "pinned_reuse")
    factor = r_gbps / f_gbps
    corrected = a_gbps * factor
    paper = PCIE_X16_GBPS[gen]
    older = PCIE_X16_GBPS.get(gen - 1)  # the generation below: a figure within it cannot single out ``gen``
    above_older = older is None or corrected > older
    holds = bool(corrected <= paper and above_older)
    gpu = md_text(run_env(forum_rerun).get("gpu_name") or "re-run machine")  # from a file: inert
    verdict = (
        f"The A100 table's pinned copies fit {a_gbps:.1f} GB/s, but each includes a cudaMalloc (a new device allocation) after "
        f"empty_cache(): on the {gpu} the same protocol fits {f_gbps:.1f} GB/s against {r_gbps:.1f} GB/s into a "
        f"reused buffer ({factor:.2f}x). Corrected the same way, the A100 link moves about {corrected:.0f} GB/s: "
        + (
            (f"more than PCIe Gen{gen - 1} x16 allows ({older:.2f} GB/s on paper) and " if older else "")
            + f"within Gen{gen} x16 ({paper:.1f} GB/s on paper): consistent with PCIe Gen{gen} x16."
            if holds
            else f"more than PCIe Gen{gen} x16 allows ({paper:.1f} GB/s on paper), so a faster link."
            if corrected > paper
            else f"within PCIe Gen{gen - 1} x16 too ({older:.2f} GB/s on paper), so the table cannot single out "
            f"Gen{gen}."
        )
    )
    values = {
        "a100_gbps": a_gbps,
        "forum_gbps": f_gbps,
        "reuse_gbps": r_gbps,
        "factor": factor,
        "corrected_gbps": corrected,
        "paper_gbps": paper,
    }
    return Finding(verdict, holds, values)


def single_shot_spread(df: pd.DataFrame, *, top: float = 1.5, min_reps: int = 2) -> Finding:
    """How far one shot strays from its cell: per (strategy, size) with ``min_reps`` or
    more timed repetitions, slowest and fastest repetition over the median, and slowest over
    fastest; per strategy the median, 90th percentile and maximum of those. With two
    repetitions the median is their midpoint, so slowest over median halves the gap between
    two shots; slowest over fastest says how far apart two shots of one size came.
    ``holds`` (one shot can mislead) when some strategy's slowest rep is over ``top`` x its
    median or ``top`` x its fastest."""
    t = timed(df)
    t = t.assign(_v=value_ms(t))
    cell = t.groupby(["strategy", "size_bytes"])["_v"].agg(["median", "min", "max", "size"])
    cell = cell[cell["size"] >= min_reps]
    if cell.empty:
        return Finding(
            f"No size was timed {min_reps} or more times: the spread of one shot is unknown.", False
        )
    reps = int(cell["size"].median())
    cell["max_over_median"] = cell["max"] / cell["median"]
    cell["min_over_median"] = cell["min"] / cell["median"]
    cell["max_over_min"] = cell["max"] / cell["min"]
    by = cell.groupby("strategy").agg(
        typical_max=("max_over_median", "median"),
        p90_max=("max_over_median", lambda v: v.quantile(0.9)),
        worst_max=("max_over_median", "max"),
        lowest_min=("min_over_median", "min"),
        worst_max_over_min=("max_over_min", "max"),
        cells=("max_over_median", "size"),
    )
    worst = by.worst_max.idxmax()
    apart = by.worst_max_over_min.idxmax()
    holds = bool(by.worst_max.max() > top or by.worst_max_over_min.max() > top)
    parts = " ".join(
        f"`{s}`: typically {r.typical_max:.2f}x its median, up to {r.worst_max:.1f}x; up to "
        f"{r.worst_max_over_min:.1f}x its fastest."
        for s, r in by.iterrows()
    )
    two = (  # the median of two shots is their midpoint: only the gap between them says how far apart
        " With two repetitions the median is their midpoint, so the gap to the fastest is the fairer measure."
        if reps == 2
        else ""
    )
    verdict = (
        f"Per size, the slowest of its repetitions ({reps} per size, median) against its median and its "
        f"fastest.{two} {parts} "
        + (
            f"A single shot can be {by.worst_max.max():.1f}x the typical copy (`{worst}`): repeat, and report "
            "medians with their spread."
            if by.worst_max.max() > top
            else f"The slowest and the fastest shot of one size came {by.worst_max_over_min.max():.1f}x apart "
            f"(`{apart}`): one shot could have misled. Repeat, and report medians with their spread."
            if holds
            else f"No repetition strayed beyond {top}x its median or its fastest. For these strategies "
            f"({', '.join(f'`{s}`' for s in by.index)}) and these repetitions, one shot would not have misled."
        )
    )
    return Finding(verdict, holds, {"by_strategy": by.to_dict("index")}, by.reset_index())
