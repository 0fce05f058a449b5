"""One function per figure: ``(df, *, ax=None, ...) -> Axes``.

Plots read tables; they never measure. Every figure carries a provenance footnote
(dataset, GPU, date) taken from the table's fingerprint.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter

from h2dlab import datasets, model
from h2dlab.env import PCIE_X16_GBPS, describe

PALETTE = {
    "pageable": "#d62728",
    "pageable_non_blocking": "#ff9896",
    "pin_then_copy": "#9467bd",
    "pinned_reuse": "#2ca02c",
    "host_register": "#8c564b",
    "staged": "#1f77b4",
    "pin_memory": "#9467bd",
    "pinned_to_cuda": "#2ca02c",
    "direct_to_cuda": "#d62728",
}
CAUSE_COLORS = {
    "context_init": "#000000",
    "host_alloc_growth": "#9467bd",
    "device_alloc": "#ff7f0e",
    "episode": "#17becf",
    "unexplained": "#7f7f7f",
}


def _ax(ax):
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.8))
    return ax


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


def footnote(ax, df: pd.DataFrame, name: str | None = None, extra: str = "") -> None:
    """Write the provenance under the axes (idempotent per axes)."""
    text = provenance(df, name) + (f" · {extra}" if extra else "")
    for t in ax.texts:
        if getattr(t, "_h2dlab_footnote", False):
            t.remove()
    t = ax.text(0.0, -0.16, text, transform=ax.transAxes, fontsize=7, color="#555555", va="top")
    t._h2dlab_footnote = True


def latency(df: pd.DataFrame, *, ax=None, strategies=None, fitted: bool = True, name=None):
    """Latency vs size per strategy (log-log): medians with interquartile bars, and the
    fitted ``overhead + bytes / bandwidth`` line dashed."""
    ax = _ax(ax)
    med = model.medians(df)
    strategies = strategies or list(dict.fromkeys(med["strategy"]))
    fits = model.fit(df, by=("strategy",), n_boot=0) if fitted else pd.DataFrame()
    for s in strategies:
        m = med[med.strategy == s].sort_values("size_bytes")
        if m.empty:
            continue
        c = PALETTE.get(s)
        ax.errorbar(
            m.size_bytes,
            m.median_ms,
            yerr=[m.median_ms - m.q1_ms, m.q3_ms - m.median_ms],
            fmt="o-",
            ms=3,
            lw=1.2,
            capsize=2,
            color=c,
            label=s,
        )
        if len(fits) and s in set(fits.strategy):
            f = fits[fits.strategy == s].iloc[0]
            xs = np.geomspace(m.size_bytes.min(), m.size_bytes.max(), 100)
            ax.plot(xs, model.predict(f, xs), "--", lw=0.9, color=c, alpha=0.8)
    size_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel("time per copy (ms, median; bars: IQR)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, title="strategy (dashed: fitted model)", title_fontsize=8)
    footnote(ax, df, name)
    return ax


def pcie_limit_gbps(env: dict) -> float | None:
    gen, width = env.get("pcie_gen_max"), env.get("pcie_width_max")
    if gen in PCIE_X16_GBPS and width:
        return PCIE_X16_GBPS[gen] * width / 16
    return None


def bandwidth(df: pd.DataFrame, *, ax=None, strategies=None, name=None, peak_strategy: str = "pinned_reuse"):
    """GB/s vs size per strategy, with the measured peak and the PCIe limit on paper."""
    ax = _ax(ax)
    med = model.medians(df)
    strategies = strategies or list(dict.fromkeys(med["strategy"]))
    for s in strategies:
        m = med[med.strategy == s].sort_values("size_bytes")
        ax.plot(m.size_bytes, m.gbps, "o-", ms=3, lw=1.2, color=PALETTE.get(s), label=s)
    ref = med[med.strategy == peak_strategy] if (med.strategy == peak_strategy).any() else med
    peak = float(ref["gbps"].max())
    ax.axhline(peak, color="#2ca02c", lw=1, ls=":")
    ax.annotate(
        f"measured peak {peak:.1f} GB/s ({ref.loc[ref.gbps.idxmax(), 'strategy']})",
        (med.size_bytes.min(), peak),
        xytext=(0, 4),
        textcoords="offset points",
        fontsize=8,
        color="#2ca02c",
    )
    lim = pcie_limit_gbps(datasets.run_env(df))
    if lim:
        env = datasets.run_env(df)
        ax.axhline(lim, color="k", lw=1, ls="--")
        ax.annotate(
            f"PCIe Gen{env['pcie_gen_max']} x{env['pcie_width_max']} on paper: {lim:.0f} GB/s",
            (med.size_bytes.min(), lim),
            xytext=(0, 4),
            textcoords="offset points",
            fontsize=8,
        )
    size_axis(ax)
    ax.set_ylabel("bandwidth (GB/s, from the median time)")
    ax.set_ylim(0, max(peak, lim or 0) * 1.15)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="center right")
    footnote(ax, df, name)
    return ax


def timeline(explained: pd.DataFrame, *, ax=None, strategy=None, run_id=None, name=None, log=True):
    """Time per copy against execution order, episodes shaded, flagged rows marked by cause."""
    ax = _ax(ax)
    d = explained
    if run_id is not None:
        d = d[d.run_id == run_id]
    if strategy is not None:
        d = d[d.strategy == strategy]
    d = d.sort_values("order")
    v = model.value_ms(d)
    for s, g in d.groupby("strategy", sort=False):
        ax.plot(g["order"], v[g.index], ".", ms=3, color=PALETTE.get(s, "#333333"), label=s, alpha=0.7)
        if "expected_ms" in g:
            ax.plot(g["order"], g["expected_ms"], "-", lw=0.6, color=PALETTE.get(s, "#333333"), alpha=0.35)
    if "episode" in d:
        for _, g in d[d.episode >= 0].groupby("episode"):
            ax.axvspan(
                g["order"].min() - 0.5,
                g["order"].max() + 0.5,
                color=CAUSE_COLORS["episode"],
                alpha=0.18,
                lw=0,
            )
    if "is_outlier" in d:
        f = d[d.is_outlier]
        for cause, g in f.groupby("cause"):
            ax.scatter(
                g["order"],
                v[g.index],
                s=28,
                facecolors="none",
                edgecolors=CAUSE_COLORS.get(cause, "k"),
                linewidths=1.2,
                label=f"flagged: {cause}",
                zorder=3,
            )
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("execution order (time →)")
    ax.set_ylabel("time per copy (ms)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    footnote(ax, explained, name, extra="shaded: episodes; line: expected")
    return ax


def annotate(explained: pd.DataFrame, *, ax, x: str = "order", max_labels: int = 8, causes=None):
    """Label the most extreme flagged points with their cause (arrow and short text).

    ``x`` is the column on the axes' x axis (``order`` or ``size_bytes``); at most
    ``max_labels`` labels, the largest robust z first, one per cause before repeats.
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
    for k, (i, r) in enumerate(picked.iterrows()):
        short = {
            "context_init": "context start-up",
            "host_alloc_growth": "new pinned block",
            "device_alloc": "cudaMalloc after empty_cache",
            "episode": "episode",
            "unexplained": "unexplained",
        }.get(r.cause, r.cause)
        label = f"{short}\n{v[i]:.3g} ms vs {r.expected_ms:.2g} expected"
        dy = 18 + 14 * (k % 3)
        ax.annotate(
            label,
            (r[x], v[i]),
            xytext=(8, dy),
            textcoords="offset points",
            fontsize=7,
            color=CAUSE_COLORS.get(r.cause, "k"),
            arrowprops={"arrowstyle": "->", "color": CAUSE_COLORS.get(r.cause, "k"), "lw": 0.8},
        )
    return ax


def forum_columns(df: pd.DataFrame, *, ax=None, name=None, log=True):
    """The forum's three columns against size, one point per timed step."""
    ax = _ax(ax)
    v = model.value_ms(df)
    for s in ("pin_memory", "pinned_to_cuda", "direct_to_cuda"):
        g = df[df.strategy == s]
        ax.plot(g["size_bytes"], v[g.index], ".", ms=4, color=PALETTE[s], label=s, alpha=0.8)
    size_axis(ax)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel("time (ms)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    footnote(ax, df, name)
    return ax


def pow2_boundaries(ax, lo: float, hi: float, *, label=True) -> None:
    """Vertical lines where a size crosses a power of two (a new pinned block size)."""
    for k in range(math.ceil(math.log2(lo)), math.floor(math.log2(hi)) + 1):
        ax.axvline(2**k, color="#9467bd", lw=0.7, ls=":", alpha=0.7)
        if label:
            ax.text(
                2**k,
                1.0,
                f" {size_label(2**k)}",
                transform=ax.get_xaxis_transform(),
                fontsize=6,
                color="#9467bd",
                rotation=90,
                va="top",
                ha="left",
            )


def allocator_growth(df: pd.DataFrame, *, ax=None, strategy="pin_memory", name=None):
    """Pinning time vs size, rows that made a new pinned block (``host_allocs`` > 0)
    marked, and the power-of-two block boundaries drawn."""
    ax = _ax(ax)
    g = df[(df.strategy == strategy) & (df.error == "") & ~df.warmup]
    v = model.value_ms(g)
    new = g["host_allocs"] > 0
    ax.plot(g.loc[~new, "size_bytes"], v[~new], ".", ms=4, color="#777777", label="cached block reused")
    ax.plot(
        g.loc[new, "size_bytes"],
        v[new],
        "o",
        ms=6,
        mfc="none",
        color=PALETTE.get(strategy, "#9467bd"),
        label="num_host_alloc went up: a new pinned block",
    )
    size_axis(ax)
    ax.set_yscale("log")
    pow2_boundaries(ax, g.size_bytes.min(), g.size_bytes.max())
    ax.set_ylabel(f"{strategy} time (ms)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    footnote(ax, df, name, extra="dotted: powers of two")
    return ax


def overlap(tl: pd.DataFrame, *, ax=None, rep: int | None = None, name=None, env=None):
    """Gantt bars of a copy and compute per scenario (one rep), with when the host got
    control back from each launch."""
    ax = _ax(ax)
    rep = int(tl["rep"].max()) if rep is None else rep
    d = tl[tl.rep == rep]
    scen = list(dict.fromkeys(d.scenario))
    colors = {"copy": "#1f77b4", "compute": "#ff7f0e"}
    for y, s in enumerate(scen):
        for _, r in d[d.scenario == s].iterrows():
            off = 0.18 if r.op == "copy" else -0.18
            ax.barh(
                y + off,
                r.end_ms - r.start_ms,
                left=r.start_ms,
                height=0.32,
                color=colors[r.op],
                label=r.op if y == 0 else None,
            )
            ax.plot(
                [r.host_return_ms],
                [y + off],
                "k|",
                ms=12,
                label="host regains control" if (y == 0 and r.op == "copy") else None,
            )
    ax.set_yticks(range(len(scen)), [s.replace("_", " ") for s in scen])
    ax.invert_yaxis()
    ax.set_xlabel("ms after the start event")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    label = f"data: {name or 'overlap timeline'} · {describe(env) if env else ''} · rep {rep}"
    ax.text(0.0, -0.16, label, transform=ax.transAxes, fontsize=7, color="#555555", va="top")
    return ax


def concurrency(df: pd.DataFrame, *, ax=None, size_bytes: int | None = None, name=None):
    """Per-GPU (dashed) and aggregate (solid) bandwidth against the number of GPUs copying
    at once, per strategy, at one size (default: the largest)."""
    ax = _ax(ax)
    c = model.concurrency(df)
    size_bytes = int(c.size_bytes.max()) if size_bytes is None else size_bytes
    c = c[c.size_bytes == size_bytes]
    for s, g in c.groupby("strategy"):
        g = g.sort_values("world")
        col = PALETTE.get(s)
        ax.plot(g.world, g.aggregate_gbps, "o-", color=col, label=f"{s}: all GPUs together")
        ax.plot(g.world, g.per_gpu_gbps, "s--", color=col, alpha=0.7, label=f"{s}: per GPU")
    ax.set_xticks(sorted(c.world.unique()))
    ax.set_xlabel("GPUs copying at once")
    ax.set_ylabel(f"GB/s at {size_label(size_bytes)} (median)")
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    footnote(ax, df, name)
    return ax
