"""Figures of the fast path's staged copy: where the time of one copy goes, chunk by chunk.
Same conventions as :mod:`h2dlab.show.plots` (which re-exports them). Plots read results; they
never measure (the timeline is ``benchmarks/bench_transfer.py``'s ``timeline_256MiB``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.patches import Patch

from h2dlab.show.plots_style import SMALL_PT, axes_or_new, footnote, size_label

__all__ = ["STAGE_COLORS", "staged_timeline", "timeline_frame"]

#: One colour per phase of a chunk (host side) and for its DMA.
STAGE_COLORS = {"slot wait": "#7f7f7f", "host copy": "#1f77b4", "to DMA queued": "#ff7f0e", "DMA": "#2ca02c"}


def timeline_frame(tl: dict[str, Any]) -> pd.DataFrame:
    """The per-chunk rows of a staged-copy timeline as a table, one row per chunk and phase:
    ``chunk, thread, lane, phase, start_ms, end_ms`` (lane: ``"thread N"`` or ``"DMA"``).

    Raises
    ------
    ValueError
        If ``tl`` has no ``chunks`` list (not a timeline from the benchmark).
    """
    chunks = tl.get("chunks") if isinstance(tl, dict) else None
    if not chunks:
        raise ValueError("not a staged-copy timeline: expected a dict with a non-empty 'chunks' list")
    spans = (("slot wait", "wait_start_ms", "copy_start_ms"), ("host copy", "copy_start_ms", "copy_end_ms"),
             ("to DMA queued", "copy_end_ms", "queued_ms"), ("DMA", "dma_start_ms", "dma_end_ms"))  # fmt: skip
    rows = [
        {"chunk": c["chunk"], "thread": c["thread"], "bytes": c["bytes"],
         "lane": "DMA" if phase == "DMA" else f"thread {c['thread']}", "phase": phase,
         "start_ms": float(c[a]), "end_ms": float(c[b])}
        for c in chunks
        for phase, a, b in spans
    ]  # fmt: skip
    return pd.DataFrame(rows)


def staged_timeline(tl: dict[str, Any], *, ax=None, env: dict | None = None):
    """Gantt chart of one staged copy: per staging thread its slot waits, host copies and the
    time from a copy's end to its DMA being queued; below, every chunk's DMA (CUDA events).
    Dashed lines mark the first DMA's start, the last host copy's end and the last DMA's end.

    Parameters
    ----------
    tl
        ``timeline_256MiB`` from ``benchmarks/results/<gpu>.json``.
    ax
        Axes to draw into (a new figure if None).
    env
        The result's ``env`` dict, for the footnote (GPU, date).

    Returns
    -------
    matplotlib.axes.Axes
    """
    df = timeline_frame(tl)
    ax = axes_or_new(ax)
    threads = sorted(df.thread.unique())
    lanes = [f"thread {t}" for t in threads]
    # The DMAs of different threads' streams overlap: stack them in sub-lanes by thread.
    y_of = {lane: i for i, lane in enumerate(lanes)}
    dma_base, dma_h = len(lanes) + 0.5, 1.0 / max(1, len(threads))
    for r in df.itertuples():
        if r.phase == "DMA":
            y, h = dma_base + threads.index(r.thread) * dma_h, dma_h * 0.9
        else:
            y, h = y_of[r.lane] - 0.4, 0.8
        ax.broken_barh([(r.start_ms, max(r.end_ms - r.start_ms, 1e-4))], (y, h), color=STAGE_COLORS[r.phase],
                       lw=0)  # fmt: skip
    marks = (("first DMA starts", tl.get("first_dma_start_ms")), ("last host copy ends", tl.get("last_host_copy_end_ms")),
             ("last DMA ends", tl.get("last_dma_end_ms")))  # fmt: skip
    for (label, x), style in zip(marks, (":", "--", "-."), strict=True):
        if x is not None:
            ax.axvline(x, color="k", ls=style, lw=0.8, label=f"{label} ({x:.2f} ms)")
    ax.set_yticks([*range(len(lanes)), dma_base + 0.5], [*lanes, "DMA (by thread)"])
    ax.set_ylim(dma_base + 1.2, -0.8)
    ax.set_xlim(0, max(df.end_ms.max(), tl.get("wall_ms") or 0) * 1.02)
    ax.set_xlabel("ms after the call started (host clock; DMA from CUDA events)")
    ax.grid(True, axis="x", alpha=0.3)
    n = tl.get("size_bytes", int(df.drop_duplicates("chunk").bytes.sum()))
    ax.set_title(f"one staged copy of {size_label(n)}: {df.chunk.nunique()} chunks, {len(threads)} thread(s), "
                 f"{tl.get('wall_ms', float('nan')):.2f} ms")  # fmt: skip
    handles = [Patch(color=c, label=p) for p, c in STAGE_COLORS.items()]  # bars carry no labels
    ax.legend(handles=[*handles, *ax.get_legend_handles_labels()[0]], loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize=SMALL_PT, frameon=False)  # fmt: skip
    gpu = (env or {}).get("gpu_name")
    date = str((env or {}).get("date", ""))[:10]
    engine = tl.get("engine", "numpy")
    extra = (
        f"engine {engine}, slot {size_label(tl['chunk_bytes'])}"
        if "chunk_bytes" in tl
        else f"engine {engine}"
    )
    if "tail_split" in tl:  # results from before the splits were tuned cut both ends in 4
        extra += f", first chunk / last wave in {tl.get('head_split', 4)} / {tl['tail_split']} pieces"
    footnote(ax, None, text=" · ".join(s for s in ("bench_transfer timeline", gpu, date, extra) if s))
    return ax
