"""One function per figure: ``(df, *, ax=None, ...) -> Axes``, drawn with seaborn.

Plots read tables; they never measure. Tidy rows go to seaborn with ``hue="strategy"``
(names from :mod:`h2dlab.measure.names`), intervals are seaborn's (``errorbar=("pi", 50)``: the
interquartile range); matplotlib only adds annotations and layout. Every figure has a
title, its legend outside the data, labels that do not collide (:func:`place_labels`) and
a provenance footnote (dataset, GPU, date): that shared style is :mod:`h2dlab.show.plots_style`.
This module draws the single-run figures (latency, bandwidth, timeline and its labels,
the forum's columns, allocator growth); figures comparing runs are in
:mod:`h2dlab.show.plots_compare`, both directions and batches in :mod:`h2dlab.show.plots_transfer`,
the staged path in :mod:`h2dlab.show.plots_fastpath`. All of them, and the style, are
re-exported here: every figure is reachable as ``plots.X``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns

from h2dlab.explain import model
from h2dlab.findings import speed as findings_speed
from h2dlab.recording import datasets
from h2dlab.show.plots_compare import (
    advice_bars,
    benchmark,
    cache_kept_vs_emptied,
    concurrency,
    device_alloc_cost,
    machines,
    overlap,
    pin_cost,
)
from h2dlab.show.plots_fastpath import staged_timeline
from h2dlab.show.plots_idle import idle_pause
from h2dlab.show.plots_style import (
    CAUSE_COLORS,
    PALETTE,
    SHORT_CAUSE,
    SMALL_PT,
    axes_or_new,
    footnote,
    hline_label,
    legend_outside,
    palette_for,
    pcie_limit_gbps,
    place_labels,
    pow2_boundaries,
    provenance,
    size_axis,
    size_label,
    subplots,
    timed_rows,
)
from h2dlab.show.plots_transfer import batch_overhead, directions, duplex_aggregate

__all__ = [
    "CAUSE_COLORS", "PALETTE", "SHORT_CAUSE", "SMALL_PT", "allocator_growth", "annotate", "axes_or_new", "bandwidth",
    "footnote", "forum_columns", "hline_label", "latency", "legend_outside", "palette_for",
    "pcie_limit_gbps", "place_labels", "pow2_boundaries", "provenance", "size_axis", "size_label",
    "subplots", "timed_rows", "timeline",
    # re-exported figures of plots_compare, plots_fastpath, plots_idle and plots_transfer
    "advice_bars", "batch_overhead", "benchmark", "cache_kept_vs_emptied", "concurrency", "device_alloc_cost",
    "directions", "duplex_aggregate", "idle_pause", "machines", "overlap", "pin_cost", "staged_timeline",
]  # fmt: skip


def latency(df: pd.DataFrame, *, ax=None, strategies=None, fitted: bool = True, name=None):
    """Latency vs size per strategy (log-log): medians with interquartile bars, and the
    fitted ``overhead + bytes / bandwidth`` line dashed."""
    ax = axes_or_new(ax)
    t = timed_rows(df)
    strategies = strategies or list(dict.fromkeys(t.strategy))
    t = t[t.strategy.isin(strategies)]
    sns.lineplot(t, x="size_bytes", y="ms", hue="strategy", hue_order=strategies, palette=palette_for(strategies),
                 estimator="median", errorbar=("pi", 50), err_style="bars", marker="o", markersize=4, ax=ax,
                 err_kws={"capsize": 2})  # fmt: skip
    if fitted:
        fits = model.fit(df, by=("strategy",), n_boot=0)
        for s in strategies:
            if s in set(fits.strategy):
                xs = np.geomspace(t.size_bytes.min(), t.size_bytes.max(), 100)
                ax.plot(
                    xs,
                    model.predict(fits[fits.strategy == s].iloc[0], xs),
                    "--",
                    lw=0.9,
                    color=PALETTE.get(s),
                )
    size_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel("time per copy (ms, median; bars: IQR)")
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title("time per copy against size")
    legend_outside(ax, "strategy (dashed: fitted model)")
    footnote(ax, df, name)
    return ax


def bandwidth(df: pd.DataFrame, *, ax=None, strategies=None, name=None, peak_strategy: str = "pinned_reuse"):
    """GB/s vs size per strategy, from the median time (line) and the quartile times (band):
    the numbers ``findings_speed.bandwidth`` states (not the median of per-copy GB/s, which
    differs where a cell has few copies), with the measured peak and the PCIe limit on paper."""
    ax = axes_or_new(ax)
    t = timed_rows(df)
    strategies = strategies or list(dict.fromkeys(t.strategy))
    med = findings_speed.bandwidth(df).table  # medians with their quartiles' GB/s: one computation
    colors = palette_for(strategies)
    for s in strategies:
        m = med[med.strategy == s].sort_values("size_bytes")
        ax.plot(m.size_bytes, m.gbps, marker="o", markersize=4, color=colors[s], label=s)
        ax.fill_between(m.size_bytes, m.gbps_lo, m.gbps_hi, color=colors[s], alpha=0.15, lw=0)
    ref = med[med.strategy == peak_strategy] if (med.strategy == peak_strategy).any() else med
    peak = float(ref.gbps.max())
    hline_label(
        ax, peak, f"measured peak {peak:.1f} GB/s ({ref.loc[ref.gbps.idxmax(), 'strategy']})", "#2ca02c", ":"
    )
    env = datasets.run_env(df)
    lim = pcie_limit_gbps(env)
    if lim:
        hline_label(
            ax,
            lim,
            f"PCIe Gen{env['pcie_gen_max']} x{env['pcie_width_max']} on paper: {lim:.0f} GB/s",
            "k",
            "--",
        )
    size_axis(ax)
    ax.set_ylabel("bandwidth (GB/s; line: median, band: IQR)")
    ax.set_ylim(0, max(peak, lim or 0) * 1.2)
    ax.grid(True, alpha=0.3)
    ax.set_title("bandwidth against size")
    legend_outside(ax, "strategy")
    footnote(ax, df, name)
    place_labels(ax)
    return ax


def timeline(explained: pd.DataFrame, *, ax=None, strategy=None, run_id=None, name=None, log=True):
    """Time per copy against execution order, episodes shaded, flagged rows marked by cause."""
    ax = axes_or_new(ax)
    d = explained if run_id is None else explained[explained.run_id == run_id]
    d = (d if strategy is None else d[d.strategy == strategy]).sort_values("order")
    d = d.assign(ms=model.value_ms(d))
    names = list(dict.fromkeys(d.strategy))
    sns.scatterplot(d, x="order", y="ms", hue="strategy", hue_order=names, palette=palette_for(names), s=8,
                    linewidth=0, alpha=0.7, ax=ax)  # fmt: skip
    if "expected_ms" in d:
        for s, g in d.groupby("strategy", sort=False):
            ax.plot(g["order"], g["expected_ms"], "-", lw=0.6, color=PALETTE.get(s, "#333333"), alpha=0.35)
    if "episode" in d:
        for _, g in d[d.episode >= 0].groupby("episode"):
            ax.axvspan(
                g.order.min() - 0.5, g.order.max() + 0.5, color=CAUSE_COLORS["episode"], alpha=0.18, lw=0
            )
    if "is_outlier" in d:
        for cause, g in d[d.is_outlier].groupby("cause"):
            ax.scatter(g["order"], g["ms"], s=28, facecolors="none", edgecolors=CAUSE_COLORS.get(cause, "k"),
                       linewidths=1.2, label=f"flagged: {cause}", zorder=3)  # fmt: skip
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("execution order (time →)")
    ax.set_ylabel("time per copy (ms)")
    ax.grid(True, alpha=0.3)
    ax.set_title(f"{strategy or 'all strategies'} in execution order")
    legend_outside(ax)
    footnote(ax, explained, name, extra="shaded: episodes; line: expected")
    return ax


def _ms(v: float, digits: int) -> str:
    """Milliseconds for a label: ``digits`` significant digits, whole numbers from 100 on
    (1245.6 -> '1246', never '1.25e+03')."""
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.{digits}g}"


def annotate(explained: pd.DataFrame, *, ax, x: str = "order", max_labels: int = 8, causes=None):
    """Label the most extreme flagged points with their cause (arrow and short text).

    ``x`` is the column on the axes' x axis (``order`` or ``size_bytes``); at most
    ``max_labels`` labels, the largest robust z first, one per cause before repeats;
    labels are then moved apart (:func:`place_labels`).
    """
    f = explained[explained.is_outlier]
    if causes is not None:
        f = f[f.cause.isin(causes)]
    if f.empty:
        return ax
    f = f.sort_values("robust_z", ascending=False)
    firsts = f.drop_duplicates("cause")
    picked = pd.concat([firsts, f.drop(firsts.index)]).head(max_labels)
    v = model.value_ms(picked)
    for i, r in picked.iterrows():
        c = CAUSE_COLORS.get(r.cause, "k")
        ax.annotate(f"{SHORT_CAUSE.get(r.cause, r.cause)}\n{_ms(v[i], 3)} ms vs {_ms(r.expected_ms, 2)} expected",
                    (r[x], v[i]), xytext=(8, 14), textcoords="offset points", fontsize=SMALL_PT, color=c,
                    arrowprops={"arrowstyle": "->", "color": c, "lw": 0.8})  # fmt: skip
    place_labels(ax)
    return ax


def forum_columns(df: pd.DataFrame, *, ax=None, name=None, log=True):
    """The forum's three columns against size, one point per timed step."""
    ax = axes_or_new(ax)
    cols = ["pin_memory", "pinned_to_cuda", "direct_to_cuda"]
    d = df[df.strategy.isin(cols)].assign(ms=model.value_ms(df))
    sns.scatterplot(d, x="size_bytes", y="ms", hue="strategy", hue_order=cols, palette=palette_for(cols), s=10,
                    linewidth=0, alpha=0.8, ax=ax)  # fmt: skip
    size_axis(ax)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel("time (ms)")
    ax.grid(True, alpha=0.3)
    ax.set_title("the forum's three columns against size")
    legend_outside(ax)
    footnote(ax, df, name)
    return ax


def allocator_growth(df: pd.DataFrame, *, ax=None, strategy="pin_memory", name=None):
    """Pinning time vs size, rows that made a new pinned block (``host_allocs`` > 0)
    ringed, and the power-of-two block boundaries drawn."""
    ax = axes_or_new(ax)
    g = df[(df.strategy == strategy) & (df.error == "") & ~df.warmup]
    g = g.assign(
        ms=model.value_ms(g), block=np.where(g.host_allocs > 0, "new pinned block", "cached block reused")
    )
    sns.scatterplot(g, x="size_bytes", y="ms", hue="block", palette={"cached block reused": "#777777",
                    "new pinned block": PALETTE.get(strategy, "#9467bd")}, s=10, linewidth=0, ax=ax, legend=False)  # fmt: skip
    new = g[g.host_allocs > 0]
    ax.plot(new.size_bytes, new.ms, "o", ms=7, mfc="none", color=PALETTE.get(strategy, "#9467bd"),
            label="num_host_alloc went up:\na new pinned block")  # fmt: skip
    ax.plot([], [], ".", color="#777777", label="cached block reused")
    size_axis(ax)
    ax.set_yscale("log")
    pow2_boundaries(ax, g.size_bytes.min(), g.size_bytes.max())
    ax.set_ylabel(f"{strategy} time (ms)")
    ax.grid(True, alpha=0.3)
    ax.set_title(f"{strategy}: slow when the host allocator makes a new block")
    legend_outside(ax)
    footnote(ax, df, name, extra="dotted: powers of two")
    return ax
