"""One writer for the derived tables people open in a spreadsheet (``explain --out``'s
annotated table, a survey's fleet table): ``tableio.save_for_spreadsheet`` quotes text a
spreadsheet would run as a formula, in every format that has no cell types, while the kit's
own ``save`` keeps every text as it is, so a measurement table reads back exactly.
Tables are SYNTHETIC."""

import gzip
import json

import pandas as pd
import pytest

from h2dlab.recording import datasets, tableio

HOSTILE = ["=1+2", "+SUM(A1)", "-2+3", "@x", "\tx", '=HYPERLINK("http://example.invalid","x")']


def _derived() -> pd.DataFrame:
    return pd.DataFrame({"host": [*HOSTILE, "node-7"], "rank": range(len(HOSTILE) + 1), "=cell": 1.5})


@pytest.mark.parametrize("name", ["t.csv", "t.csv.gz"])
def test_a_csv_quotes_formula_text_and_writes_env_beside_it(tmp_path, name):
    df = _derived()
    path = tableio.save_for_spreadsheet(df, tmp_path / name, {"gpu_name": "synthetic"})
    back = pd.read_csv(path, keep_default_na=False)
    assert list(back["host"]) == ["'" + t for t in HOSTILE] + ["node-7"]
    assert list(back.columns) == ["host", "rank", "'=cell"] and list(back["rank"]) == list(range(7))
    assert list(df["host"]) == [*HOSTILE, "node-7"]  # the caller's table is left alone
    assert json.loads(tableio.env_path(path).read_text()) == {"gpu_name": "synthetic"}
    raw = gzip.open(path, "rt").read() if name.endswith(".gz") else path.read_text()
    assert "\n=1+2" not in raw and "\n'=1+2" in raw


def test_without_env_no_env_file_is_written(tmp_path):
    path = tableio.save_for_spreadsheet(_derived(), tmp_path / "t.csv")
    assert path.exists() and not tableio.env_path(path).exists()


def test_an_xlsx_keeps_the_text_and_holds_no_formula(tmp_path):
    openpyxl = pytest.importorskip("openpyxl")
    path = tableio.save_for_spreadsheet(_derived(), tmp_path / "t.xlsx")
    ws = openpyxl.load_workbook(path).active
    cells = [ws.cell(row=i + 2, column=1) for i in range(len(HOSTILE))]
    assert [c.value for c in cells] == HOSTILE and all(c.quotePrefix and c.data_type == "s" for c in cells)


def test_a_parquet_keeps_the_text_as_it_is(tmp_path):
    pytest.importorskip("pyarrow")
    path = tableio.save_for_spreadsheet(_derived(), tmp_path / "t.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(path), _derived())


def test_the_kits_own_save_does_not_quote_so_its_table_reads_back_exactly(tmp_path):
    df = datasets.load("h200_forum").head(len(HOSTILE)).copy()
    df["error"] = HOSTILE
    back = datasets.read(datasets.save(df, tmp_path / "t.csv"))
    assert list(back["error"]) == HOSTILE
