"""``--resume`` of a finished table leaves it as it is (issue 35, data loss).

Before, ``measure --resume`` on a whole table read it and wrote it again: the columns and
sheets a user had added were gone, with exit 0; and the refusal of a second run into the
same ``--out`` suggested ``--resume`` for it. Now the resume says in one line that the
table is finished and exits 0 without touching it; the library raises ``AlreadyDone``.
Tables here are measured on the CPU (synthetic for the purpose: host copies only).
"""

import signal

import pandas as pd
import pytest

from h2dlab.cli import main as cli
from h2dlab.errors import AlreadyDone, UsageError
from h2dlab.measure.harness import sweep
from h2dlab.measure.recorder import StopFlag, partial_path
from h2dlab.measure.spec import SweepSpec

ARGS = ["measure", "--device", "cpu", "--strategies", "pageable", "--sizes", "1KiB,4KiB"]
ARGS += ["--reps", "2", "--warmup", "0", "--no-progress"]


def _measured(tmp_path, name, capsys):
    out = tmp_path / name
    assert cli.main([*ARGS, "--out", str(out)]) == 0
    capsys.readouterr()
    return out


def _untouched(path):
    st = path.stat()
    return path.read_bytes(), st.st_mtime_ns, st.st_ino


def test_resume_of_a_finished_csv_keeps_the_users_added_column(tmp_path, capsys):
    out = _measured(tmp_path, "r.csv", capsys)
    df = pd.read_csv(out)
    df["my_note"] = "kept"  # what a user adds in a spreadsheet program
    df.to_csv(out, index=False)
    before = _untouched(out), _untouched(out.with_name("r.csv.env.json"))
    rc = cli.main([*ARGS, "--out", str(out), "--resume"])
    _, err = capsys.readouterr()
    assert rc == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "finished (4 of 4 planned rows)" in lines[0] and "left as it is" in lines[0]
    assert "error" not in lines[0]
    assert (_untouched(out), _untouched(out.with_name("r.csv.env.json"))) == before
    assert pd.read_csv(out)["my_note"].eq("kept").all()
    assert not partial_path(out).exists()


def test_resume_of_a_finished_xlsx_keeps_the_users_added_sheet(tmp_path, capsys):
    out = _measured(tmp_path, "r.xlsx", capsys)
    with pd.ExcelWriter(out, engine="openpyxl", mode="a") as xw:
        pd.DataFrame({"what": ["my own sheet"]}).to_excel(xw, sheet_name="mine", index=False)
    before = _untouched(out)
    assert cli.main([*ARGS, "--out", str(out), "--resume"]) == 0
    assert "nothing to resume" in capsys.readouterr().err
    assert _untouched(out) == before
    assert pd.ExcelFile(out, engine="openpyxl").sheet_names == ["Sheet1", "mine"]


def test_a_resume_with_another_spec_is_still_refused_before_anything(tmp_path, capsys):
    out = _measured(tmp_path, "r.csv", capsys)
    before = _untouched(out)
    args = [a if a != "2" else "3" for a in ARGS]  # --reps 3
    assert cli.main([*args, "--out", str(out), "--resume"]) == 2
    assert "cannot resume" in capsys.readouterr().err
    assert _untouched(out) == before


def test_the_library_says_already_done_and_writes_nothing(tmp_path):
    spec = SweepSpec(("pageable",), (1024, 4096), device="cpu", reps=2, warmup=0, seed=0)
    out = tmp_path / "r.csv"
    sweep(spec, out=out, progress=False)
    before = _untouched(out)
    with pytest.raises(AlreadyDone, match="is finished") as info:
        sweep(spec, out=out, resume=True, progress=False)
    assert isinstance(info.value, UsageError)  # callers that catch UsageError keep working
    assert _untouched(out) == before and not partial_path(out).exists()


def test_the_refusal_of_a_finished_out_does_not_suggest_resume(tmp_path, capsys):
    out = _measured(tmp_path, "r.csv", capsys)
    assert cli.main([*ARGS, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "exists" in err and "--force" in err and "--resume" not in err


def test_a_stopped_table_is_still_offered_and_continued_by_resume(tmp_path, capsys):
    spec = SweepSpec(("pageable",), (1024, 4096), device="cpu", reps=2, warmup=0, seed=0)
    out = tmp_path / "r.csv"
    stop, cells = StopFlag(), []

    def before(flag):
        cells.append(1)
        if len(cells) > 1:
            flag.request(signal.SIGTERM)

    first = sweep(spec, out=out, progress=False, stop=stop, before_cell=before)
    assert len(first) == 2 and first.attrs["stopped"]
    assert cli.main([*ARGS, "--out", str(out)]) == 2
    assert "continue its run with --resume" in capsys.readouterr().err
    assert cli.main([*ARGS, "--out", str(out), "--resume"]) == 0
    assert "wrote" in capsys.readouterr().err
    assert len(pd.read_csv(out)) == 4


def _stopped(tmp_path, name):
    """A run of ``ARGS`` stopped after its first cell (2 of 4 rows), written to ``name``."""
    spec = SweepSpec(("pageable",), (1024, 4096), device="cpu", reps=2, warmup=0, seed=0)
    out, cells = tmp_path / name, []

    def before(flag):
        cells.append(1)
        if len(cells) > 1:
            flag.request(signal.SIGTERM)

    assert len(sweep(spec, out=out, progress=False, stop=StopFlag(), before_cell=before)) == 2
    return out


def test_resume_of_a_stopped_csv_with_a_users_column_is_refused_and_keeps_it(tmp_path, capsys):
    out = _stopped(tmp_path, "r.csv")
    df = pd.read_csv(out)
    df["my_note"] = "kept"
    df.to_csv(out, index=False)
    before = _untouched(out), _untouched(out.with_name("r.csv.env.json"))
    rc = cli.main([*ARGS, "--out", str(out), "--resume"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1
    assert "cannot resume" in lines[0] and "'my_note'" in lines[0] and "new --out" in lines[0]
    assert (_untouched(out), _untouched(out.with_name("r.csv.env.json"))) == before
    assert not partial_path(out).exists()


def test_resume_of_a_stopped_xlsx_with_a_users_sheet_is_refused_and_keeps_it(tmp_path, capsys):
    out = _stopped(tmp_path, "r.xlsx")
    with pd.ExcelWriter(out, engine="openpyxl", mode="a") as xw:
        pd.DataFrame({"what": ["my own sheet"]}).to_excel(xw, sheet_name="mine", index=False)
    before = _untouched(out)
    assert cli.main([*ARGS, "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "sheet 'mine'" in err and "did not write" in err
    assert _untouched(out) == before
    assert pd.ExcelFile(out, engine="openpyxl").sheet_names == ["Sheet1", "mine"]


def test_the_library_refuses_a_stopped_xlsx_with_a_users_column(tmp_path):
    out = _stopped(tmp_path, "r.xlsx")
    df = pd.read_excel(out, engine="openpyxl")
    df["mine"] = 1.5
    df.to_excel(out, index=False, engine="openpyxl")
    spec = SweepSpec(("pageable",), (1024, 4096), device="cpu", reps=2, warmup=0, seed=0)
    with pytest.raises(UsageError, match="column 'mine'"):
        sweep(spec, out=out, resume=True, progress=False)
    assert list(pd.read_excel(out, engine="openpyxl")["mine"]) == [1.5, 1.5]
