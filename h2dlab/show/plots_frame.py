"""The frame a size-axis figure ends with: the log-2 size axis, the y label (and scale or
floor), a light grid, the title, the legend outside the data and the provenance footnote.
"""

from __future__ import annotations

import pandas as pd

from h2dlab.show.plots_style import footnote, legend_outside, size_axis

__all__ = ["frame_size_axes"]


def frame_size_axes(
    ax,
    df: pd.DataFrame | None,
    name: str | None = None,
    *,
    ylabel: str,
    title: str,
    ylog: bool = False,
    y_from_zero: bool = False,
    xlabel: str | None = None,
):
    """Finish ``ax`` as every size-axis figure of :mod:`h2dlab.show.plots` is finished.

    Parameters
    ----------
    ax
        The matplotlib Axes the data was drawn on.
    df, name
        The table drawn and its name, for the provenance footnote.
    ylabel, title
        The y-axis label and the figure's title.
    ylog
        A log y axis.
    y_from_zero
        The y axis starts at 0.
    xlabel
        Replaces the size axis's label (``'payload size'``).

    Returns
    -------
    matplotlib.axes.Axes
        ``ax``.
    """
    size_axis(ax)
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylog:
        ax.set_yscale("log")
    if y_from_zero:
        ax.set_ylim(bottom=0)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.set_title(title)
    legend_outside(ax)
    footnote(ax, df, name)
    return ax
