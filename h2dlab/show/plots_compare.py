"""Figures that compare runs or ways: timelines of overlap, several GPUs, the benchmark,
device cache kept vs emptied, the forum protocol's allocation cost, what pinning costs,
and the advice table. Same conventions as :mod:`h2dlab.show.plots` (which re-exports them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.ticker import NullFormatter

from h2dlab.explain import model
from h2dlab.findings import claims as findings
from h2dlab.measure.names import canonical
from h2dlab.recording.env import describe
from h2dlab.show.plots_frame import frame_size_axes
from h2dlab.show.plots_style import (
    PALETTE,
    axes_or_new,
    footnote,
    hline_label,
    legend_outside,
    palette_for,
    place_labels,
    size_axis,
    size_label,
    timed_rows,
)

__all__ = [
    "advice_bars",
    "benchmark",
    "cache_kept_vs_emptied",
    "concurrency",
    "device_alloc_cost",
    "machines",
    "overlap",
    "pin_cost",
]


def overlap(tl: pd.DataFrame, *, ax=None, rep: int | None = None, name=None, env=None):
    """Gantt bars of a copy and compute per scenario (one rep), with when the host got
    control back from each launch."""
    ax = axes_or_new(ax)
    rep = int(tl["rep"].max()) if rep is None else rep
    d = tl[tl.rep == rep]
    scen = list(dict.fromkeys(d.scenario))
    colors = {"copy": "#1f77b4", "compute": "#ff7f0e"}
    for y, s in enumerate(scen):
        for _, r in d[d.scenario == s].iterrows():
            off = 0.18 if r.op == "copy" else -0.18
            ax.barh(y + off, r.end_ms - r.start_ms, left=r.start_ms, height=0.32, color=colors[r.op],
                    label=r.op if y == 0 else None)  # fmt: skip
            ax.plot([r.host_return_ms], [y + off], "k|", ms=12,
                    label="host regains control" if (y == 0 and r.op == "copy") else None)  # fmt: skip
    ax.set_yticks(range(len(scen)), [s.replace("_", " ") for s in scen])
    ax.invert_yaxis()
    ax.set_xlabel("ms after the start event")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title("copy and compute on the GPU's timeline")
    legend_outside(ax)
    footnote(
        ax, None, text=f"data: {name or 'overlap timeline'} · {describe(env) if env else ''} · rep {rep}"
    )
    return ax


def concurrency(df: pd.DataFrame, *, ax=None, size_bytes: int | None = None, name=None):
    """Per-GPU (dashed) and aggregate (solid) bandwidth against the number of GPUs copying
    at once, per strategy, at one size (default: the largest)."""
    ax = axes_or_new(ax)
    c = model.concurrency(df)
    size_bytes = int(c.size_bytes.max()) if size_bytes is None else size_bytes
    c = c[c.size_bytes == size_bytes]
    long = c.melt(id_vars=["strategy", "world"], value_vars=["aggregate_gbps", "per_gpu_gbps"], var_name="measure",
                  value_name="gbps").replace({"aggregate_gbps": "all GPUs together", "per_gpu_gbps": "per GPU"})  # fmt: skip
    names = list(dict.fromkeys(long.strategy))
    sns.lineplot(long, x="world", y="gbps", hue="strategy", style="measure", palette=palette_for(names), markers=True,
                 ax=ax)  # fmt: skip
    ax.set_xticks(sorted(c.world.unique()))
    ax.set_xlabel("GPUs copying at once")
    ax.set_ylabel(f"GB/s at {size_label(size_bytes)} (median)")
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    ax.set_title(f"several GPUs at once, {size_label(size_bytes)} per copy")
    legend_outside(ax)
    footnote(ax, df, name)
    return ax


def benchmark(bench: dict[str, Any], *, ax=None):
    """GB/s per way against size from ``benchmarks/bench_transfer.py`` output, in the
    registry's names, with the host-copy throughputs measured alone drawn as lines."""
    ax = axes_or_new(ax)
    b = pd.DataFrame(bench["rows"]).assign(strategy=lambda d: d.method.map(canonical))
    names = list(dict.fromkeys(b.strategy))
    sns.lineplot(b, x="size_bytes", y="gbps_median", hue="strategy", hue_order=names, palette=palette_for(names),
                 marker="o", markersize=4, ax=ax)  # fmt: skip
    for k, v in bench.get("ceilings", {}).items():
        if k.startswith("host_copy"):
            hline_label(ax, v, f"host memcpy alone ({k.split('_')[2]}): {v:.0f} GB/s", "#444444", ":")
    size_axis(ax)
    ax.set_ylabel("GB/s (median)")
    ax.grid(alpha=0.3)
    ax.set_title("each way against x.to('cuda'), one process")
    legend_outside(ax, "strategy")
    footnote(ax, None, text=f"data: benchmarks/results · {describe(bench.get('env') or {})}")
    place_labels(ax)
    return ax


def cache_kept_vs_emptied(kept: pd.DataFrame, emptied: pd.DataFrame, *, ax=None, name=None):
    """Median time per copy against size, with the device cache kept (solid) and with
    ``empty_cache()`` before each copy (dashed), per strategy; IQR bands."""
    ax = axes_or_new(ax)
    both = pd.concat(
        [timed_rows(kept).assign(cache="kept"), timed_rows(emptied).assign(cache="empty_cache() each copy")]
    )
    names = list(dict.fromkeys(both.strategy))
    sns.lineplot(both, x="size_bytes", y="ms", hue="strategy", style="cache", palette=palette_for(names),
                 estimator="median", errorbar=("pi", 50), marker="o", markersize=3, ax=ax)  # fmt: skip
    return frame_size_axes(ax, kept, name, ylabel="time per copy (ms, median; band: IQR)", ylog=True,
                           title="device cache kept vs released before each copy")  # fmt: skip


def device_alloc_cost(forum: pd.DataFrame, reuse: pd.DataFrame, *, ax=None, strategy="pinned_to_cuda",
                      baseline="pinned_reuse", name=None):  # fmt: skip
    """Per size, the forum protocol's ``strategy`` time (a fresh ``cudaMalloc`` after
    ``empty_cache()``) over ``baseline`` into a reused buffer; median and IQR shaded."""
    ax = axes_or_new(ax)
    f = findings.device_alloc_cost(forum, reuse, strategy=strategy, baseline=baseline)
    sns.scatterplot(f.table, x="size_bytes", y="ratio", color=PALETTE.get(strategy), s=14, linewidth=0, ax=ax,
                    label=f"{strategy} / {baseline}, per size")  # fmt: skip
    r = f["ratio"]
    ax.axhspan(r["q1"], r["q3"], color=PALETTE.get(strategy), alpha=0.12, lw=0, label="interquartile range")
    hline_label(ax, r["median"], f"median {r['median']:.2f}x", "#333333", "-")
    hline_label(ax, 1.0, "no cost", "#999999", ":")
    # y from 0: the "no cost" line and its label clear of the size axis
    frame_size_axes(ax, forum, name, ylabel="time ratio", y_from_zero=True,
                    title="what empty_cache() in the loop costs each copy")  # fmt: skip
    place_labels(ax)
    return ax


def pin_cost(sweep: pd.DataFrame, *, cold: pd.DataFrame | None = None, register: pd.DataFrame | None = None,
             ax=None, name=None):  # fmt: skip
    """Effective GB/s of ``x.pin_memory().to()`` per copy: first call (new block), block
    cached, optionally the ``cudaHostRegister`` path, against the sweep's pageable and
    pinned medians at the same sizes."""
    ax = axes_or_new(ax)
    pin = sweep[(sweep.strategy == "pin_then_copy") & (sweep.error == "")]
    parts = [timed_rows(pin[pin.host_allocs == 0]).assign(case="pin_memory(), block cached")]
    new = [pin[pin.host_allocs > 0]] + ([cold[cold.host_allocs > 0]] if cold is not None else [])
    parts.append(
        pd.concat(new).pipe(lambda d: d.assign(ms=model.value_ms(d))).assign(case="pin_memory(), new block")
    )
    if register is not None:
        parts.append(register[register.host_allocs > 0].pipe(lambda d: d.assign(ms=model.value_ms(d)))
                     .assign(case="new block, pinned_use_cuda_host_register"))  # fmt: skip
    p = pd.concat(parts)
    p["gbps"] = p.size_bytes / p.ms / 1e6
    sns.scatterplot(p, x="size_bytes", y="gbps", hue="case", s=12, linewidth=0, alpha=0.8, ax=ax,
                    palette=["#9467bd", "#000000", "#8c564b"][: p.case.nunique()])  # fmt: skip
    ref = timed_rows(sweep[sweep.strategy.isin(["pageable", "pinned_reuse"])])
    sns.lineplot(ref, x="size_bytes", y="gbps", hue="strategy", palette=palette_for(["pageable", "pinned_reuse"]),
                 estimator="median", errorbar=("pi", 50), ax=ax)  # fmt: skip
    return frame_size_axes(ax, sweep, name, ylabel="effective GB/s of pinning + copy", ylog=True,
                           title="what x.pin_memory().to('cuda') costs, cached or new")  # fmt: skip


def advice_bars(table: pd.DataFrame, *, ax=None, name: str | None = None, source: pd.DataFrame | None = None):
    """The advice table as bars: per-copy time (median, IQR whiskers) per way, one colour
    per case (to the GPU, results back, a batch), and what a way pays once up front
    stacked hatched. Log time axis. ``source``: the table the advice was computed from, whose
    GPU and date the footnote then names (``name`` alone otherwise)."""
    ax = axes_or_new(ax)
    t = table.reset_index(drop=True)
    cases = list(dict.fromkeys(t.case)) if "case" in t else ["one tensor to the GPU"]
    colors = dict(zip(cases, ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"], strict=False))
    y = np.arange(len(t))
    for c in cases:
        on = (t.case == c).to_numpy() if "case" in t else np.ones(len(t), bool)
        ax.barh(y[on], t.per_copy_ms[on], color=colors[c], label=c)
    ax.barh(y, t.upfront_ms, left=t.per_copy_ms, color="#ffffff", edgecolor="#1f77b4", hatch="//",
            label="paid once, up front")  # fmt: skip
    lo, hi = (t.per_copy_ms - t.q1_ms).clip(lower=0), (t.q3_ms - t.per_copy_ms).clip(lower=0)
    ax.errorbar(t.per_copy_ms, y, xerr=[lo.fillna(0), hi.fillna(0)], fmt="none", color="k", lw=0.8, capsize=2)
    ax.set_yticks(y, t.what)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ends = (t.per_copy_ms + t.upfront_ms.fillna(0)).dropna()
    ax.set_xlim(t.per_copy_ms.min() / 2, ends.max() * 1.5)  # bars start at 0: log autoscale would cut them
    ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels collide on a log axis
    ax.set_xlabel("ms per copy (median)")
    ax.grid(axis="x", alpha=0.3)
    where = " to the GPU" if len(cases) == 1 else ", each case against its plain way"
    first = t.groupby("case", sort=False).size_bytes.first() if "case" in t else t.size_bytes.iloc[:1]
    if first.nunique() == 1:  # one size for every case: the title names it
        ax.set_title(f"ways to move {size_label(int(t.size_bytes.iloc[0]))}{where}")
    else:  # cases of different sizes (a batch's total is its own): each case with its size
        ax.set_title(
            "; ".join(f"{c}: {size_label(int(n))}" for c, n in first.items()) + ", each against its plain way"
        )
    legend_outside(ax)
    if source is not None:  # the table the advice was computed from: its GPU and date
        footnote(ax, source, name, extra="whiskers: IQR")
    else:
        footnote(ax, None, text=f"data: {name or 'advice table'} · whiskers: IQR")
    return ax


def _dates(rows: pd.DataFrame) -> str:
    """The days of a machine's rows (``compare_machines``' ``date``), or that its data gives none."""
    days = [str(d) for d in dict.fromkeys(rows["date"] if "date" in rows else []) if isinstance(d, str) and d]
    return " and ".join(days) if days else "date not given"


def machines(table: pd.DataFrame, *, ax=None):
    """Machines side by side from ``compare_machines.compare()``: GB/s per strategy
    (bandwidth at 1 GiB and the forum protocol's copies), one bar per machine; whiskers: the
    sweep's quartiles, the forum protocol's min and max over its runs (``compare_machines``).
    The footnote names each machine's GPU and the days its data was recorded (``date``)."""
    ax = axes_or_new(ax)
    t = table[table.unit == "GB/s"].reset_index(drop=True)
    t = t.assign(what=t.metric.map({"bandwidth": "sweep", "forum_bandwidth": "forum"}) + ": " + t.strategy)
    order = list(dict.fromkeys(t.sort_values(["metric", "value"], ascending=[False, False]).what))
    names = list(dict.fromkeys(t.machine))
    sns.barplot(t, x="value", y="what", hue="machine", order=order, hue_order=names, errorbar=None, ax=ax)
    for bars, m in zip(list(ax.containers), names, strict=False):  # seaborn draws a machine's bars in `order`
        g = t[t.machine == m].set_index("what").reindex(order).dropna(subset=["value"])
        ys = [b.get_y() + b.get_height() / 2 for b in bars][: len(g)]
        ax.errorbar(g.value, ys, xerr=[(g.value - g.lo).clip(lower=0), (g.hi - g.value).clip(lower=0)],
                    fmt="none", color="k", lw=0.7, capsize=2)  # fmt: skip
    ax.set_xlabel("GB/s (median; whiskers: sweep IQR, forum min–max over runs)")
    ax.set_ylabel("")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title("each machine's copies, side by side")
    legend_outside(ax, "machine")
    gpus = "; ".join(
        f"{m}: {g}, {_dates(t[t.machine == m])}" for m, g in dict(zip(t.machine, t.gpu, strict=True)).items()
    )
    footnote(ax, None, text=f"data: {gpus} · sweep at 1 GiB or its largest size; forum: its largest size")
    return ax
