"""A measurement never joins a bundled dataset or a recording's kind unasked, and a stray
file in a kind folder does not break it (issue 35, data loss).

Before, ``measure --out data/h200_sweep/x.csv`` wrote one more run into the bundled
dataset (exit 0), and ``report --outdir <recording>/<kind>`` left its workbook there, an
.xlsx every reader of that kind then failed on. Now both are refused in one line; the
recorder's own experiments still write their kind folders; and a file of a table's
suffix whose header names no ``run_id`` or ``strategy`` (a workbook) is not a run.
Tables here are measured on the CPU; the recording copied is data/h200's.
"""

import json
import shutil
import warnings

import pandas as pd
import pytest

from h2dlab.cli import main as cli
from h2dlab.recording import datasets, session
from h2dlab.recording.folder import RECORDING_OUT_VAR, is_recording, kinds_in, run_tables
from tests.conftest import refused_in_one_line

MEASURE = ["measure", "--device", "cpu", "--strategies", "pageable", "--sizes", "1KiB", "--reps", "2"]
MEASURE += ["--warmup", "0", "--no-progress"]


@pytest.fixture
def rec(tmp_path, monkeypatch):
    """A copy of data/h200's recording.json and its sweep kind."""
    folder = tmp_path / "rec"
    folder.mkdir()
    shutil.copy(datasets.DATA_DIR / "h200" / "recording.json", folder)
    shutil.copytree(datasets.DATA_DIR / "h200" / "sweep", folder / "sweep")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(RECORDING_OUT_VAR, raising=False)
    return folder


@pytest.mark.parametrize("dataset", ["h200_sweep", "h200_allocator"])
def test_measure_into_a_bundled_datasets_folder_is_refused(dataset, capsys, monkeypatch):
    monkeypatch.delenv(RECORDING_OUT_VAR, raising=False)
    folder = datasets.DATA_DIR / dataset
    out = folder / "x.csv"
    refused_in_one_line(
        [*MEASURE, "--out", str(out)], ["inside", f"the dataset {dataset}", "one more"], capsys, folder
    )


def test_measure_into_a_recordings_kind_folder_is_refused(rec, capsys):
    for out in (rec / "sweep" / "x.csv.gz", rec / "sweep" / "deeper" / "x.csv"):
        out.parent.mkdir(exist_ok=True)
        refused_in_one_line(
            [*MEASURE, "--out", str(out)], ["the sweep folder of the recording", "one more sweep run"],
            capsys, out.parent,
        )  # fmt: skip
    # a new kind folder of the recording (not made yet by the recorder) is one too
    (rec / "batch").mkdir()
    refused_in_one_line(
        [*MEASURE, "--out", str(rec / "batch" / "y.csv")], ["batch folder"], capsys, rec / "batch"
    )


def test_the_recorders_own_experiment_still_writes_its_kind_folder(rec, capsys, monkeypatch):
    out = rec / "sweep" / "mine.csv.gz"
    monkeypatch.setenv(RECORDING_OUT_VAR, str(out))
    assert cli.main([*MEASURE, "--out", str(out)]) == 0
    assert out.exists()
    capsys.readouterr()
    other = rec / "sweep" / "other.csv.gz"  # the variable lets one path through, not the folder
    refused_in_one_line([*MEASURE, "--out", str(other)], ["sweep folder"], capsys, rec / "sweep")


def test_a_cpu_recording_writes_its_runs_into_its_kind_folders(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(RECORDING_OUT_VAR, raising=False)
    plan = tmp_path / "plan.json"
    tiny = ["measure", "--sizes", "1KiB", "--reps", "2", "--warmup", "0", "--strategies", "pageable"]
    plan.write_text(json.dumps([{"kind": "sweep", "run": "tiny", "args": tiny, "seconds": 2}]))
    folder = tmp_path / "rec"
    assert cli.main(["record", "--device", "cpu", "--plan", str(plan), "--out", str(folder)]) == 0
    assert [p.name for p in run_tables(folder / "sweep")] == ["tiny.csv.gz"]


def test_report_outdir_in_a_kind_or_dataset_folder_is_refused(rec, capsys):
    refused_in_one_line(
        ["report", "--outdir", str(rec / "sweep")], ["--outdir", "sweep folder"], capsys, rec / "sweep"
    )
    folder = datasets.DATA_DIR / "h200_sweep"
    refused_in_one_line(["report", "--outdir", str(folder)], ["the dataset h200_sweep"], capsys, folder)


def test_a_survey_into_a_kind_folder_is_refused(rec, capsys, monkeypatch):
    for v in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(v, raising=False)
    argv = ["survey", "--device", "cpu", "--out", str(rec / "sweep")]
    refused_in_one_line(argv, ["--out", "sweep folder", "survey's files"], capsys, rec / "sweep")


def _workbook(path):
    """An .xlsx shaped like the report's workbook: a README sheet first, then a table."""
    with pd.ExcelWriter(path, engine="openpyxl") as xw:
        pd.DataFrame({"sheet": ["fits"], "what it holds": ["synthetic"]}).to_excel(
            xw, sheet_name="README", index=False
        )
        pd.DataFrame({"run": ["x"], "GB/s": [1.0]}).to_excel(xw, sheet_name="fits", index=False)


def test_a_stray_workbook_in_a_kind_folder_is_not_read_as_a_run(rec):
    before = datasets.load(rec / "sweep")
    _workbook(rec / "sweep" / "h2dlab-tables.xlsx")
    (rec / "sweep" / "notes.csv").write_text("what,when\nsynthetic note,today\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        after = datasets.load(rec / "sweep")
        runs = session.Recorded(rec).runs("sweep")
    assert len(after) == len(before) and sorted(after.attrs["run_names"].values()) == sorted(runs)
    assert "h2dlab-tables" not in runs and "notes" not in runs
    assert kinds_in(rec) == ["sweep"] and is_recording(rec)


def test_a_damaged_table_in_a_kind_folder_still_says_so(rec):
    """Only a file that is plainly no table is passed over: one with a table's header and
    bad rows is still read, and refused with its reason."""
    (rec / "sweep" / "bad.csv").write_text("run_id,strategy\nsynthetic,pageable\n")
    with pytest.raises(datasets.SchemaError, match="bad.csv"):
        datasets.load(rec / "sweep")
