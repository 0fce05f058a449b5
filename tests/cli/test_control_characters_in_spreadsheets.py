"""Text with a control character in a table's free-text column (``error``), written to an
.xlsx by ``explain --out`` (hostile pass 3 of issue #35). An .xlsx cannot hold most C0
control characters (openpyxl refuses them); the kit writes them another way or says so in
one line, never a traceback (which also put the raw character on the terminal). The table
is the bundled forum_a100 dataset's first rows with one error text edited (SYNTHETIC)."""

import openpyxl
import pytest

from h2dlab.cli import main as cli
from h2dlab.recording import datasets


@pytest.mark.parametrize("char", ["\x07", "\x00", "\x1b"])
def test_explain_out_xlsx_with_a_control_character_in_an_error_text(tmp_path, capsys, char):
    table = datasets.load("forum_a100").head(30).copy()
    table.loc[3, "error"] = f"copy failed: {char}bell"
    datasets.save(table, tmp_path / "t.csv")
    out = tmp_path / "a.xlsx"
    code = cli.main(["explain", str(tmp_path / "t.csv"), "--out", str(out)])
    err = capsys.readouterr().err
    assert char not in err and "Traceback" not in err
    assert code == 0
    ws = openpyxl.load_workbook(out).worksheets[0]
    column = [c.value for c in ws[1]].index("error") + 1
    assert "bell" in str(ws.cell(5, column).value)
