"""Figures, checked through the artists they draw (not pixels)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from h2dlab import datasets, model, outliers, plots  # noqa: E402


@pytest.fixture(scope="module")
def pow2():
    return datasets.run_named(datasets.load("h200_sweep"), "pow2")


def _footnote(ax):
    return [t.get_text() for t in ax.texts if getattr(t, "_h2dlab_footnote", False)]


def test_latency_draws_each_strategy_and_fit(pow2):
    ax = plots.latency(pow2)
    strategies = sorted(pow2.strategy.unique())
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == strategies
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert len(dashed) == len(strategies)
    assert ax.get_yscale() == "log" and ax.get_xscale() == "log"
    # The median points are the medians of the table.
    med = model.medians(pow2)
    pr = med[med.strategy == "pinned_reuse"].sort_values("size_bytes")
    line = next(
        ln
        for ln in ax.get_lines()
        if ln.get_color() == plots.PALETTE["pinned_reuse"] and ln.get_linestyle() == "-"
    )
    assert np.allclose(line.get_ydata(), pr.median_ms)
    assert "h200_sweep" in _footnote(ax)[0] and "NVIDIA H200" in _footnote(ax)[0]


def test_bandwidth_peak_and_pcie_lines(pow2):
    ax = plots.bandwidth(pow2)
    h = sorted(
        {
            round(ln.get_ydata()[0], 3)
            for ln in ax.get_lines()
            if len(set(ln.get_ydata())) == 1 and len(ln.get_ydata()) == 2
        }
    )
    peak = model.medians(pow2).query("strategy == 'pinned_reuse'").gbps.max()
    assert round(peak, 3) in h and 63.0 in h
    labels = " ".join(t.get_text() for t in ax.texts)
    assert "PCIe Gen5 x16" in labels and "measured peak" in labels


def test_timeline_shades_each_episode_and_marks_causes():
    e = outliers.explain(datasets.load("forum_a100"))
    ax = plots.timeline(e, strategy="pinned_to_cuda")
    spans = [p for p in ax.patches if p.get_alpha() and abs(p.get_alpha() - 0.18) < 1e-9]
    assert len(spans) == e[(e.strategy == "pinned_to_cuda") & (e.episode >= 0)].episode.nunique()
    leg = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "flagged: episode" in leg and "flagged: unexplained" in leg


def test_annotate_labels_at_most_n_and_each_cause_first():
    e = outliers.explain(datasets.load("forum_a100"))
    ax = plots.forum_columns(datasets.load("forum_a100"))
    before = len(ax.texts)
    plots.annotate(e, ax=ax, x="size_bytes", max_labels=4)
    new = ax.texts[before:]
    assert len(new) == 4
    joined = " ".join(t.get_text() for t in new)
    assert "context start-up" in joined and "new pinned block" in joined


def test_allocator_growth_marks_new_blocks():
    h = datasets.load("h200_forum")
    ax = plots.allocator_growth(h, strategy="pin_memory")
    marked = next(ln for ln in ax.get_lines() if ln.get_label().startswith("num_host_alloc"))
    assert len(marked.get_xdata()) == int((h[h.strategy == "pin_memory"].host_allocs > 0).sum())


def test_plot_into_given_axes():
    fig, ax = plt.subplots()
    assert plots.forum_columns(datasets.load("forum_a100"), ax=ax) is ax
