"""The figure of what a pause costs the next copy: median time against the pause the GPU sat
idle before it, one line per strategy and size, from ``factors.idle_wake``'s cells.
Re-exported by :mod:`h2dlab.show.plots`.
"""

from __future__ import annotations

import textwrap

import pandas as pd

from h2dlab.explain.idle import idle_wake
from h2dlab.show.plots_style import SMALL_PT, axes_or_new, footnote, legend_outside, palette_for, place_labels
from h2dlab.units import fmt_bytes

__all__ = ["idle_pause"]


def idle_pause(df: pd.DataFrame, *, ax=None, name: str | None = None):
    """Median time of each strategy and size (solid) and its 90th percentile (dotted)
    against the pause before the copy, on a log time axis, each line labelled at its end
    with the longest pause's ratio to the shortest.

    Parameters
    ----------
    df
        Runs measured with ``h2dlab measure --pause`` (a recording's ``idle`` kind).
    ax
        Axes to draw on (a new figure when None).
    name
        The table's name, for the provenance footnote.

    Returns
    -------
    matplotlib.axes.Axes
        With nothing to draw (fewer than two pauses, no strategy timed after every
        pause), empty axes holding ``factors.idle_wake``'s sentence of what is missing.
    """
    found = idle_wake(df)
    cells = found["cells"]
    ax = axes_or_new(ax)
    if cells.empty:
        ax.text(0.5, 0.5, textwrap.fill(found.verdict, 70), ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title("Time per copy against the pause before it: nothing to compare")
        return ax
    colors = palette_for(sorted(cells["strategy"].unique()))
    styles = ["o", "s", "^", "D", "v"]
    for (strategy, size), c in cells.groupby(["strategy", "size_bytes"], sort=True):
        c = c.sort_values("pause_ms")
        marker = styles[sorted(cells["size_bytes"].unique()).index(size) % len(styles)]
        label = f"{strategy} {fmt_bytes(size)}"
        ax.plot(c["pause_ms"], c["median_ms"] * 1e3, marker=marker, color=colors[strategy], label=label)
        ax.plot(c["pause_ms"], c["p90_ms"] * 1e3, ls=":", color=colors[strategy], lw=1)
        last = c.iloc[-1]
        ax.annotate(f"{last['ratio']:.2f}x", (last["pause_ms"], last["median_ms"] * 1e3), xytext=(4, 0),
                    textcoords="offset points", fontsize=SMALL_PT, color=colors[strategy], va="center")  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("pause before the copy, GPU idle (ms; the loop adds its own time between copies)")
    ax.set_ylabel("time per copy (µs, CUDA events)")
    ax.grid(True, alpha=0.3)
    ax.set_title("Time per copy against the pause before it, with the GPU idle")
    legend_outside(ax)
    place_labels(ax)  # two strategies' ratios can land on one spot (the h200 recording's pinned_reuse)
    footnote(
        ax,
        df,
        name,
        extra="solid: median · dotted: 90th percentile · label: median after the longest pause / shortest",
    )
    return ax
