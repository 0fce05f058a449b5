"""The staged-copy timeline figure, checked through the artists it draws (synthetic timeline)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from h2dlab.show import plots, plots_fastpath  # noqa: E402

MiB = 1024**2


def _synthetic_timeline():
    """Two threads, three chunks each, made-up times (synthetic, not a measurement)."""
    chunks = []
    for i in range(6):
        t, k = i % 2, i // 2
        w = 1.0 * k + 0.1 * t
        chunks.append({"thread": t, "chunk": i, "offset": i * 4 * MiB, "bytes": 4 * MiB, "slot": k % 2,
                       "wait_start_ms": w, "copy_start_ms": w + 0.05, "copy_end_ms": w + 0.8, "queued_ms": w + 0.9,
                       "dma_start_ms": w + 0.92, "dma_end_ms": w + 1.0})  # fmt: skip
    return {"size_bytes": 24 * MiB, "threads": 2, "chunk_bytes": 4 * MiB, "engine": "numpy", "n_chunks": 6,
            "wall_ms": 3.2, "first_dma_start_ms": 0.92, "last_host_copy_end_ms": 2.9, "last_dma_end_ms": 3.1,
            "chunks": chunks}  # fmt: skip


def test_timeline_frame_has_four_phases_per_chunk():
    df = plots_fastpath.timeline_frame(_synthetic_timeline())
    assert len(df) == 6 * 4
    assert set(df.phase) == set(plots_fastpath.STAGE_COLORS)
    assert (df.end_ms >= df.start_ms).all()
    assert set(df[df.phase == "DMA"].lane) == {"DMA"} and set(df[df.phase != "DMA"].lane) == {
        "thread 0",
        "thread 1",
    }


def test_staged_timeline_draws_every_span_and_the_marks():
    tl = _synthetic_timeline()
    ax = plots.staged_timeline(tl, env={"gpu_name": "GPU X", "date": "2026-01-02T00:00"})
    bars = ax.collections  # one broken_barh per (chunk, phase)
    assert len(bars) == 6 * 4
    spans = {
        (round(p.vertices[:, 0].min(), 6), round(p.vertices[:, 0].max(), 6))
        for c in bars
        for p in c.get_paths()
    }
    # the DMA of chunk 5 (thread 1, k=2): 2.1 + 0.92 .. 2.1 + 1.0
    assert (3.02, 3.1) in spans and (0.05, 0.8) in spans  # and chunk 0's host copy
    colors = {tuple(c.get_facecolor()[0][:3]) for c in bars}
    assert len(colors) == 4
    vx = sorted(ln.get_xdata()[0] for ln in ax.get_lines())
    assert vx == pytest.approx([0.92, 2.9, 3.1])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:4] == list(plots_fastpath.STAGE_COLORS) and "last DMA ends (3.10 ms)" in labels
    assert [t.get_text() for t in ax.get_yticklabels()] == ["thread 0", "thread 1", "DMA (by thread)"]
    assert "24 MiB" in ax.get_title() and "6 chunks" in ax.get_title()
    foot = [t.get_text() for t in ax.texts if getattr(t, "_h2dlab_footnote", False)]
    assert len(foot) == 1 and "GPU X" in foot[0] and "2026-01-02" in foot[0]
    assert "pieces" not in foot[0]  # an older result: no split keys, none said
    plt.close(ax.figure)


def test_staged_timeline_says_the_splits_it_ran():
    ax = plots.staged_timeline({**_synthetic_timeline(), "head_split": 4, "tail_split": 1})
    (foot,) = [t.get_text() for t in ax.texts if getattr(t, "_h2dlab_footnote", False)]
    assert "first chunk / last wave in 4 / 1 pieces" in foot
    plt.close(ax.figure)


def test_staged_timeline_refuses_what_is_not_a_timeline():
    with pytest.raises(ValueError, match="not a staged-copy timeline"):
        plots.staged_timeline({"chunks": []})
    with pytest.raises(ValueError, match="not a staged-copy timeline"):
        plots_fastpath.timeline_frame(None)
