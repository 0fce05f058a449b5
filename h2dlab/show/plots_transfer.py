"""Figures for both directions, both at once and many tensors. Same conventions as
:mod:`h2dlab.show.plots` (which re-exports them): ``(df, *, ax=None, ...) -> Axes``, seaborn,
a title, the legend outside the data, a provenance footnote. GB/s = 1e9 bytes/s.
"""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from h2dlab.findings import transfer as findings_transfer
from h2dlab.show.plots_frame import frame_size_axes
from h2dlab.show.plots_style import (
    PALETTE,
    axes_or_new,
    footnote,
    legend_outside,
    size_label,
    timed_rows,
)

__all__ = ["batch_overhead", "directions", "duplex_aggregate"]

_TAB10 = sns.color_palette("tab10").as_hex()


def _colors(names) -> dict:
    """Known strategies keep their colour; others get tab10 colours in order."""
    names = list(dict.fromkeys(names))
    spare = iter(c for c in _TAB10 if c not in PALETTE.values())
    return {n: PALETTE.get(n) or next(spare, "#333333") for n in names}


def directions(df: pd.DataFrame, *, ax=None, strategies=None, name=None):
    """GB/s against size, host→device (solid) and device→host (dashed) side by side, one
    colour per strategy (median line, IQR band)."""
    ax = axes_or_new(ax)
    t = timed_rows(df)
    if "direction" not in t.columns:
        t = t.assign(direction="h2d")
    strategies = strategies or list(dict.fromkeys(t.strategy))
    t = t[t.strategy.isin(strategies)].replace({"direction": findings_transfer.ARROW})
    sns.lineplot(t, x="size_bytes", y="gbps", hue="strategy", hue_order=strategies, palette=_colors(strategies),
                 style="direction", style_order=[v for v in findings_transfer.ARROW.values() if v in set(t.direction)],
                 estimator="median", errorbar=("pi", 50), marker="o", markersize=4, ax=ax)  # fmt: skip
    return frame_size_axes(ax, df, name, ylabel="bandwidth (GB/s; line: median, band: IQR)", y_from_zero=True,
                           title="both directions: host→device and device→host bandwidth")  # fmt: skip


def duplex_aggregate(df: pd.DataFrame, *, ax=None, name=None):
    """Both directions at once against each alone, per size (a ``bidir`` table): each
    direction alone and within the pairs, their aggregate (IQR bars), and the sum of the
    two alone (dashed: a perfect full-duplex link)."""
    ax = axes_or_new(ax)
    table = findings_transfer.duplex_summary(df).table
    labels = {
        "alone_h2d_gbps": "host→device alone",
        "alone_d2h_gbps": "device→host alone",
        "duplex_h2d_gbps": "host→device, both at once",
        "duplex_d2h_gbps": "device→host, both at once",
        "aggregate_gbps": "both at once, together",
        "ideal_gbps": "sum of the two alone",
    }
    if not table.empty:
        long = table.melt(
            id_vars=["size_bytes"], value_vars=list(labels), var_name="measure", value_name="gbps"
        )
        long["measure"] = long["measure"].map(labels)
        order = list(labels.values())
        colors = dict(
            zip(order, ["#2ca02c", "#1f77b4", "#98df8a", "#aec7e8", "#000000", "#7f7f7f"], strict=True)
        )
        dashes = {k: (4, 2) if k == labels["ideal_gbps"] else "" for k in order}
        sns.lineplot(long, x="size_bytes", y="gbps", hue="measure", hue_order=order, palette=colors, style="measure",
                     style_order=order, dashes=dashes, marker="o", markersize=4, ax=ax)  # fmt: skip
        ax.errorbar(table.size_bytes, table.aggregate_gbps,
                    yerr=[table.aggregate_gbps - table.aggregate_q1, table.aggregate_q3 - table.aggregate_gbps],
                    fmt="none", ecolor="#000000", capsize=2, lw=0.8)  # fmt: skip
    return frame_size_axes(ax, df, name, xlabel="payload size, each way", y_from_zero=True,
                           ylabel="GB/s (median; bars: IQR of the aggregate)",
                           title="both directions at once: does the link add them up?")  # fmt: skip


def batch_overhead(df: pd.DataFrame, *, ax=None, size_bytes: int | None = None, name=None):
    """Time per tensor (µs, host clock, median) against the number of tensors in the batch,
    one line per method, at one batch total (default: the smallest: where overhead shows)."""
    ax = axes_or_new(ax)
    table = findings_transfer.batch_overhead(df).table
    if not table.empty:
        size_bytes = int(table.size_bytes.min()) if size_bytes is None else size_bytes
        table = table[table.size_bytes == size_bytes]
        names = list(dict.fromkeys(table.sort_values("us_per_tensor").strategy))
        sns.lineplot(table, x="n_tensors", y="us_per_tensor", hue="strategy", hue_order=names,
                     palette=_colors(names), marker="o", markersize=4, ax=ax)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tensors in the batch")
    ax.set_ylabel("time per tensor (µs, median)")
    ax.grid(True, which="major", alpha=0.3)
    total = f"{size_label(size_bytes)} in all" if size_bytes else "no data"
    ax.set_title(f"many tensors: time per tensor against batch size ({total})")
    legend_outside(ax, "method")
    footnote(ax, df, name)
    return ax
