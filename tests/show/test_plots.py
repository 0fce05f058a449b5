"""Figures, checked through the artists they draw (not pixels)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from h2dlab.explain import model, outliers
from h2dlab.findings import advice, compare_machines
from h2dlab.recording import datasets
from h2dlab.show import plots  # noqa: E402


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
    # the A100's first row, recomputed from the raw table, in plain digits (was '1.25e+03 ms')
    first = datasets.load("forum_a100").sort_values("order").wall_ms.iloc[0]
    assert f"{first:.0f} ms vs" in joined and "e+" not in joined


def test_allocator_growth_marks_new_blocks():
    h = datasets.load("h200_forum")
    ax = plots.allocator_growth(h, strategy="pin_memory")
    marked = next(ln for ln in ax.get_lines() if ln.get_label().startswith("num_host_alloc"))
    assert len(marked.get_xdata()) == int((h[h.strategy == "pin_memory"].host_allocs > 0).sum())


def test_plot_into_given_axes():
    fig, ax = plt.subplots()
    assert plots.forum_columns(datasets.load("forum_a100"), ax=ax) is ax


# -- every notebook figure: titles, legends off the data, labels apart and inside ---------------


def text_problems(fig):
    """Pairs of visible axes texts whose boxes overlap, and texts that leave the figure."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    texts = [t for ax in fig.axes for t in [*ax.texts, ax.title] if t.get_visible() and t.get_text().strip()]
    boxes = [(t.get_text(), t.get_window_extent(r)) for t in texts]
    fb = fig.bbox
    out = [
        a for a, b in boxes if b.x0 < fb.x0 - 1 or b.y0 < fb.y0 - 1 or b.x1 > fb.x1 + 1 or b.y1 > fb.y1 + 1
    ]
    overlaps = [(a, c) for i, (a, b) in enumerate(boxes) for c, d in boxes[i + 1 :] if b.overlaps(d)]
    return overlaps, out


def test_text_checker_catches_two_labels_at_one_spot_and_one_outside():
    fig, ax = plt.subplots()
    ax.annotate("same spot", (0.5, 0.5), xycoords="axes fraction")
    ax.annotate("same spot", (0.5, 0.5), xycoords="axes fraction")
    ax.text(3.0, 0.5, "far right", transform=ax.transAxes)
    overlaps, out = text_problems(fig)
    assert overlaps == [("same spot", "same spot")] and out == ["far right"]


def test_place_labels_separates_labels_at_one_spot():
    fig, ax = plots.subplots()
    ax.plot([1, 2], [1, 2])
    for _ in range(4):
        ax.annotate("a label at one spot", (1.5, 1.5), xytext=(8, 14), textcoords="offset points")
    plots.place_labels(ax)
    assert text_problems(fig) == ([], [])


def _figures():
    """Each notebook figure, drawn from the bundled data (name, thunk returning the figure)."""
    sweep = datasets.load("h200_sweep")
    inter = datasets.run_named(sweep, "pow2-interleaved")
    a100, h200 = datasets.load("forum_a100"), datasets.load("h200_forum")
    alloc = datasets.load("h200_allocator")
    ea = outliers.explain(a100)
    run = datasets.run_named

    def one(draw):
        fig, ax = plots.subplots()
        draw(ax)
        return fig

    def pair(draw):
        fig, axs = plots.subplots(1, 2)
        for i, ax in enumerate(axs):
            draw(ax, i)
        return fig

    yield (
        "latency+bandwidth",
        lambda: pair(lambda ax, i: (plots.latency if i == 0 else plots.bandwidth)(inter, ax=ax)),
    )
    yield (
        "bandwidth 2 strategies",
        lambda: one(lambda ax: plots.bandwidth(inter, ax=ax, strategies=["pageable", "pinned_reuse"])),
    )
    yield (
        "forum columns a100|h200",
        lambda: pair(lambda ax, i: plots.forum_columns(a100 if i == 0 else run(h200, "ascending-1"), ax=ax)),
    )
    yield (
        "forum columns+annotate",
        lambda: one(
            lambda ax: plots.annotate(ea, ax=plots.forum_columns(a100, ax=ax), x="size_bytes", max_labels=4)
        ),
    )
    yield (
        "timelines+annotate",
        lambda: pair(
            lambda ax, i: plots.annotate(
                ea[ea.strategy == ("pinned_to_cuda", "direct_to_cuda")[i]],
                ax=plots.timeline(ea, strategy=("pinned_to_cuda", "direct_to_cuda")[i], ax=ax),
                max_labels=3,
            )
        ),
    )
    yield (
        "timeline all+annotate",
        lambda: one(lambda ax: plots.annotate(ea, ax=plots.timeline(ea, ax=ax), max_labels=6)),
    )
    yield "allocator growth", lambda: one(lambda ax: plots.allocator_growth(h200, ax=ax))
    yield "allocator 2x2", lambda: _grid(alloc)
    yield (
        "cache kept vs emptied",
        lambda: one(
            lambda ax: plots.cache_kept_vs_emptied(
                run(alloc, "device-cache-kept"), run(alloc, "device-empty-cache"), ax=ax
            )
        ),
    )
    yield (
        "device alloc cost",
        lambda: one(lambda ax: plots.device_alloc_cost(h200, run(sweep, "forum-sizes"), ax=ax)),
    )
    yield (
        "pin cost",
        lambda: one(
            lambda ax: plots.pin_cost(
                inter, cold=run(alloc, "pin-emptied"), register=run(alloc, "pin-register-emptied"), ax=ax
            )
        ),
    )
    yield "benchmark", lambda: one(lambda ax: plots.benchmark(datasets.load_benchmark("h200"), ax=ax))
    yield (
        "overlap",
        lambda: one(lambda ax: plots.overlap(datasets.timeline("h200_overlap"), ax=ax, name="h200_overlap")),
    )
    yield "concurrency", lambda: one(lambda ax: plots.concurrency(datasets.load("h200x2_concurrent"), ax=ax))
    yield "machines", lambda: one(lambda ax: plots.machines(compare_machines.compare(None), ax=ax))
    yield (
        "advice",
        lambda: one(
            lambda ax: plots.advice_bars(advice.advice(inter, 2**30, cold=run(alloc, "pin-emptied")), ax=ax)
        ),
    )


def _grid(alloc):
    fig, axs = plots.subplots(2, 2, sharex=True, sharey=True)
    for ax, r in zip(
        axs.flat, ["pin-warm", "pin-emptied", "pin-register-warm", "pin-register-emptied"], strict=True
    ):
        plots.allocator_growth(datasets.run_named(alloc, r), strategy="pin_then_copy", ax=ax)
        ax.set_title(r)
    return fig


@pytest.mark.parametrize("name,draw", list(_figures()), ids=[n for n, _ in _figures()])
def test_notebook_figures_have_titles_outside_legends_and_apart_labels(name, draw):
    fig = draw()
    for ax in fig.axes:
        assert ax.get_title(), f"{name}: an axes without a title"
        leg = ax.get_legend()
        if leg is not None:  # legends sit outside the data area
            fig.canvas.draw()
            lb, ab = leg.get_window_extent(), ax.get_window_extent()
            assert lb.x0 >= ab.x1 - 1 or lb.y1 <= ab.y0 + 1, f"{name}: legend over the data"
    overlaps, out = text_problems(fig)
    assert not overlaps, f"{name}: overlapping texts {overlaps[:3]}"
    assert not out, f"{name}: texts leave the figure {out[:3]}"


def test_machines_draws_one_bar_per_machine_and_gbps_row():
    t = compare_machines.compare(None)
    ax = plots.machines(t)
    g = t[t.unit == "GB/s"]
    from matplotlib.container import BarContainer

    bars = [b for c in ax.containers if isinstance(c, BarContainer) for b in c]
    heights = sorted(round(b.get_width(), 6) for b in bars)
    assert heights == sorted(round(v, 6) for v in g.value)  # every GB/s figure drawn, nothing else
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == sorted(g.machine.unique())


def test_machines_footnote_names_each_machines_gpu_and_date():
    import matplotlib.pyplot as plt

    t = compare_machines.compare(None)
    ax = plots.machines(t)
    plt.close(ax.figure)
    (foot,) = _footnote(ax)
    h200 = t[t.machine == "H200 (bundled)"]
    days = " and ".join(dict.fromkeys(h200[h200.unit == "GB/s"].date))
    assert days.startswith("20")
    assert f"H200 (bundled): NVIDIA H200, {days}; " in foot
    assert "A100 (forum): NVIDIA A100, date not given" in foot  # its table's env.json has no date


def test_advice_bars_colour_each_case():
    from matplotlib.container import BarContainer

    inter = datasets.run_named(datasets.load("h200_sweep"), "pow2-interleaved")
    t = advice.advice(inter, 2**30)
    t2 = t.assign(case=["one tensor to the GPU"] * 3 + ["results back to the host"] * 3)  # SYNTHETIC split
    ax = plots.advice_bars(t2)
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [len(c) for c in bars[:2]] == [3, 3] and bars[0][0].get_facecolor() != bars[1][0].get_facecolor()
    assert "each case" in ax.get_title() and "to the GPU" in plots.advice_bars(t).get_title()


def test_the_bandwidth_figure_draws_the_numbers_the_sentence_states():
    """Line = GB/s of the median time, as findings_speed.bandwidth says it (reader, session 29:
    the figure drew the median of per-copy GB/s, 36.9 for staged at 2 GiB beside the text's 30.7)."""
    from h2dlab.findings import speed as findings_speed
    from h2dlab.recording import sources

    sweep = sources.load("h200:sweep:pow2-interleaved")
    f = findings_speed.bandwidth(sweep)
    ax = plots.bandwidth(sweep)
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    for strategy, m in f.table.groupby("strategy"):
        m = m.sort_values("size_bytes")
        assert list(lines[strategy].get_ydata()) == pytest.approx(list(m.gbps)), strategy
    n = f.table[f.table.size_bytes == f.table.size_bytes.max()]["n"]
    assert n.nunique() == 1 and f"(GB/s of the median time, {int(n.iloc[0])} copies each)" in f.verdict
    plt.close(ax.figure)


def test_names_without_a_house_colour_get_distinct_colours():
    """Batch methods and benchmark ways have no PALETTE colour; they were all dark grey, so two
    lines of one figure could not be told apart (reader, session 29: loop_to, to_device_packed)."""
    from h2dlab.show.plots_style import PALETTE, palette_for

    names = ["pinned_reuse", "loop_to", "to_device_packed", "cat_then_copy", "tensordict_pin"]
    got = palette_for(names)
    assert got["pinned_reuse"] == PALETTE["pinned_reuse"]
    assert len(set(got.values())) == len(names)
    assert palette_for(names) == got  # the same names, the same colours
    many = palette_for([f"way{i}" for i in range(30)])
    assert len(many) == 30


def test_compare_machines_wide_and_definitions_are_the_table_and_its_metrics():
    t = compare_machines.compare(None)
    w = compare_machines.wide(t)
    row = t.iloc[0]
    assert w.loc[(row.metric, row.strategy, row.unit), row.machine] == pytest.approx(round(row.value, 2))
    d = compare_machines.definitions()
    assert list(d.index) == list(compare_machines.METRICS) and set(t.metric) <= set(d.index)
