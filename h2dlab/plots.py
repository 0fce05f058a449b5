"""One function per figure: ``(df, *, ax=None, ...) -> Axes``, drawn with seaborn.

Plots read tables; they never measure. Tidy rows go to seaborn with ``hue="strategy"``
(names from :mod:`h2dlab.names`), intervals are seaborn's (``errorbar=("pi", 50)``: the
interquartile range); matplotlib only adds annotations and layout. Every figure has a
title, its legend outside the data, labels that do not collide (:func:`place_labels`) and
a provenance footnote (dataset, GPU, date). Figures comparing runs are in
:mod:`h2dlab.plots_compare` and re-exported here.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.text import Annotation
from matplotlib.ticker import FuncFormatter

from h2dlab import datasets, model
from h2dlab.env import PCIE_X16_GBPS, describe

__all__ = [
    "CAUSE_COLORS", "PALETTE", "allocator_growth", "annotate", "axes_or_new", "bandwidth", "concurrency",
    "footnote", "hline_label", "palette_for", "timed_rows",
    "forum_columns", "latency", "legend_outside", "overlap", "pcie_limit_gbps", "place_labels",
    "pow2_boundaries", "provenance", "size_axis", "size_label", "subplots", "timeline",
]  # fmt: skip

PALETTE = {
    "pageable": "#d62728", "pageable_non_blocking": "#ff9896", "pin_then_copy": "#9467bd",
    "pin_then_copy_register": "#c5b0d5", "pinned_reuse": "#2ca02c", "host_register": "#8c564b",
    "staged": "#1f77b4", "tensordict": "#17becf", "pin_memory": "#9467bd", "pinned_to_cuda": "#2ca02c",
    "direct_to_cuda": "#d62728",
}  # fmt: skip
CAUSE_COLORS = {
    "context_init": "#000000", "host_alloc_growth": "#9467bd", "device_alloc": "#ff7f0e",
    "episode": "#17becf", "unexplained": "#7f7f7f",
}  # fmt: skip
SHORT_CAUSE = {
    "context_init": "context start-up", "host_alloc_growth": "new pinned block",
    "device_alloc": "cudaMalloc after empty_cache", "episode": "episode", "unexplained": "unexplained",
}  # fmt: skip


def subplots(nrows: int = 1, ncols: int = 1, **kw):
    """``plt.subplots`` with constrained layout, so outside legends and footnotes fit."""
    kw.setdefault("figsize", (8.5 * ncols, 4.6 * nrows))
    return plt.subplots(nrows, ncols, layout="constrained", **kw)


def axes_or_new(ax):
    """``ax``, or the axes of a new constrained-layout figure when it is None."""
    return subplots()[1] if ax is None else ax


def size_label(n: float, _pos=None) -> str:
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            v = n / div
            return f"{v:g} {unit}" if v >= 1 else f"{v:.2g} {unit}"
    return f"{n:g} B"


def size_axis(ax) -> None:
    """Log-2 size axis labelled in KiB/MiB/GiB."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(size_label))
    ax.set_xlabel("payload size")


def provenance(df: pd.DataFrame, name: str | None = None) -> str:
    """'dataset X · GPU · date' for a table loaded by datasets.load() or measured live."""
    name = name or df.attrs.get("dataset") or "live run"
    env = datasets.run_env(df)
    return f"data: {name} · {describe(env) if env else 'no fingerprint'}"


def footnote(ax, df: pd.DataFrame | None, name: str | None = None, extra: str = "", text: str | None = None):
    """Write the provenance under the axes (idempotent per axes)."""
    text = text if text is not None else provenance(df, name) + (f" · {extra}" if extra else "")
    for t in list(ax.texts):
        if getattr(t, "_h2dlab_footnote", False):
            t.remove()
    t = ax.text(0.0, -0.16, text, transform=ax.transAxes, fontsize=7, color="#555555", va="top", wrap=True)
    t._h2dlab_footnote = True


def legend_outside(ax, title: str | None = None) -> None:
    """Move the axes' legend to the right of the data."""
    h, lab = ax.get_legend_handles_labels()
    if not h:
        return
    ax.legend(h, lab, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, title=title, title_fontsize=7,
              frameon=False)  # fmt: skip


def _boxes_ok(r, fig, boxes, bb) -> bool:
    inside = bb.x0 >= fig.bbox.x0 and bb.y0 >= fig.bbox.y0 and bb.x1 <= fig.bbox.x1 and bb.y1 <= fig.bbox.y1
    return inside and not any(bb.overlaps(b) for b in boxes)


def place_labels(ax) -> int:
    """Move this axes' annotations (offset-point labels) so that no two text boxes overlap
    and none leaves the figure; a label with no free spot is hidden. Returns how many
    were hidden."""
    fig = ax.figure
    fig.canvas.draw()  # apply the layout first: positions are final after this
    r = fig.canvas.get_renderer()
    movable = [
        t
        for t in ax.texts
        if isinstance(t, Annotation) and t.get_visible() and t.anncoords == "offset points"
    ]
    texts = [*ax.texts, ax.title]  # the title too: a label must not sit on it
    fixed = [t for t in texts if t.get_visible() and t.get_text() and t not in movable]
    boxes = [t.get_window_extent(r) for t in fixed]
    hidden = 0
    for t in movable:
        x0, y0 = t.xyann
        cands = [(x0, y0)] + [
            (dx, dy) for dy in (14, -24, 34, -44, 54, -64, 74, -84, 94) for dx in (8, -60, -120, 40)
        ]
        for xy in cands:
            t.xyann = xy
            bb = t.get_window_extent(r).padded(1)
            if _boxes_ok(r, fig, boxes, bb):
                boxes.append(bb)
                break
        else:
            t.set_visible(False)
            hidden += 1
    return hidden


def timed_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Timed rows (``model.timed``) with ``ms`` (events, else host clock) and ``gbps``."""
    t = model.timed(df)
    return t.assign(ms=model.value_ms(t), gbps=t.size_bytes / model.value_ms(t) / 1e6)


def palette_for(names) -> dict:
    """Colours for these strategy names (dark grey for names without one)."""
    return {s: PALETTE.get(s, "#333333") for s in names}


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


def pcie_limit_gbps(env: dict) -> float | None:
    gen, width = env.get("pcie_gen_max"), env.get("pcie_width_max")
    if gen in PCIE_X16_GBPS and width:
        return PCIE_X16_GBPS[gen] * width / 16
    return None


def hline_label(ax, y: float, text: str, color: str, ls: str) -> None:
    """A horizontal line at ``y`` with its label just above it (moved by place_labels)."""
    ax.axhline(y, color=color, lw=1, ls=ls)
    ax.annotate(text, (0.01, y), xycoords=("axes fraction", "data"), xytext=(0, 3), textcoords="offset points",
                fontsize=7, color=color)  # fmt: skip


def bandwidth(df: pd.DataFrame, *, ax=None, strategies=None, name=None, peak_strategy: str = "pinned_reuse"):
    """GB/s vs size per strategy (median line, IQR band), with the measured peak and the
    PCIe limit on paper."""
    ax = axes_or_new(ax)
    t = timed_rows(df)
    strategies = strategies or list(dict.fromkeys(t.strategy))
    t = t[t.strategy.isin(strategies)]
    sns.lineplot(t, x="size_bytes", y="gbps", hue="strategy", hue_order=strategies, palette=palette_for(strategies),
                 estimator="median", errorbar=("pi", 50), marker="o", markersize=4, ax=ax)  # fmt: skip
    med = model.medians(df)
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
                    (r[x], v[i]), xytext=(8, 14), textcoords="offset points", fontsize=7, color=c,
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


def pow2_boundaries(ax, lo: float, hi: float, *, label=True) -> None:
    """Vertical lines where a size crosses a power of two (a new pinned block size)."""
    for k in range(math.ceil(math.log2(lo)), math.floor(math.log2(hi)) + 1):
        ax.axvline(2**k, color="#9467bd", lw=0.7, ls=":", alpha=0.7)
        if label:
            ax.text(2**k, 1.0, f" {size_label(2**k)}", transform=ax.get_xaxis_transform(), fontsize=6,
                    color="#9467bd", rotation=90, va="top", ha="left")  # fmt: skip


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


from h2dlab.plots_compare import (  # noqa: E402  (re-exported: every figure is reachable as plots.X)
    advice_bars,
    benchmark,
    cache_kept_vs_emptied,
    concurrency,
    device_alloc_cost,
    machines,
    overlap,
    pin_cost,
)  # fmt: skip
from h2dlab.plots_fastpath import staged_timeline  # noqa: E402,F401  (re-exported)

__all__ += ["advice_bars", "benchmark", "cache_kept_vs_emptied", "device_alloc_cost", "machines", "pin_cost"]
from h2dlab.plots_transfer import batch_overhead, directions, duplex_aggregate  # noqa: E402

__all__ += ["batch_overhead", "directions", "duplex_aggregate"]
