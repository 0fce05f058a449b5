"""The workbook as it opens in a spreadsheet (openpyxl): a README sheet first, then per
sheet a bold frozen header with an auto-filter, widths, number formats by unit, run
names instead of ids and readable sizes beside bytes; values equal to the package's."""

import openpyxl
import pytest

from h2dlab.explain import model
from h2dlab.recording import datasets, session
from h2dlab.show import report
from h2dlab.units import fmt_bytes


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    path = report.workbook(tmp_path_factory.mktemp("wb") / "t.xlsx")
    return openpyxl.load_workbook(path)


def _header(ws):
    return [c.value for c in ws[1]]


def test_readme_first_says_sheets_units_machine_and_commands(book):
    assert book.sheetnames[0] == "README"
    rows = {r[0]: r[1] for r in book["README"].iter_rows(min_row=2, values_only=True) if r[0]}
    assert "NVIDIA H200" in rows["machine"] and "GB/s = 1e9 bytes per second" in rows["units"]
    assert (
        rows["command sweep/pow2-interleaved"].startswith("h2dlab measure")
        and "sweep/pow2-interleaved.csv.gz"
        in rows["command sweep/pow2-interleaved"]  # the exact command of the bundled run
    )
    for name in book.sheetnames[1:]:
        assert rows.get(name), f"README says nothing about {name}"


def test_every_sheet_is_headed_frozen_filtered_and_sized(book):
    for ws in book.worksheets:
        assert all(c.font.bold for c in ws[1] if c.value is not None), ws.title
        assert ws.freeze_panes == "A2" and ws.auto_filter.ref == ws.dimensions, ws.title
        widths = [ws.column_dimensions[c.column_letter].width for c in ws[1]]
        assert all(w and w >= len(str(c.value)) for w, c in zip(widths, ws[1], strict=True)), ws.title


def test_number_formats_run_names_and_sizes(book):
    ids = set(datasets.load("h200_sweep")["run_id"]) | set(datasets.load("h200_allocator")["run_id"])
    for ws in book.worksheets[1:]:
        head = _header(ws)
        assert "run_id" not in head and "gbps" not in head, ws.title
        values = {v for row in ws.iter_rows(min_row=2, values_only=True) for v in row}
        assert not (values & ids), ws.title  # names, not hex ids
        for j, col in enumerate(head, 1):
            fmt = ws.cell(row=2, column=j).number_format if ws.max_row > 1 else None
            if str(col).endswith("_ms"):
                assert fmt == "0.000", (ws.title, col)
            if str(col).startswith("GB/s"):
                assert fmt == "0.0", (ws.title, col)
        if "size_bytes" in head:
            k = head.index("size_bytes")
            assert head[k - 1] == "size"
            for row in ws.iter_rows(min_row=2, max_row=min(20, ws.max_row), values_only=True):
                assert row[k - 1] == fmt_bytes(row[k])


def test_fit_sheet_values_are_the_models(book):
    ws = book["fit_h200_sweep"]
    head = _header(ws)
    rows = [dict(zip(head, r, strict=True)) for r in ws.iter_rows(min_row=2, values_only=True)]
    sweep = session.recording("h200").table("sweep")  # what the workbook reads: the bundled recording
    fit = model.fit(sweep, n_boot=0)
    names = sweep.attrs["run_names"]
    want = {(names[r.run_id], r.strategy): r.gbps for r in fit.itertuples()}
    got = {(r["run"], r["strategy"]): r["GB/s"] for r in rows}
    assert got.keys() == want.keys()
    assert all(got[k] == pytest.approx(want[k], rel=1e-9) for k in want)
