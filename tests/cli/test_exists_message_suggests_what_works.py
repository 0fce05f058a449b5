"""The "exists" refusal suggests only what will work (issue 35).

A second ``measure`` into the ``--out`` of a stopped table is refused with a line that
says what to do. It suggested ``--resume`` even where that resume is refused: a table that
holds a user's column or sheet (``recorder.refuse_foreign``: the resume would write it
again without them). Now the line leaves ``--resume`` out there and says why. CPU tables,
stopped after their first cell (``test_resume_finished._stopped``).
"""

import pandas as pd

from h2dlab.cli import main as cli
from tests.measure.test_resume_finished import ARGS, _stopped


def _refusal(out, capsys):
    assert cli.main([*ARGS, "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    return lines[0]


def test_a_stopped_csv_with_a_users_column_is_not_offered_a_resume(tmp_path, capsys):
    out = _stopped(tmp_path, "r.csv")
    df = pd.read_csv(out)
    df["my_note"] = "kept"
    df.to_csv(out, index=False)
    line = _refusal(out, capsys)
    assert line == (
        f"h2dlab: error: {out} exists: write elsewhere or replace it with --force (a resume is refused: "
        "it holds column 'my_note' that h2dlab did not write)"
    )
    # and what it says is so: the resume is refused
    assert cli.main([*ARGS, "--out", str(out), "--resume"]) == 2
    assert "cannot resume" in capsys.readouterr().err


def test_a_stopped_xlsx_with_a_users_sheet_is_not_offered_a_resume(tmp_path, capsys):
    out = _stopped(tmp_path, "r.xlsx")
    with pd.ExcelWriter(out, engine="openpyxl", mode="a") as xw:
        pd.DataFrame({"what": ["my own sheet"]}).to_excel(xw, sheet_name="mine", index=False)
    line = _refusal(out, capsys)
    assert "--resume" not in line
    assert line.endswith("(a resume is refused: it holds sheet 'mine' that h2dlab did not write)")


def test_a_stopped_table_of_its_own_is_still_offered_a_resume_that_works(tmp_path, capsys):
    out = _stopped(tmp_path, "r.csv")
    line = _refusal(out, capsys)
    assert line == (
        f"h2dlab: error: {out} exists: write elsewhere, continue its run with --resume, or replace it with --force"
    )
    assert cli.main([*ARGS, "--out", str(out), "--resume"]) == 0


def test_an_unreadable_table_is_not_offered_a_resume(tmp_path, capsys):
    out = tmp_path / "r.csv"
    out.write_text("not,a,table\n1,2,3\n")
    line = _refusal(out, capsys)
    assert line == f"h2dlab: error: {out} exists: write elsewhere or replace it with --force"
    assert cli.main([*ARGS, "--out", str(out), "--resume"]) == 2  # indeed


def test_a_stopped_table_damaged_since_is_not_offered_a_resume(tmp_path, capsys):
    out = _stopped(tmp_path, "r.csv")
    out.write_text("not,a,table\n1,2,3\n")  # its env.json still says stopped: 2 of 4 rows
    line = _refusal(out, capsys)
    assert line == (
        f"h2dlab: error: {out} exists: write elsewhere or replace it with --force "
        "(it cannot be read as a run to continue)"
    )
    assert cli.main([*ARGS, "--out", str(out), "--resume"]) == 2  # indeed
