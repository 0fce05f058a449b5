"""Host-side headlines state their range across the recordings of one GPU model; the
link-side figure is kept apart (issue 31, item 5); question 2 on the forum's A100 table."""

import re

import numpy as np
import pandas as pd
import pytest

from h2dlab.findings import stability

GIB, MIB = 2**30, 2**20


def sweep(pinned_ms, pageable_ms, first_pin_ms, register_ms, run_id):
    """SYNTHETIC sweep rows: at 1 GiB a pinned copy, a pageable copy, a host_register copy and
    a pin_memory() that made a new block; at 1 MiB..1 GiB cached pin_memory() at half the
    pageable time (so pinning first pays from 1 MiB)."""
    rows = []
    for rep in range(3):
        rows += [
            {"strategy": "pinned_reuse", "size_bytes": GIB, "event_ms": pinned_ms, "rep": rep},
            {"strategy": "host_register", "size_bytes": GIB, "event_ms": pinned_ms + register_ms, "rep": rep},
        ]
        for size in (MIB, 64 * MIB, GIB):
            page = pageable_ms * size / GIB
            rows += [
                {"strategy": "pageable", "size_bytes": size, "event_ms": page, "rep": rep},
                {
                    "strategy": "pin_then_copy",
                    "size_bytes": size,
                    "event_ms": page / 2,
                    "rep": rep,
                    "host_allocs": 0,
                },
            ]
    rows.append(
        {"strategy": "pin_then_copy", "size_bytes": GIB, "event_ms": first_pin_ms, "rep": 3, "host_allocs": 1}
    )
    base = {"run_id": run_id, "warmup": False, "error": "", "wall_ms": np.nan, "host_allocs": np.nan}
    df = pd.DataFrame([{**base, **r} for r in rows])
    df["wall_ms"] = df.event_ms
    df["order"] = range(len(df))
    return df


def two():
    a = stability.Sweep("here", "2026-12-03", sweep(19.4, 120.0, 500.0, 55.0, "a"), None)
    b = stability.Sweep("older", "2026-11-30", sweep(19.5, 150.0, 570.0, 58.0, "b"), None)
    return [a, b]


def test_each_host_side_headline_is_stated_as_its_range_across_recordings():
    f = stability.host_side(two())
    gbps = [GIB / ms / 1e6 for ms in (120.0, 150.0)]
    assert f["pageable_gbps"]["min"] == pytest.approx(min(gbps)) and f["pageable_gbps"][
        "max"
    ] == pytest.approx(max(gbps))
    assert f"a pageable copy of 1 GiB ran at {min(gbps):.1f}–{max(gbps):.1f} GB/s" in f.verdict
    assert "the first `pin_memory()` of 1 GiB took 500–570 ms" in f.verdict
    assert "`cudaHostRegister` of 1 GiB cost 55–58 ms" in f.verdict
    assert "pinning first paid from 1 MiB up in every recording" in f.verdict
    # the link's figure stands apart, under its own words, and moved less: holds
    link = [GIB / ms / 1e6 for ms in (19.5, 19.4)]
    assert f"Link side, stable: a pinned copy of 1 GiB ran at {link[0]:.1f}–{link[1]:.1f} GB/s." in f.verdict
    assert f.verdict.index("Link side") < f.verdict.index("Host side") and f.holds


def test_host_side_does_not_hold_when_the_link_moved_more_than_the_host():
    a = stability.Sweep("a", "d", sweep(19.4, 120.0, 500.0, 55.0, "a"), None)
    b = stability.Sweep("b", "d", sweep(30.0, 121.0, 501.0, 55.5, "b"), None)
    assert not stability.host_side([a, b]).holds


def test_one_recording_says_its_host_figures_have_no_range_yet():
    f = stability.host_side(two()[:1])
    assert "the one recording of this GPU model" in f.verdict and "no range yet" in f.verdict
    assert f"ran at {GIB / 120.0 / 1e6:.1f} GB/s" in f.verdict  # one value, not a range of one
    assert not f.holds


def test_names_and_dates_from_files_reach_the_sentence_inert():
    markdown_it = pytest.importorskip("markdown_it")
    a, b = two()
    evil = stability.Sweep(
        "<script>alert(1)</script>*bold*", "<img src=x onerror=alert(2)>*d*", a.sweep, None
    )
    html = markdown_it.MarkdownIt("commonmark").render(stability.host_side([evil, b]).verdict)
    assert not re.search(r"<(script|img|em|strong)\b", html)


def test_on_the_bundled_recordings_the_h200_model_has_two_and_the_ranges_recompute():
    from h2dlab.explain.model import timed, value_ms
    from h2dlab.recording import datasets, session

    rec = session.recording("h200", mode="replay")
    here = stability.Sweep(
        rec.name, rec.date(), rec.get("sweep", "pow2-interleaved"), rec.get("allocator", "pin-emptied")
    )
    found = stability.same_model("NVIDIA H200", here)
    assert [s.label for s in found] == ["h200", "h200_sweep"]
    old = datasets.run_named(datasets.load("h200_sweep"), "pow2-interleaved")
    page = []
    for sw in (here.sweep, old):
        t = timed(sw[(sw.strategy == "pageable") & (sw.size_bytes == GIB)])
        page.append(GIB / float(value_ms(t).median()) / 1e6)
    f = stability.host_side(found)
    assert f["pageable_gbps"]["min"] == pytest.approx(min(page)) and f["pageable_gbps"][
        "max"
    ] == pytest.approx(max(page))
    assert f.holds  # the pinned copy moved less than every host-side figure between the two
    assert stability.same_model("NVIDIA A100", None) == []


def test_question_2_on_the_forums_a100_recomputes_from_its_rows():
    from h2dlab.explain import outliers
    from h2dlab.recording import datasets

    a100 = datasets.load("forum_a100")
    f = stability.forum_pinning(outliers.explain(a100))
    p = a100[a100.size_bytes.isin(f["sizes"])].pivot_table(
        index="size_bytes", columns="strategy", values="wall_ms"
    )
    ratio = (p.pin_memory + p.pinned_to_cuda) / p.direct_to_cuda
    assert f["ratio"][1] == pytest.approx(ratio.median()) and 0.85 < f["ratio"][1] < 0.95
    assert f["direct_gbps"] == pytest.approx((p.index / p.direct_to_cuda / 1e6).median())
    assert f"a median {ratio.median():.2f}x the time of the direct" in f.verdict
    assert min(f["sizes"]) >= 256 * MIB and f["rerun_ratio"] is None


def test_for_recording_reads_the_notebooks_recording_first_and_says_when_it_has_no_sweep():
    from h2dlab.recording import session

    rec = session.recording("h200", mode="replay")
    f = stability.for_recording(rec)
    assert list(f.table.label) == ["h200", "h200_sweep"] and f.verdict.startswith("Across the 2 recordings")

    class NoSweep:  # SYNTHETIC: a recording without a sweep
        name = "x"

        def get(self, *a):
            return None

    g = stability.for_recording(NoSweep())
    assert not g.holds and "no interleaved sweep" in g.verdict


def test_a_recording_that_stops_short_of_1_gib_is_read_at_the_largest_size_all_share():
    a, b = two()
    short = b.sweep[b.sweep.size_bytes < GIB]  # SYNTHETIC: a quick plan, up to 64 MiB
    with pytest.raises(ValueError, match="share no size"):  # its pinned copies stop at... none
        stability.host_side([a, stability.Sweep("quick", "d", short, None)])
    short = pd.concat([short, b.sweep[(b.sweep.strategy == "pinned_reuse")].assign(size_bytes=64 * MIB)])
    a2 = pd.concat([a.sweep, a.sweep[(a.sweep.strategy == "pinned_reuse")].assign(size_bytes=64 * MIB)])
    f = stability.host_side([stability.Sweep("a", "d", a2, None), stability.Sweep("quick", "d", short, None)])
    assert "a pageable copy of 64 MiB ran at" in f.verdict and "nan" not in f.verdict
    assert "(in 0 of 2" not in f.verdict
