"""Whether a folder is a *recording* gets one answer everywhere (helper "guard").

session.Recorded, datasets.load (and its idle calibration), sources.resolve's
RECORDING:KIND and ``h2dlab record --out`` each decided it their own way: kind folders
without recording.json were a recording to session but "not a recording" to record --out
and "outside a recording" to the wake calibration; a kind folder of runs stopped early was
a recording to datasets.load but not to session; a folder with a subfolder of another name
was "a recording" to datasets.load only. Now record_folder.is_recording decides, and
every reader asks it. The tables are SYNTHETIC (forum_a100's first rows, saved anew).
"""

import json

import pytest

from h2dlab.cli import record as cli_record
from h2dlab.errors import UsageError
from h2dlab.recording import datasets, session, sources
from h2dlab.recording.folder import is_kind_folder, is_recording, kinds_in, new_manifest, write_manifest
from tests.conftest import refused_in_one_line


def _table(path, **env):
    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.save(datasets.load("forum_a100").head(30), path, env={"synthetic": True, **env})


def _build(folder, case):
    folder.mkdir()
    if case == "kinds without recording.json":
        _table(folder / "sweep" / "synthetic.csv.gz")
    elif case == "recording.json without kinds":
        write_manifest(folder, new_manifest([], quick=True, device="cpu", gpus=0, gpu_name=None, command="x"))
    elif case == "kind folder of partial files only":
        (folder / "sweep").mkdir()
        (folder / "sweep" / "synthetic.partial.csv").write_text("run_id,order\n")
    elif case == "kind folder of runs stopped early":
        _table(folder / "sweep" / "synthetic.csv.gz", measured_rows=30, planned_rows=90)
    elif case == "plain folder of tables":
        _table(folder / "synthetic.csv.gz")
    elif case == "subfolder of another name":
        _table(folder / "mine" / "synthetic.csv.gz")
    elif case == "damaged recording.json only":
        (folder / "recording.json").write_text("{not json")
    return folder


CASES = [  # (folder, a recording?)
    ("kinds without recording.json", True),  # record --out said "not empty and not a recording"
    ("recording.json without kinds", True),
    ("kind folder of partial files only", False),  # a run still being written is no table
    ("kind folder of runs stopped early", True),  # session said "not a recording"
    ("plain folder of tables", False),
    ("subfolder of another name", False),  # datasets.load said "is a recording"
    ("damaged recording.json only", False),  # read_manifest reads it as none
]


@pytest.mark.parametrize("case,expected", CASES)
def test_every_reader_gives_one_answer(tmp_path, monkeypatch, case, expected):
    monkeypatch.chdir(tmp_path)
    folder = _build(tmp_path / "f", case)
    assert is_recording(folder) is expected
    # session
    if expected:
        assert session.Recorded(folder).folder == folder.resolve()
    else:
        with pytest.raises(UsageError, match="is not a recording"):
            session.Recorded(folder)
    # datasets.load of the folder itself: a recording is refused as one, and only a recording
    if expected:
        with pytest.raises(datasets.SchemaError, match="is a recording"):
            datasets.load(folder)
    elif case == "plain folder of tables":
        assert len(datasets.load(folder)) == 30
    else:
        with pytest.raises(datasets.SchemaError) as exc:
            datasets.load(folder)
        assert "is a recording" not in str(exc.value)
    # RECORDING:KIND reads the folder as a recording exactly when it is one
    with pytest.raises(UsageError) as exc:
        sources.resolve(f"{folder}:d2h")
    assert ("the recording" in str(exc.value)) is expected, str(exc.value)
    # record --out
    with pytest.raises(UsageError) as exc:
        cli_record._check_new_folder(folder, str(folder))
    said = str(exc.value)
    assert ("holds a recording" in said) is expected and ("not a recording" in said) is (not expected), said


def test_messages_name_what_the_folder_holds(tmp_path):
    stopped = _build(tmp_path / "stopped", "kind folder of runs stopped early")
    assert kinds_in(stopped) == ["sweep"] and session.Recorded(stopped).kinds() == []
    with pytest.raises(
        UsageError, match="every sweep run of the recording .* was stopped early: give one of its"
    ):
        sources.resolve(f"{stopped}:sweep")
    other = _build(tmp_path / "other", "subfolder of another name")
    with pytest.raises(datasets.SchemaError, match=r"give one of its folders, e\.g\. .*other/mine \(mine\)$"):
        datasets.load(other)
    bare = _build(tmp_path / "bare", "kinds without recording.json")
    with pytest.raises(
        UsageError, match=r"holds a recording \(no recording.json to resume\): choose another --out"
    ):
        cli_record._check_new_folder(bare, str(bare))
    damaged = _build(tmp_path / "damaged", "damaged recording.json only")
    with pytest.raises(
        UsageError, match="it has a recording.json that cannot be read and no <kind>/<run> tables"
    ):
        session.Recorded(damaged)
    # a recording with a stray table at its top is still read as a recording, not as that table
    _table(bare / "stray.csv.gz")
    with pytest.raises(
        datasets.SchemaError, match=r"is a recording: give one of its kinds, e\.g\. .*bare/sweep"
    ):
        datasets.load(bare)


def test_kind_folders(tmp_path):
    rec = _build(tmp_path / "rec", "recording.json without kinds")
    assert is_kind_folder(rec / "batch") and is_kind_folder(rec / "sweep")  # even before it exists
    assert not is_kind_folder(rec / "mine") and not is_kind_folder(rec)
    plain = _build(tmp_path / "plain", "plain folder of tables")
    assert not is_kind_folder(plain / "sweep")
    assert is_kind_folder(datasets.DATA_DIR / "h200" / "sweep")
    assert (
        json.loads((datasets.DATA_DIR / "h200" / "recording.json").read_text())["gpu_name"] == "NVIDIA H200"
    )


@pytest.mark.parametrize("source", ["h200::", "h200:"])
def test_a_recording_with_an_empty_kind_names_its_kinds(tmp_path, capsys, source):
    """'h200::' said "give h200: for every  run, or h200::RUN": an empty kind slot."""
    line = refused_in_one_line(
        ["explain", source], [f"{source!r} names no kind", "h200:KIND", "sweep, "], capsys, tmp_path
    )
    assert "h200::RUN" not in line and "every  run" not in line
