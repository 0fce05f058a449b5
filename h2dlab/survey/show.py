"""The fleet, shown: one metric's distribution per node with the flagged GPUs marked
(:func:`plot_metric`), and a small self-contained HTML page (:func:`report_html`) in
which everything read from files is escaped."""

from __future__ import annotations

import base64
import html
import io
from typing import Any

import numpy as np
import pandas as pd

from h2dlab.escape import plot_text
from h2dlab.survey.verdicts import metric_columns

__all__ = ["plot_metric", "report_html", "source_line", "summary_line"]

FLAGGED, HEALTHY = "#c0392b", "#4a6fa5"


def plot_metric(gpus: pd.DataFrame, metric: str, ax=None, source: str = ""):
    """One dot per GPU at its ``metric`` (a :func:`~h2dlab.survey.verdicts.judge` table's
    column), one column of dots per host; flagged GPUs red and labelled with their rank,
    the median of all dashed.

    Parameters
    ----------
    gpus
        One row per GPU, judged (``flag`` column).
    metric
        A numeric column, e.g. ``h2d_pinned_alone_gbps``.
    ax
        Axes to draw on; None makes a new figure.
    source
        The footnote: where the figures come from (dataset, GPU, date).

    Returns
    -------
    matplotlib.axes.Axes
    """
    from h2dlab.show.plots_style import SMALL_PT, axes_or_new, footnote

    ax = axes_or_new(ax)
    hosts = sorted(gpus["host"].fillna("").astype(str).unique())
    where = {h: i for i, h in enumerate(hosts)}
    x = gpus["host"].fillna("").astype(str).map(where).to_numpy(float)
    y = gpus[metric].to_numpy(float)
    flagged = gpus["flag"].fillna("").astype(str) != ""
    rng = np.random.default_rng(0)  # spread the dots of one host sideways, reproducibly
    jitter = (rng.random(len(x)) - 0.5) * 0.3
    ok = ~flagged.to_numpy()
    ax.scatter(x[ok] + jitter[ok], y[ok], s=14, color=HEALTHY, label="healthy", zorder=2)
    ax.scatter(x[~ok] + jitter[~ok], y[~ok], s=30, color=FLAGGED, marker="x", label="flagged", zorder=3)
    for xi, yi, r in zip(x[~ok] + jitter[~ok], y[~ok], gpus.loc[~ok, "rank"], strict=True):
        if np.isfinite(yi):
            ax.annotate(
                f"rank {int(r)}",
                (xi, yi),
                fontsize=SMALL_PT,
                color=FLAGGED,
                xytext=(3, 3),
                textcoords="offset points",
            )
    if np.isfinite(y).any():
        ax.axhline(np.nanmedian(y), color="#777777", ls="--", lw=1, label="fleet median")
    ax.set_xticks(range(len(hosts)))
    ax.set_xticklabels(
        [plot_text(h) for h in hosts],
        rotation=90 if len(hosts) > 8 else 0,
        fontsize=SMALL_PT if len(hosts) > 8 else 9,
    )
    ax.set_xlabel("host")
    unit = "µs" if metric.endswith("_us") else "GB/s" if metric.endswith("_gbps") else ""
    ax.set_ylabel(f"{metric} ({unit})" if unit else metric)
    ax.legend(loc="best", fontsize=SMALL_PT)
    if source:
        footnote(ax, None, text=source)
    return ax


def source_line(env: dict[str, Any], name: str = "fleet.csv.gz") -> str:
    """Where a survey's figures come from: ``'data: fleet.csv.gz · 4 ranks, rank 0 on
    node-a (NVIDIA H200), 2026-12-03'``, from the fleet table's env.json."""
    n = (env.get("survey") or {}).get("world_size", "?")
    gpu = env.get("gpu_name") or "no GPU: host copies"
    return (
        f"data: {name} · {n} rank{'s' if n != 1 else ''}, rank 0 on {env.get('hostname', '?')} "
        f"({gpu}), {str(env.get('date', ''))[:10]}"
    )


def summary_line(gpus: pd.DataFrame) -> str:
    """``'4 GPUs on 2 hosts: 1 flagged (wrong_numa 1)'``."""
    flags = gpus["flag"].fillna("").astype(str)
    counts: dict[str, int] = {}
    for f in flags:
        for name in filter(None, f.split(",")):
            counts[name] = counts.get(name, 0) + 1
    what = ", ".join(f"{k} {v}" for k, v in counts.items())
    n, hosts = len(gpus), gpus["host"].fillna("").astype(str).replace("", "unknown").nunique()
    flagged = int((flags != "").sum())
    unit = (
        "GPU" if gpus["gpu_name"].fillna("").astype(str).str.strip().ne("").any() else "rank"
    )  # --device cpu: ranks, no GPU
    plural = "s" if n != 1 else ""
    return f"{n} {unit}{plural} on {hosts} host{'s' if hosts != 1 else ''}: {flagged} flagged" + (
        f" ({what})" if what else ""
    )


#: The pixels per inch a survey page shows its figures at; each is drawn at twice that (as the
#: notebook reports' are: sharp on the screens pages are read on) and shown at this size.
SHOWN_DPI = 90


def _png(ax) -> tuple[str, int, int]:
    """The figure as base64 PNG at 2x :data:`SHOWN_DPI`, and its shown width and height (px)."""
    import matplotlib.pyplot as plt

    fig = ax.figure
    width, height = (round(float(v) * SHOWN_DPI) for v in fig.get_size_inches())
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=2 * SHOWN_DPI)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode(), width, height


def report_html(gpus: pd.DataFrame, env: dict[str, Any]) -> str:
    """The survey's page: the summary, the flagged GPUs with their reasons, then one
    figure per bandwidth and the latency. Every text from the table or env.json is
    escaped; the figures are embedded (the page needs no network)."""
    e = html.escape
    source = source_line(env)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>h2dlab fleet survey</title>",
        "<style>body{font-family:sans-serif;max-width:70em;margin:auto}td,th{border:1px solid #ccc;"
        "padding:3px 6px;vertical-align:top}table{border-collapse:collapse}</style></head><body>",
        "<h1>Fleet survey</h1>",
        f"<p><b>{e(summary_line(gpus))}</b></p>",
        f"<p>{e(source)}</p>",
    ]
    bad = gpus[gpus["flag"].fillna("").astype(str) != ""]
    if len(bad):
        cols = ["host", "rank", "local_rank", "gpu_uuid", "flag", "reason"]
        head = "".join(f"<th>{e(c)}</th>" for c in cols)
        body = "".join(
            "<tr>" + "".join(f"<td>{e('' if pd.isna(r[c]) else str(r[c]))}</td>" for c in cols) + "</tr>"
            for _, r in bad.iterrows()
        )
        parts.append(f"<h2>Flagged GPUs</h2><table><tr>{head}</tr>{body}</table>")
    else:
        parts.append("<p>No GPU flagged.</p>")
    for metric in [*metric_columns(gpus), *(["latency_us"] if "latency_us" in gpus else [])]:
        if not gpus[metric].notna().any():
            continue
        img, width, height = _png(plot_metric(gpus, metric, source=source))
        parts.append(
            f"<h2>{e(metric)}</h2><img alt='{e(metric)}' width='{width}' height='{height}' "
            f"src='data:image/png;base64,{img}'>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)
