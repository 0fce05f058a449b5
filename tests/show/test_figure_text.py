"""Every figure of the kit is readable in a shared report (issue 35): no text under
``plots_style.SMALL_PT`` (8 pt), and in the allocator figures (01's `pin_memory`, 03's
`pin_then_copy`) no label under a data marker.

Each figure is drawn from the bundled recording (``data/h200``, the bundled benchmark, trace
and survey), as the notebooks draw it; the checks read the drawn artists after a draw
(``get_window_extent`` of each text, the markers' centres in display pixels), not pixels.
"""

from __future__ import annotations

import inspect

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.text import Annotation, Text  # noqa: E402

from h2dlab.explain import outliers  # noqa: E402
from h2dlab.findings import advice, compare_machines  # noqa: E402
from h2dlab.recording import datasets, session  # noqa: E402
from h2dlab.show import plots, plots_style  # noqa: E402

#: plots' public names that are not figures (the style's helpers and constants)
NOT_FIGURES = {
    "axes_or_new", "footnote", "hline_label", "legend_outside", "palette_for", "pcie_limit_gbps",
    "place_labels", "pow2_boundaries", "provenance", "size_axis", "size_label", "subplots", "timed_rows",
}  # fmt: skip


#: Every figure checked: plots' public figures, the doctor's and the survey's
FIGURES = [
    "latency", "bandwidth", "timeline", "annotate", "forum_columns", "allocator_growth", "advice_bars",
    "batch_overhead", "benchmark", "cache_kept_vs_emptied", "concurrency", "device_alloc_cost", "directions",
    "duplex_aggregate", "idle_pause", "machines", "overlap", "pin_cost", "staged_timeline", "doctor.lanes",
    "survey.plot_metric",
]  # fmt: skip


@pytest.fixture(scope="module")
def rec():
    return session.recording("h200", "replay")


@pytest.fixture(scope="module")
def figures(rec):
    """name -> a function drawing that figure as a notebook does; returns the Axes."""
    sweep = rec.table("sweep", "pow2-interleaved")
    cold = rec.table("allocator", "pin-emptied")
    forum = rec.table("forum")
    ea = outliers.explain(datasets.load("forum_a100"))
    bench = datasets.load_benchmark("h200")
    return {
        "latency": lambda: plots.latency(sweep),
        "bandwidth": lambda: plots.bandwidth(sweep),
        "timeline": lambda: plots.timeline(ea),
        "annotate": lambda: plots.annotate(ea, ax=plots.timeline(ea), max_labels=6),
        "forum_columns": lambda: plots.forum_columns(rec.table("forum", "ascending-1")),
        "allocator_growth": lambda: plots.allocator_growth(forum, strategy="pin_memory"),
        "advice_bars": lambda: plots.advice_bars(advice.advice(sweep, 2**30, cold=cold), name="h200"),
        "batch_overhead": lambda: plots.batch_overhead(rec.table("batch", "equal")),
        "benchmark": lambda: plots.benchmark(bench),
        "cache_kept_vs_emptied": lambda: plots.cache_kept_vs_emptied(
            rec.table("allocator", "device-cache-kept"), rec.table("allocator", "device-empty-cache")
        ),
        "concurrency": lambda: plots.concurrency(datasets.load("h200x2_concurrent")),
        "device_alloc_cost": lambda: plots.device_alloc_cost(forum, rec.table("sweep", "forum-sizes")),
        "directions": lambda: plots.directions(rec.table("d2h")),
        "duplex_aggregate": lambda: plots.duplex_aggregate(rec.table("bidir")),
        "idle_pause": lambda: plots.idle_pause(rec.table("idle"), name="h200:idle"),
        "machines": lambda: plots.machines(compare_machines.compare(None)),
        "overlap": lambda: plots.overlap(rec.get("overlap"), env=rec.env("overlap", "overlap"), name="h200"),
        "pin_cost": lambda: plots.pin_cost(
            sweep, cold=cold, register=rec.get("allocator", "pin-register-emptied")
        ),
        "staged_timeline": lambda: plots.staged_timeline(bench["timeline_256MiB"], env=bench["env"]),
        "doctor.lanes": lambda: _lanes(rec),
        "survey.plot_metric": _survey,
    }


def _lanes(rec):
    from h2dlab import doctor
    from h2dlab.doctor.plot import lanes

    return lanes(doctor.diagnose(doctor.trace_path("", "batch_pageable"), recording=rec))


def _survey():
    from h2dlab import survey

    fleet = datasets.read(datasets.DATA_DIR / "h200_survey" / "fleet.csv.gz")
    gpus = survey.judge(survey.gpu_table(fleet))
    source = survey.source_line(fleet.attrs["env"] or {}, "fleet.csv.gz")
    return survey.plot_metric(gpus, survey.metric_columns(gpus)[0], source=source)


def _texts(fig) -> list[Text]:
    fig.canvas.draw()
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def test_every_public_figure_of_plots_is_checked():
    public = {
        n for n in plots.__all__ if callable(getattr(plots, n)) and not inspect.isclass(getattr(plots, n))
    } - NOT_FIGURES
    assert public == {n for n in FIGURES if "." not in n}


def test_small_text_below_8_pt_is_caught():
    fig, ax = plt.subplots()
    ax.text(0.5, 0.5, "tiny", fontsize=6)
    assert [t.get_text() for t in _texts(fig) if t.get_fontsize() < 8] == ["tiny"]
    plt.close(fig)


@pytest.mark.slow  # 21 figures, about 15 s on 2 cores
@pytest.mark.parametrize("name", FIGURES)
def test_no_text_in_a_figure_is_under_8_pt(figures, name):
    ax = figures[name]()
    small = {(t.get_text()[:40], t.get_fontsize()) for t in _texts(ax.figure) if t.get_fontsize() < 8}
    plt.close(ax.figure)
    assert not small, f"{name}: text under 8 pt: {sorted(small)[:5]}"
    assert plots_style.SMALL_PT >= 8  # the house style's smallest size


def _marker_discs(ax, renderer) -> list[tuple[float, float, float]]:
    """(x, y, radius) in display pixels of every data marker the axes draws (scatter points and
    line markers), those whose centre lies inside the axes."""
    px_per_pt = ax.figure.dpi / 72
    box = ax.get_window_extent(renderer)
    discs = []
    for c in ax.collections:
        if isinstance(c, PathCollection) and len(c.get_offsets()):
            xy = c.get_offset_transform().transform(np.asarray(c.get_offsets(), float))
            sizes = np.broadcast_to(c.get_sizes() if len(c.get_sizes()) else [36.0], (len(xy),))
            discs += [(x, y, np.sqrt(s) / 2 * px_per_pt) for (x, y), s in zip(xy, sizes, strict=True)]
    for ln in ax.lines:
        if ln.get_marker() in (None, "None", "", " ") or not len(ln.get_xydata()):
            continue
        xy = ln.get_transform().transform(np.asarray(ln.get_xydata(), float))
        discs += [(x, y, ln.get_markersize() / 2 * px_per_pt) for x, y in xy]
    return [(x, y, r) for x, y, r in discs if np.isfinite([x, y]).all() and box.contains(x, y)]


def labels_over_markers(ax) -> list[str]:
    """The texts of the figure whose box, where it lies inside the axes, touches a data marker."""
    fig = ax.figure
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    box = ax.get_window_extent(r)
    discs = _marker_discs(ax, r)
    hit = []
    for t in _texts(fig):
        if isinstance(t, Annotation):
            t.update_positions(r)  # the text's box alone: its arrow points at a marker on purpose
        b = Text.get_window_extent(t, r)
        x0, x1, y0, y1 = max(b.x0, box.x0), min(b.x1, box.x1), max(b.y0, box.y0), min(b.y1, box.y1)
        if x0 >= x1 or y0 >= y1:
            continue  # outside the data area: no marker is drawn there
        for x, y, rad in discs:
            dx, dy = x - min(max(x, x0), x1), y - min(max(y, y0), y1)
            if dx * dx + dy * dy < rad * rad:
                hit.append(t.get_text())
                break
    return hit


def test_the_overlap_check_sees_a_label_on_a_marker():
    fig, ax = plt.subplots()
    ax.scatter([1.0, 2.0], [1.0, 2.0], s=40)
    ax.plot([3.0], [3.0], "o", ms=7)
    ax.text(2.0, 2.0, "on the scatter point")
    ax.text(3.0, 3.0, "on the line marker", ha="center", va="center")
    ax.text(1.5, 2.8, "clear of both")
    assert labels_over_markers(ax) == ["on the scatter point", "on the line marker"]
    plt.close(fig)


@pytest.mark.parametrize(
    "kind,run,strategy",
    [("forum", None, "pin_memory"), ("allocator", "pin-warm", "pin_then_copy")],
    ids=["01-pin_memory", "03-allocator"],
)
def test_no_label_of_the_allocator_figure_lies_under_a_marker(rec, kind, run, strategy):
    ax = plots.allocator_growth(rec.table(kind, run), strategy=strategy)
    hit = labels_over_markers(ax)
    assert _marker_discs(ax, ax.figure.canvas.get_renderer()), "the figure draws markers"
    plt.close(ax.figure)
    assert not hit, f"labels under a marker: {hit}"


def test_the_allocator_figure_still_names_each_power_of_two(rec):
    ax = plots.allocator_growth(rec.table("allocator", "pin-warm"), strategy="pin_then_copy")
    ax.figure.canvas.draw()
    named = {t.get_text() for t in _texts(ax.figure)}
    g = rec.table("allocator", "pin-warm")
    g = g[(g.strategy == "pin_then_copy") & ~g.warmup]
    lo, hi = int(np.ceil(np.log2(g.size_bytes.min()))), int(np.floor(np.log2(g.size_bytes.max())))
    plt.close(ax.figure)
    assert {plots.size_label(2**k) for k in range(lo, hi + 1)} <= named


def test_place_labels_moves_a_label_off_a_marker_and_keeps_it_in_a_dense_cloud():
    fig, ax = plots.subplots()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    ax.scatter([5.0], [5.0], s=30)
    fig.canvas.draw()
    # a marker just where the label's default spot (8, 14 points up-right of 5, 5) puts its text
    x, y = ax.transData.inverted().transform(ax.transData.transform((5.0, 5.0)) + np.array([30.0, 22.0]))
    ax.scatter([x], [y], s=200)
    ax.annotate("a label", (5.0, 5.0), xytext=(8, 14), textcoords="offset points")
    assert labels_over_markers(ax) == ["a label"]
    assert plots.place_labels(ax) == 0 and labels_over_markers(ax) == []
    plt.close(fig)

    fig, ax = plots.subplots()  # markers everywhere: no clear spot, the label stays (not hidden)
    gx, gy = np.meshgrid(np.linspace(0, 10, 60), np.linspace(0, 10, 40))
    ax.scatter(gx.ravel(), gy.ravel(), s=30)
    ax.annotate("a label", (5.0, 5.0), xytext=(8, 14), textcoords="offset points")
    assert plots.place_labels(ax) == 0 and ax.texts[0].get_visible()
    plt.close(fig)


def test_the_annotated_forum_timeline_puts_fewer_labels_over_markers():
    """01's and 03's annotated timeline (the forum's A100 table): labels that found a spot
    clear of the points (on main, 4 of its 6 labels lay over points; 1 spot has none)."""
    ea = outliers.explain(datasets.load("forum_a100"))
    ax = plots.annotate(ea, ax=plots.timeline(ea), max_labels=6)
    hit = labels_over_markers(ax)
    plt.close(ax.figure)
    assert len(hit) <= 1, hit
