"""explain --out never writes into a kind folder of a recording, nor a bundled dataset's
folder (helper "guard"). Before, only the source's own folder was refused: a path source
(``explain REC/d2h --out REC/batch/x.csv.gz``) wrote its annotated d2h table into the batch
kind, which every reader then took for one more batch run (exit 0). Run on a copy of
data/h200 in tmp_path; data/ is only read."""

import shutil

import pytest

from h2dlab.cli import main as cli
from h2dlab.recording import datasets, session
from tests.conftest import refused_in_one_line


@pytest.fixture
def rec(tmp_path, monkeypatch):
    """A copy of data/h200's recording.json and its d2h, batch and sweep kinds."""
    folder = tmp_path / "rec"
    folder.mkdir()
    shutil.copy(datasets.DATA_DIR / "h200" / "recording.json", folder)
    for kind in ("d2h", "batch", "sweep"):
        shutil.copytree(datasets.DATA_DIR / "h200" / kind, folder / kind)
    (folder / "sweep" / "deeper").mkdir()
    monkeypatch.chdir(tmp_path)
    return folder


def _batch_runs(folder):
    return session.Recorded(folder).runs("batch")


@pytest.mark.parametrize(
    "source,out,inside",
    [
        ("rec/d2h", "rec/batch/x.csv.gz", "rec/batch, the batch folder of the recording"),
        ("rec/d2h/d2h.csv.gz", "rec/batch/x.csv", "rec/batch, the batch folder of the recording"),
        ("rec/batch", "rec/sweep/x.csv.gz", "rec/sweep, the sweep folder of the recording"),
        ("rec/d2h", "rec/sweep/deeper/x.csv.gz", "rec/sweep, the sweep folder of the recording"),
    ],
)
def test_explain_out_in_another_kind_is_refused(rec, capsys, source, out, inside):
    assert _batch_runs(rec) == ["equal", "mixed"]
    before = {p.name: sorted(q.name for q in p.iterdir()) for p in rec.iterdir() if p.is_dir()}
    line = refused_in_one_line(
        ["explain", source, "--out", out], [inside, "one more", "--out x."], capsys, rec
    )
    assert line.startswith(f"h2dlab: error: --out {out} is inside ")
    assert line.endswith(
        f"write the annotated table outside every kind folder, e.g. --out {out.split('/')[-1]}"
    )
    assert {p.name: sorted(q.name for q in p.iterdir()) for p in rec.iterdir() if p.is_dir()} == before
    assert _batch_runs(rec) == ["equal", "mixed"]


def test_inside_a_kind_folder_the_hint_points_out_of_it(rec, capsys, monkeypatch):
    monkeypatch.chdir(rec / "batch")
    line = refused_in_one_line(
        ["explain", "../d2h", "--out", "x.csv.gz"], ["batch folder"], capsys, rec / "batch"
    )
    assert line.endswith(f"e.g. --out {rec.parent.resolve() / 'x.csv.gz'}")


def test_a_bundled_datasets_folder_is_refused(tmp_path, capsys, monkeypatch):
    """On a copy of the data folder (were the guard to fail, data/ stays as it is)."""
    monkeypatch.chdir(tmp_path)
    for name in ("forum_a100", "h200_forum"):
        shutil.copytree(datasets.DATA_DIR / name, tmp_path / "data" / name)
    monkeypatch.setattr(datasets, "DATA_DIR", tmp_path / "data")
    folder = tmp_path / "data" / "h200_forum"
    line = refused_in_one_line(
        ["explain", "forum_a100", "--out", str(folder / "x.csv.gz")],
        ["the dataset h200_forum"],
        capsys,
        folder,
    )
    assert "one more h200_forum run" in line


def test_beside_the_recording_or_elsewhere_is_written(rec, capsys):
    for out in ("rec/x.csv.gz", "x.csv.gz"):
        assert cli.main(["explain", "rec/d2h", "--out", out]) == 0
        assert (rec.parent / out).is_file()
    assert _batch_runs(rec) == ["equal", "mixed"]
    assert len(session.Recorded(rec).table("batch")) == len(
        datasets.load(datasets.DATA_DIR / "h200" / "batch")
    )
