"""The house style every figure shares: strategy and cause colours, constrained-layout
axes, the log-2 size axis, legends outside the data, labels that do not collide
(:func:`place_labels`), labelled reference lines, and the provenance footnote (dataset,
GPU, date). :mod:`h2dlab.show.plots` and the ``plots_*`` figure modules draw with these;
``plots`` re-exports them. Reads tables, never measures.
"""

from __future__ import annotations

import itertools
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.collections import PathCollection
from matplotlib.text import Annotation, Text
from matplotlib.ticker import FuncFormatter, NullLocator

from h2dlab.escape import plot_text
from h2dlab.explain import model
from h2dlab.measure.names import COLOUR, RECORDS
from h2dlab.recording import datasets
from h2dlab.recording.env import PCIE_X16_GBPS, describe

__all__ = [
    "CAUSE_COLORS", "PALETTE", "SHORT_CAUSE", "SMALL_PT", "axes_or_new", "footnote", "hline_label", "legend_outside",
    "palette_for", "pcie_limit_gbps", "place_labels", "pow2_boundaries", "provenance", "size_axis",
    "size_label", "subplots", "timed_rows",
]  # fmt: skip

#: Each strategy's colour: its record in ``measure.names.RECORDS`` (one place per strategy).
PALETTE = dict(COLOUR)
#: Colours for names PALETTE lacks (batch methods, benchmark ways), in turn.
SPARE = ("#ff7f0e", "#7f7f7f", "#bcbd22", "#e377c2", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#333333")
CAUSE_COLORS = {
    "context_init": "#000000", "host_alloc_growth": "#9467bd", "device_alloc": "#ff7f0e",
    "episode": "#17becf", "host_parallel": "#bcbd22", "host_crowded": "#dbdb8d", "host_stall": "#e377c2",
    "unexplained": "#7f7f7f",
}  # fmt: skip
SHORT_CAUSE = {
    "context_init": "context start-up", "host_alloc_growth": "new pinned block",
    "device_alloc": "cudaMalloc after empty_cache", "episode": "episode",
    "host_parallel": "host copy beside busy workers", "host_crowded": "crowded off its CPU by workers",
    "host_stall": "a stall the size of the census's", "unexplained": "unexplained",
}  # fmt: skip


#: The smallest type in any figure, in points: footnotes, legends, labels, ticks. Smaller is
#: hard to read in a shared page at the size it is shown (issue 35); every figure's text
#: sizes come from here (tests/show/test_figure_text.py draws each figure and checks).
SMALL_PT = 8


def subplots(nrows: int = 1, ncols: int = 1, **kw):
    """``plt.subplots`` with constrained layout, so outside legends and footnotes fit.

    Parameters
    ----------
    nrows, ncols
        The grid of axes.
    **kw
        Passed to ``plt.subplots`` (``figsize`` defaults to 8.5 x 4.6 inches per axes).

    Returns
    -------
    tuple
        ``(figure, axes)`` as ``plt.subplots`` returns them.
    """
    kw.setdefault("figsize", (8.5 * ncols, 4.6 * nrows))
    return plt.subplots(nrows, ncols, layout="constrained", **kw)


def axes_or_new(ax):
    """``ax``, or the axes of a new constrained-layout figure when it is None.

    Parameters
    ----------
    ax
        A matplotlib Axes, or None.

    Returns
    -------
    matplotlib.axes.Axes
        The axes to draw on.
    """
    return subplots()[1] if ax is None else ax


def size_label(n: float, _pos=None) -> str:
    """A size for an axis or a label: ``1048576`` -> ``'1 MiB'``, ``1536`` -> ``'1.5 KiB'``.

    Parameters
    ----------
    n
        A number of bytes.
    _pos
        The tick position matplotlib's ``FuncFormatter`` passes (unused).

    Returns
    -------
    str
        The size in B, KiB, MiB or GiB.
    """
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
    """'dataset X · GPU · date' for a table loaded by datasets.load() or measured live.

    Parameters
    ----------
    df
        The table drawn (its ``attrs`` name the dataset and hold its env.json).
    name
        The name to show instead of the dataset's.

    Returns
    -------
    str
        ``'data: <name> · <machine>'`` (``'no fingerprint'`` without an env.json).
    """
    name = name or df.attrs.get("dataset") or "live run"
    env = datasets.run_env(df)
    return f"data: {name} · {describe(env) if env else 'no fingerprint'}"


def footnote(ax, df: pd.DataFrame | None, name: str | None = None, extra: str = "", text: str | None = None):
    """Write the provenance under the axes (idempotent per axes).

    Parameters
    ----------
    ax
        The axes to write under.
    df, name
        The table and its name, for :func:`provenance`.
    extra
        Appended after ``' · '`` (e.g. what a line style means).
    text
        The whole footnote, instead of the provenance.
    """
    text = text if text is not None else provenance(df, name) + (f" · {extra}" if extra else "")
    text = plot_text(text)  # a GPU or run name is text
    for t in list(ax.texts):
        if getattr(t, "_h2dlab_footnote", False):
            t.remove()
    t = ax.text(
        0.0, -0.16, text, transform=ax.transAxes, fontsize=SMALL_PT, color="#555555", va="top", wrap=True
    )
    t._h2dlab_footnote = True


def legend_outside(ax, title: str | None = None) -> None:
    """Move the axes' legend to the right of the data.

    Parameters
    ----------
    ax
        The axes whose legend moves (nothing happens when it has no labelled artist).
    title
        The legend's title.
    """
    h, lab = ax.get_legend_handles_labels()
    if not h:
        return
    ax.legend(h, lab, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=SMALL_PT, title=title, title_fontsize=SMALL_PT,
              frameon=False)  # fmt: skip


def _boxes_ok(r, fig, boxes, bb) -> bool:
    inside = bb.x0 >= fig.bbox.x0 and bb.y0 >= fig.bbox.y0 and bb.x1 <= fig.bbox.x1 and bb.y1 <= fig.bbox.y1
    return inside and not any(bb.overlaps(b) for b in boxes)


def _marker_discs(ax, r) -> np.ndarray:
    """``(n, 3)``: x, y and radius, in display pixels, of the data markers the axes draws
    (scatter points, line markers) whose centre lies inside the axes."""
    px_per_pt = ax.figure.dpi / 72
    found = []
    for c in ax.collections:
        if isinstance(c, PathCollection) and c.get_visible() and len(c.get_offsets()):
            xy = c.get_offset_transform().transform(np.asarray(c.get_offsets(), float))
            size = np.broadcast_to(
                np.asarray(c.get_sizes() if len(c.get_sizes()) else [36.0], float), len(xy)
            )
            found.append(np.column_stack([xy, np.sqrt(size) / 2 * px_per_pt]))
    for ln in ax.lines:
        if ln.get_visible() and ln.get_marker() not in (None, "None", "", " ") and len(ln.get_xydata()):
            xy = ln.get_transform().transform(np.asarray(ln.get_xydata(), float))
            found.append(np.column_stack([xy, np.full(len(xy), ln.get_markersize() / 2 * px_per_pt)]))
    if not found:
        return np.empty((0, 3))
    d = np.vstack(found)
    box = ax.get_window_extent(r)
    keep = np.isfinite(d).all(axis=1) & (d[:, 0] >= box.x0) & (d[:, 0] <= box.x1)
    keep &= (d[:, 1] >= box.y0) & (d[:, 1] <= box.y1)
    return d[keep]


def _covers_marker(bb, discs: np.ndarray) -> bool:
    if not len(discs):
        return False
    dx = discs[:, 0] - np.clip(discs[:, 0], bb.x0, bb.x1)
    dy = discs[:, 1] - np.clip(discs[:, 1], bb.y0, bb.y1)
    return bool((dx * dx + dy * dy < discs[:, 2] ** 2).any())


def place_labels(ax) -> int:
    """Move this axes' annotations (offset-point labels) so that no two text boxes overlap,
    none leaves the figure and, where a spot allows it, none lies over a data marker; a
    label with no free spot is hidden.

    Parameters
    ----------
    ax
        The axes whose annotations move (its other texts and title stay where they are).

    Returns
    -------
    int
        How many labels were hidden.

    Notes
    -----
    Each label takes the first spot, nearest its point first, that is clear of the other
    texts and of the markers; where every spot clear of the texts covers a marker (a dense
    cloud of points), it takes the first of those rather than being hidden.
    """
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
    discs = _marker_discs(ax, r)
    hidden = 0
    for t in movable:
        x0, y0 = t.xyann
        cands = [(x0, y0)] + [
            (dx, dy)
            for dy in (14, -24, 34, -44, 54, -64, 74, -84, 94, -104, 114, -124, 134)
            for dx in (8, -60, -120, 40, 80)
        ]
        chosen = None
        for xy in cands:
            t.xyann = xy
            bb = t.get_window_extent(r).padded(1)  # the text and its arrow
            if not _boxes_ok(r, fig, boxes, bb):
                continue
            if not _covers_marker(Text.get_window_extent(t, r), discs):  # the text alone
                chosen = xy
                break
            chosen = chosen or xy  # clear of the texts only: kept unless a spot clear of both comes
        if chosen is None:
            t.set_visible(False)
            hidden += 1
            continue
        t.xyann = chosen
        boxes.append(t.get_window_extent(r).padded(1))
    return hidden


def timed_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Timed rows (``model.timed``) with ``ms`` (events, else host clock) and ``gbps``.

    Parameters
    ----------
    df
        A measurement table.

    Returns
    -------
    pandas.DataFrame
        Its timed rows with ``ms`` and ``gbps`` (GB/s = 1e9 bytes/s) added.
    """
    t = model.timed(df)
    return t.assign(ms=model.value_ms(t), gbps=t.size_bytes / model.value_ms(t) / 1e6)


def palette_for(names) -> dict:
    """Colours for these strategy names; names without one of :data:`PALETTE` get the next
    of :data:`SPARE` (tableau colours it does not use), so no two of them share a colour.

    Parameters
    ----------
    names
        Strategy names.

    Returns
    -------
    dict
        Name -> colour, for seaborn's ``palette``.
    """
    names = list(dict.fromkeys(names))
    # a record added at run time (names.RECORDS) has its colour too
    own = {s: PALETTE.get(s) or getattr(RECORDS.get(s), "colour", None) for s in names}
    spare = itertools.cycle([c for c in SPARE if c not in set(own.values())] or SPARE)
    return {s: own[s] or next(spare) for s in names}


def pcie_limit_gbps(env: dict) -> float | None:
    """The PCIe link's bandwidth on paper (GB/s) from a run's env.json.

    Parameters
    ----------
    env
        The run's env.json dict (``pcie_gen_max``, ``pcie_width_max``).

    Returns
    -------
    float or None
        GB/s for that generation and width, or None when either is unknown.
    """
    gen, width = env.get("pcie_gen_max"), env.get("pcie_width_max")
    if gen in PCIE_X16_GBPS and width:
        return PCIE_X16_GBPS[gen] * width / 16
    return None


def hline_label(ax, y: float, text: str, color: str, ls: str) -> None:
    """A horizontal line at ``y`` with its label just above it (moved by place_labels).

    Parameters
    ----------
    ax
        The axes to draw on.
    y
        Where the line goes, in data units.
    text, color, ls
        The label, the colour of both, the line style.
    """
    ax.axhline(y, color=color, lw=1, ls=ls)
    ax.annotate(text, (0.01, y), xycoords=("axes fraction", "data"), xytext=(0, 3), textcoords="offset points",
                fontsize=SMALL_PT, color=color)  # fmt: skip


def pow2_boundaries(ax, lo: float, hi: float, *, label=True) -> None:
    """Vertical lines where a size crosses a power of two (a new pinned block size).

    Parameters
    ----------
    ax
        The axes to draw on (its x axis holds sizes in bytes, already on its scale).
    lo, hi
        The sizes between which to draw.
    label
        Name each power's size on an axis along the top, outside the data: written inside,
        beside its line, a label sat under the marker of the slow copy just past that power
        (the copies these lines explain; issue 35).
    """
    powers = [2**k for k in range(math.ceil(math.log2(lo)), math.floor(math.log2(hi)) + 1)]
    for p in powers:
        ax.axvline(p, color="#9467bd", lw=0.7, ls=":", alpha=0.7)
    if label and powers:
        top = ax.secondary_xaxis("top")
        top.set_xticks(powers, [size_label(p) for p in powers], rotation=90)
        top.xaxis.set_minor_locator(NullLocator())
        top.tick_params(axis="x", labelsize=SMALL_PT, length=2, color="#9467bd", labelcolor="#9467bd")
        top.set_xlabel("a power of two: a pinned block's size", fontsize=SMALL_PT, color="#9467bd")
