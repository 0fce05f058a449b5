"""Reports from a recording folder: the workbook reads the recording it is given;
``report --data`` checks the folder before any notebook runs."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from h2dlab import cli, datasets, report, session
from h2dlab.record_plan import write_manifest


def _folder(tmp_path):
    """A synthetic recording folder made of two bundled H200 runs."""
    folder = tmp_path / "rec"
    for kind, src in (("sweep", "h200_sweep/pow2"), ("allocator", "h200_allocator/pin-warm")):
        (folder / kind).mkdir(parents=True)
        run = src.split("/")[1]
        for suffix in (".csv.gz", ".env.json"):
            shutil.copy(datasets.DATA_DIR / f"{src}{suffix}", folder / kind / f"{run}{suffix}")
    write_manifest(folder, {"hostname": "box", "gpu_name": "NVIDIA Synthetic", "status": "complete"})
    return folder


def test_workbook_reads_the_recording_it_is_given(tmp_path):
    path = report.workbook(tmp_path / "t.xlsx", _folder(tmp_path))
    sheets = pd.read_excel(path, sheet_name=None)
    assert set(sheets) == {
        "fit_recording_sweep",
        "medians_recording_sweep",
        "advice_1GiB",
        "advice_64MiB",
        "flagged_forum_a100",
        "flagged_recording_allocator",
    }  # no forum sheet: the recording has no forum runs
    flagged = sheets["flagged_recording_allocator"]
    assert set(flagged["strategy"]) <= {"pin_then_copy"} and len(flagged) > 0
    medians = sheets["medians_recording_sweep"]
    assert medians["size_bytes"].max() == 4 * 2**30  # pow2 alone: 1 KiB .. 4 GiB


def test_report_data_must_be_a_recording(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    rc = cli.main(
        ["report", "--mode", "replay", "--data", str(tmp_path / "empty"), "--outdir", str(tmp_path / "r")]
    )
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a recording" in err[0]
    assert not (tmp_path / "r").exists()  # refused before anything ran


def _whole_folder(tmp_path):
    """Every bundled H200 run but the concurrent one, laid out as a recording folder."""
    rec = session.recording("h200", environ={})
    folder = tmp_path / "box-rec"
    for kind in rec.kinds():
        if kind == "concurrent":
            continue
        (folder / kind).mkdir(parents=True)
        for run in rec.runs(kind):
            src = session_dir(kind) / f"{run}.csv.gz"
            shutil.copy(src, folder / kind / src.name)
            shutil.copy(
                datasets.env_path(src)
                if datasets.env_path(src).exists()
                else src.with_name(f"{run}.env.json"),
                folder / kind / f"{run}.csv.gz.env.json",
            )
    write_manifest(
        folder,
        {
            "hostname": "box",
            "gpu_name": "NVIDIA H200",
            "created": "2031-05-06T07:08:09",
            "status": "complete",
        },
    )
    return folder


def session_dir(kind):
    return datasets.DATA_DIR / ("h200x2_concurrent" if kind == "concurrent" else f"h200_{kind}")


@pytest.mark.slow
def test_report_renders_from_a_recording_folder(tmp_path):
    folder = _whole_folder(tmp_path)
    out = tmp_path / "r"
    rc = report.build(outdir=out, mode="replay", notebooks=["02-fastest-way"], data=folder)
    assert rc == 0
    html = (out / "02-fastest-way.html").read_text()
    assert str(folder) in html and "2031-05-06" in html  # the banner names the recording shown
    assert "fit_recording_sweep" in pd.read_excel(out / "h2dlab-tables.xlsx", sheet_name=None)
