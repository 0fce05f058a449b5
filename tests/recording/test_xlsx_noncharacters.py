"""An .xlsx the kit writes can be read back when a cell holds U+FFFE or U+FFFF
(hostile pass 4, issue 35).

``escape.sheet_frame`` rewrites the C0 control characters an .xlsx cannot hold, but XML
1.0 also forbids the noncharacters U+FFFE and U+FFFF (and lone surrogates, which UTF-8
cannot encode). An ``error`` text holding U+FFFF in a CSV table made ``h2dlab explain
t.csv --out x.xlsx`` exit 0 with a workbook that neither openpyxl nor the kit can open
(``ParseError: not well-formed``). A lone surrogate, from a JSON file's ``"\\ud800"``,
stopped the write with a UnicodeEncodeError traceback: pandas' text columns cannot hold it
either, so the kit's JSON readers write it as ``\\ud800`` text (``escape.json_text``).
Synthetic tables.
"""

import json

import openpyxl
import pandas as pd

from h2dlab.recording.tableio import read_env, safe_excel


def test_a_workbook_with_noncharacters_in_a_text_cell_reads_back(tmp_path):
    path = tmp_path / "x.xlsx"
    safe_excel(pd.DataFrame({"error": ["A\uffffB", "ok\ufffe"], "size_bytes": [1, 2]}), path)
    wb = openpyxl.load_workbook(path)  # ParseError today
    values = [c.value for c in wb.active["A"]][1:]
    assert len(values) == 2 and all(isinstance(v, str) and v.startswith(("A", "ok")) for v in values)


def test_a_lone_surrogate_from_an_env_json_is_written_readably(tmp_path):
    # JSON may say "\\ud800": it decodes to a lone surrogate, which no sheet (nor pandas' text
    # column) can hold; read_env writes it as the text \\ud800, as the terminal shows it
    table = tmp_path / "t.csv"
    table.write_text("x\n1\n")
    (tmp_path / "t.csv.env.json").write_text(
        json.dumps({"gpu_name": "GPU\ud800x", "tags": {"\udfff": ["\ud800"]}})
    )
    env = read_env(table)
    assert env == {"gpu_name": "GPU\\ud800x", "tags": {"\\udfff": ["\\ud800"]}}
    path = tmp_path / "s.xlsx"
    safe_excel(pd.DataFrame({"gpu_name": [env["gpu_name"]]}), path)  # UnicodeEncodeError in pandas before
    assert openpyxl.load_workbook(path).active["A2"].value == "GPU\\ud800x"


def test_a_lone_surrogate_in_a_text_cell_is_written_readably(tmp_path):
    path = tmp_path / "s.xlsx"
    safe_excel(pd.DataFrame({"gpu_name": pd.Series(["GPU\ud800x"], dtype=object)}), path)
    assert openpyxl.load_workbook(path).active["A2"].value == "GPU\\ud800x"
