"""Reports from a recording folder: the workbook reads the recording it is given;
``report --data`` checks the folder before any notebook runs."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from h2dlab.cli import main as cli
from h2dlab.recording import datasets, session
from h2dlab.recording.folder import write_manifest
from h2dlab.recording.plan import experiments
from h2dlab.show import report


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
    folder = _folder(tmp_path)
    path = report.workbook(tmp_path / "t.xlsx", folder)
    sheets = pd.read_excel(path, sheet_name=None)
    assert set(sheets) == {
        "README",
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
    # One advice engine (issue 29): the workbook's advice is the notebooks' and the README's table.
    from h2dlab.findings import advice

    for sheet, size in (("advice_1GiB", 2**30), ("advice_64MiB", 2**26)):
        want = advice.of_recording(session.Recorded(folder), size)
        got = sheets[sheet]
        assert list(got["way"]) == list(want["way"])
        np.testing.assert_allclose(got["per_copy_ms"], want["per_copy_ms"], rtol=1e-12)
        assert list(got["verdict"]) == list(want["verdict"])


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
    if (datasets.DATA_DIR / "h200" / kind).is_dir():  # the recording data/h200 (h2dlab record)
        return datasets.DATA_DIR / "h200" / kind
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


def _plan_shaped(tmp_path, quick):
    """SYNTHETIC: the bundled H200 runs cut to the rows ``record`` (``--quick`` or full) makes
    (its sizes and repetitions), to check that every notebook renders from a recording of
    that shape. The numbers are the bundled ones, subset; nothing is made up."""
    from h2dlab.recording.plan import FORUM_PAIR, QUICK_CAP_BYTES, experiments
    from h2dlab.units import forum_nbytes

    bundled = session.recording("h200", environ={})
    folder = tmp_path / ("quick-shaped" if quick else "full-shaped")
    parser = cli.build_parser()
    for e in experiments(quick=quick, gpus=1):
        if not bundled.has(e.kind, e.run):  # a kind the bundled recording lacks: the notebooks say so
            continue
        src_dir = session_dir(e.kind)
        src = next(
            p for p in src_dir.iterdir() if p.name.startswith(f"{e.run}.csv") and not p.name.endswith(".json")
        )
        (folder / e.kind).mkdir(parents=True, exist_ok=True)
        dest = folder / e.kind / f"{e.run}.csv.gz"
        if e.kind == "overlap":
            tl = pd.read_csv(src)
            tl[tl.rep < 3].to_csv(dest, index=False)
            shutil.copy(
                datasets.env_path(src)
                if datasets.env_path(src).exists()
                else src.with_name("overlap.env.json"),
                dest.with_name("overlap.csv.gz.env.json"),
            )
            continue
        df = bundled.table(e.kind, e.run)
        a = parser.parse_args([*e.argv(quick), "--out", "x.csv"])
        if (e.kind == "forum" and not quick) or e.kind in ("bidir", "batch", "workload"):
            keep = df.size_bytes > 0  # whole runs (duplex, batch and workload have their own specs)
        elif e.kind == "forum":
            keep = (df.size_bytes <= QUICK_CAP_BYTES) | df.size_bytes.isin(
                [forum_nbytes(s) for s in FORUM_PAIR]
            )
        else:
            sizes = set(cli.spec_from_args(a).sizes)
            large = a.reps if a.reps_large is None else a.reps_large
            reps = df.size_bytes.where(df.size_bytes >= 2**30, 0).map({0: a.reps}).fillna(large)
            keep = df.size_bytes.isin(sizes) & (
                (df.warmup & (df.rep < a.warmup)) | (~df.warmup & (df.rep < reps))
            )
        env = dict(bundled.env(e.kind, e.run))
        env.update(planned_rows=int(keep.sum()), measured_rows=int(keep.sum()))
        datasets.save(df[keep].reset_index(drop=True), dest, env=env)
    write_manifest(
        folder,
        {"hostname": "synthetic", "gpu_name": "NVIDIA H200", "created": "2032-01-01", "status": "complete"},
    )
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("quick", [True, False])
def test_every_notebook_renders_from_a_plan_shaped_recording(tmp_path, quick):
    folder = _plan_shaped(tmp_path, quick)
    rec = session.recording(str(folder), environ={})
    assert len(rec.runs("forum")) == len([e for e in experiments(quick=quick, gpus=1) if e.kind == "forum"])
    assert not rec.has("concurrent")
    assert rec.table("allocator", "pin-warm").size_bytes.max() <= (136 if quick else 400) * 2**20
    out = tmp_path / "r"
    assert report.build(outdir=out, mode="replay", data=folder) == 0
    for name in report.REPORTED:
        assert "2032-01-01" in (out / f"{name}.html").read_text()


def test_an_inherited_data_variable_is_checked_before_any_notebook(tmp_path, capsys, monkeypatch):
    """H2DLAB_DATA naming no recording: the notebooks ran (and wrote their pages) and only
    the workbook, at the end, refused it."""
    monkeypatch.setenv("H2DLAB_DATA", str(tmp_path / "none"))
    monkeypatch.delenv("H2DLAB_MODE", raising=False)
    assert cli.main(["report", "--outdir", str(tmp_path / "r"), "--only", "05-explore"]) == 2
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [  # names the variable (helper attack5): the user did not type it
        f"h2dlab: error: H2DLAB_DATA={tmp_path / 'none'}: no recording '{tmp_path / 'none'}': give 'h200' "
        "(the bundled data) or the folder that `h2dlab record` wrote"
    ]
    assert "executing" not in out and not (tmp_path / "r").exists()
