"""Adding a figure, done once the way docs/ARCHITECTURE.md says: the number in a findings
function (a ``Finding`` with its table), the drawing in ``show/`` that takes that table and
never recomputes it, with the house style's provenance footnote, and the notebook cell that
calls both. Here the first two are written in the test, over the bundled sweep."""

from __future__ import annotations

import matplotlib
import pandas as pd

from h2dlab.explain.finding import Finding
from h2dlab.explain.model import timed, value_ms
from h2dlab.recording import datasets
from h2dlab.show import plots_style

matplotlib.use("Agg")


def _median_per_strategy(df: pd.DataFrame, size_bytes: int) -> Finding:  # step 1: findings/
    t = timed(df[df["size_bytes"] == size_bytes])
    table = t.assign(ms=value_ms(t)).groupby("strategy", as_index=False)["ms"].median()
    best = table.sort_values("ms").iloc[0]
    return Finding(f"`{best.strategy}` is fastest ({best.ms:.2f} ms).", True, {"best": best.strategy}, table)


def _draw(f: Finding, df: pd.DataFrame, ax=None):  # step 2: show/ draws the finding's table
    ax = plots_style.axes_or_new(ax)
    colours = plots_style.palette_for(f.table["strategy"])
    ax.bar(f.table["strategy"], f.table["ms"], color=[colours[s] for s in f.table["strategy"]])
    ax.set_ylabel("median ms")
    plots_style.footnote(ax, df)
    return ax


def test_a_figure_draws_its_findings_table_with_the_house_footnote():
    sweep = datasets.run_named(datasets.load("h200_sweep"), "pow2-interleaved")
    f = _median_per_strategy(sweep, 2**30)
    ax = _draw(f, sweep)
    heights = [p.get_height() for p in ax.patches]
    assert heights == f.table["ms"].tolist()  # drawn from the finding's table, not recomputed
    foot = [t.get_text() for t in ax.texts if getattr(t, "_h2dlab_footnote", False)]
    assert len(foot) == 1 and foot[0].startswith("data: h200_sweep · NVIDIA H200")
    assert sweep.attrs["env"]["date"][:10] in foot[0]  # dataset, GPU and date
    matplotlib.pyplot.close("all")
