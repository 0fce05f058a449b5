"""Text that looks like a formula is written to a workbook as text (issue #35).

Before: ``explain --out x.xlsx``, ``measure --out x.xlsx`` and the report workbook wrote a
cell starting with ``=`` as a live formula (23 formula cells, one in the README sheet), so a
table from someone else could run a formula in the reader's spreadsheet, and the kit read
its own file back wrong. Now every such cell (``= + - @``, tab, CR: OWASP's list) is a
string with Excel's quote prefix, and reads back as the same text. Tables are SYNTHETIC.
"""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

openpyxl = pytest.importorskip("openpyxl")

from h2dlab.cli import main as cli  # noqa: E402
from h2dlab.escape import FORMULA_STARTS  # noqa: E402
from h2dlab.recording import datasets  # noqa: E402
from h2dlab.recording.tableio import safe_excel  # noqa: E402

HOSTILE = [
    '=HYPERLINK("http://example.invalid","x")',
    "+1+1",
    "-2+3",
    "@SUM(1,1)",
    "\t=1",
    "=1+1",
]  # a CR reads back as LF (XML)


def _formula_cells(path):
    wb = openpyxl.load_workbook(path)
    return [
        (ws.title, c.coordinate, c.value)
        for ws in wb
        for row in ws.iter_rows()
        for c in row
        if c.data_type == "f"
    ]


def _table(n=len(HOSTILE)):
    """The first ``n`` rows of a bundled table, the first rows' error text HOSTILE."""
    df = datasets.load("h200_forum").head(n).copy()
    df["error"] = HOSTILE + [""] * (n - len(HOSTILE))
    return df


def test_a_measurement_table_keeps_formula_text_as_text(tmp_path):
    p = datasets.save(_table(), tmp_path / "t.xlsx")
    assert _formula_cells(p) == []
    wb = openpyxl.load_workbook(p)
    col = [c.value for c in wb.active[1]].index("error") + 1
    cells = [wb.active.cell(row=i + 2, column=col) for i in range(len(HOSTILE))]
    assert [c.value for c in cells] == HOSTILE and all(c.quotePrefix for c in cells)
    back = datasets.read(p)
    assert list(back["error"]) == HOSTILE  # the kit reads its own file back


def test_explain_out_xlsx_writes_no_formula(tmp_path, capsys):
    src = datasets.save(_table(60), tmp_path / "src.csv")
    out = tmp_path / "x.xlsx"
    assert cli.main(["explain", str(src), "--out", str(out)]) == 0
    capsys.readouterr()
    assert _formula_cells(out) == []
    back = pd.read_excel(out, engine="openpyxl", dtype=str)
    assert set(HOSTILE) <= set(back["error"].dropna())


def test_the_report_workbook_writes_no_formula(tmp_path, monkeypatch):
    from h2dlab.show import workbook

    real = workbook.sheets

    def planted(data):
        tables, env, commands = real(data)
        return tables, env, {**commands, "planted": '=HYPERLINK("http://example.invalid","x")'}

    monkeypatch.setattr(workbook, "sheets", planted)
    p = workbook.write(tmp_path / "w.xlsx")
    assert _formula_cells(p) == []
    readme = pd.read_excel(p, sheet_name="README", engine="openpyxl", dtype=str)
    assert '=HYPERLINK("http://example.invalid","x")' in set(readme.iloc[:, 1].dropna())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=12).map(
    lambda s: "=" + s), min_size=1, max_size=4))  # fmt: skip
def test_any_text_round_trips_and_none_is_a_formula(tmp_path_factory, values):
    p = tmp_path_factory.mktemp("x") / "t.xlsx"
    safe_excel(pd.DataFrame({"text": values, "n": range(len(values))}), p)
    assert _formula_cells(p) == []
    back = pd.read_excel(p, engine="openpyxl", dtype={"text": str})
    assert list(back["text"]) == values and all(v.startswith(FORMULA_STARTS) for v in values)
