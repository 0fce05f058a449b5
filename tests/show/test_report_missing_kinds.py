"""A recording that lacks kinds (one made with ``h2dlab record --device cpu`` holds only a
host-copy sweep) still renders every report: each section whose data is missing says so in
one sentence (``Recorded.lacks``) instead of raising (issue 13)."""

from __future__ import annotations

import pytest

from h2dlab.recording import datasets, session
from h2dlab.recording.folder import write_manifest
from h2dlab.show import report

FORUM = "This recording has no forum runs: this section is skipped."  # a CUDA recording: no reason known
FORUM_CPU = (
    "This recording has no forum runs (they need a CUDA GPU: this recording was made with --device cpu): "
    "this section is skipped."
)
HOST_ONLY = "This recording's sweep was made without a CUDA GPU"


def _sweep_only(tmp_path, device):
    """SYNTHETIC: a recording folder holding only the bundled H200 sweep runs (for
    ``device="cpu"`` only their pageable rows, the strategies a ``--device cpu`` sweep has),
    its manifest naming ``device``. The rows are the bundled ones, subset; none made up."""
    bundled = session.recording("h200", environ={})
    folder = tmp_path / f"sweep-only-{device}"
    (folder / "sweep").mkdir(parents=True)
    for run in bundled.runs("sweep"):
        df = bundled.table("sweep", run)
        if device == "cpu":
            df = df[df.strategy.isin(["pageable", "pageable_non_blocking"])].reset_index(drop=True)
        datasets.save(df, folder / "sweep" / f"{run}.csv.gz", env=dict(bundled.env("sweep", run)))
    write_manifest(
        folder, {"hostname": "synthetic", "gpu_name": "none", "device": device, "status": "complete"}
    )
    return folder


def test_lacks_names_what_is_missing(tmp_path):
    rec = session.recording(str(_sweep_only(tmp_path, "cuda")), environ={})
    assert rec.kinds() == ["sweep"]
    assert rec.lacks("forum") == FORUM
    assert rec.lacks("sweep", "sweep/pow2-interleaved") == ""
    assert rec.lacks("sweep/no-such-run") == (
        "This recording has no sweep run `no-such-run`: this section is skipped."
    )
    assert rec.lacks("sweep", "forum", "allocator/pin-emptied") == (
        "This recording has no forum runs or allocator run `pin-emptied`: this section is skipped."
    )
    assert rec.get("forum") is None and rec.get("allocator", "pin-emptied") is None
    assert len(rec.get("sweep", "pow2-interleaved")) == len(rec.table("sweep", "pow2-interleaved")) > 0


def test_a_cpu_sweep_counts_as_lacking(tmp_path):
    rec = session.recording(str(_sweep_only(tmp_path, "cpu")), environ={})
    assert rec.has("sweep", "pow2-interleaved")  # the table is there ...
    assert rec.lacks("sweep/pow2-interleaved").startswith(HOST_ONLY)  # ... but not GPU copies
    assert rec.get("sweep", "pow2-interleaved") is None
    assert rec.lacks("forum", "sweep") == FORUM_CPU  # a missing kind is named first


def test_the_bundled_recording_lacks_nothing_the_notebooks_read():
    rec = session.recording("h200", environ={})
    needs = ("forum", "sweep/pow2-interleaved", "sweep/forum-sizes", "allocator/pin-emptied", "overlap")
    assert rec.lacks(*needs) == ""
    assert rec.get("forum") is not None


@pytest.mark.slow
def test_every_notebook_renders_from_a_cpu_recording(tmp_path):
    folder = _sweep_only(tmp_path, "cpu")
    out = tmp_path / "r"
    assert report.build(outdir=out, mode="replay", data=folder) == 0  # a cell that raises fails the build
    html = {name: (out / f"{name}.html").read_text() for name in report.REPORTED}
    assert html["01-forum-experiment-revisited"].count(FORUM_CPU) >= 5
    assert "This recording has no forum runs or allocator runs" in html["03-spikes-explained"]
    assert "This recording has no overlap runs" in html["04-pinned-memory-primer"]
    for name in ("01-forum-experiment-revisited", "02-fastest-way", "04-pinned-memory-primer"):
        assert HOST_ONLY in html[name], name
