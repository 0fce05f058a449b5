"""A table that unpacks past a stated limit is refused in one line, before it fills memory
(issue #35). Before: a 2 MB ``.csv.gz`` drove ``explain`` to 10.6 GB, a 2 MB ``.xlsx`` to
2.2 GB. The limit is ``tableio.MAX_TABLE_BYTES`` (1 GiB), lowered here through
``H2DLAB_MAX_TABLE_BYTES`` so that the files stay small. Files are SYNTHETIC.
"""

from __future__ import annotations

import gzip
import re
import tracemalloc
import zipfile

import pytest

from h2dlab.cli import main as cli
from h2dlab.recording import datasets, tableio
from h2dlab.recording.schema import SchemaError

LIMIT = 1_000_000


@pytest.fixture
def low_limit(monkeypatch):
    monkeypatch.setenv("H2DLAB_MAX_TABLE_BYTES", str(LIMIT))


def _gz_bomb(path, unpacked=60_000_000):
    header = ",".join(tableio.COLUMNS) + "\n"
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(header.encode())
        block = b"0" * 1_000_000
        for _ in range(unpacked // len(block)):
            fh.write(block)
    return path


def _xlsx_bomb(path, unpacked=60_000_000):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("xl/worksheets/sheet1.xml", " " * unpacked)
    return path


def test_the_default_limit_is_stated():
    assert tableio.MAX_TABLE_BYTES == 2**30 and tableio.max_table_bytes() == 2**30


def test_a_csv_gz_bomb_is_refused_before_it_fills_memory(tmp_path, low_limit):
    p = _gz_bomb(tmp_path / "bomb.csv.gz")
    assert p.stat().st_size < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(SchemaError, match="a decompression bomb"):
            datasets.read(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * LIMIT  # it read about the limit, never the 60 MB


def test_a_csv_gz_bomb_is_refused_holding_a_chunk_not_the_limit(tmp_path, monkeypatch):
    """Second hostile pass: at the default 1 GiB limit a bomb was refused only after the
    limit's text was unpacked and held (2.2 GB resident). Now its size is counted chunk by
    chunk first: the memory used does not grow with the limit (here 50 MB, the bomb 60 MB)."""
    monkeypatch.setenv("H2DLAB_MAX_TABLE_BYTES", str(50_000_000))
    p = _gz_bomb(tmp_path / "bomb.csv.gz")
    tracemalloc.start()
    try:
        with pytest.raises(SchemaError, match="unpacks to more than that, over the 0.0466 GiB"):
            datasets.read(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4_000_000  # about one 256 KiB chunk, never the 50 MB the limit allows


def test_an_overlap_timeline_bomb_is_refused_before_it_is_read(tmp_path, low_limit):
    """``datasets.timeline`` read a .csv.gz whole with pandas, past any limit."""
    p = tmp_path / "overlap.csv.gz"
    with gzip.open(p, "wb", compresslevel=9) as fh:
        fh.write(b"run_id,scenario,rep,op,stream,start_ms,end_ms,host_return_ms\n")
        for _ in range(60):
            fh.write(b"0" * 1_000_000)
    tracemalloc.start()
    try:
        with pytest.raises(SchemaError, match="overlap.csv.gz: its text unpacks to more than that"):
            datasets.timeline(str(p))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4_000_000


def test_a_cut_csv_gz_is_still_one_line(tmp_path, capsys):
    df = datasets.load("h200_forum").head(200)
    p = datasets.save(df, tmp_path / "cut.csv.gz")
    p.write_bytes(p.read_bytes()[:-40])
    assert cli.main(["explain", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cut.csv.gz: not a readable .csv.gz table" in err[0]


def test_an_xlsx_bomb_is_refused_unopened(tmp_path, low_limit, capsys):
    p = _xlsx_bomb(tmp_path / "bomb.xlsx")
    assert cli.main(["explain", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "its parts unpack to 60,000,0" in err[0] and "decompression bomb" in err[0]


def test_a_plain_csv_over_the_limit_is_refused(tmp_path, low_limit):
    p = tmp_path / "big.csv"
    p.write_text(",".join(tableio.COLUMNS) + "\n" + "x" * (LIMIT + 10))
    with pytest.raises(SchemaError, match="over the"):
        datasets.read(p)


def test_a_table_under_the_limit_still_reads(tmp_path, low_limit):
    df = datasets.load("h200_forum").head(200)
    for ext in (".csv", ".csv.gz", ".xlsx"):
        back = datasets.read(datasets.save(df, tmp_path / f"t{ext}"))
        assert len(back) == 200 and list(back["wall_ms"]) == pytest.approx(list(df["wall_ms"]))


def test_a_damaged_xlsx_is_one_line(tmp_path, capsys):
    p = tmp_path / "bad.xlsx"
    p.write_bytes(b"PK\x03\x04 not a zip")
    assert cli.main(["explain", str(p)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_parquet_of_dictionary_coded_text_is_refused_before_it_unpacks(tmp_path, low_limit, capsys):
    pytest.importorskip("pyarrow")
    df = datasets.load("h200_forum").head(2000)
    df = df.assign(error="E" * 10_000)  # 20 MB of text, one dictionary entry in the file
    p = tmp_path / "bomb.parquet"
    df.to_parquet(p)
    assert p.stat().st_size < 200_000
    tracemalloc.start()
    try:
        assert cli.main(["explain", str(p)]) == 2
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "decompression bomb" in err[0]
    said = re.search(r"its text columns unpack to ([\d,]+) bytes", err[0])
    assert said and int(said.group(1).replace(",", "")) >= 2000 * 10_000
    assert peak < 10 * LIMIT  # the 20 MB of text was never made


def test_a_parquet_under_the_limit_still_reads(tmp_path, low_limit):
    pytest.importorskip("pyarrow")
    df = datasets.load("h200_forum").head(200)
    back = datasets.read(datasets.save(df, tmp_path / "t.parquet"))
    assert len(back) == 200 and list(back["strategy"]) == list(df["strategy"])


@pytest.mark.parametrize("name", ["t.csv", "t.partial.csv", "t.csv.gz.env.json"])
def test_a_table_or_env_json_linked_to_a_device_is_refused_not_read_forever(tmp_path, name):
    df = datasets.load("h200_forum").head(5)
    datasets.save(df, tmp_path / "t.csv.gz")
    (tmp_path / name).unlink(missing_ok=True)
    (tmp_path / name).symlink_to("/dev/zero")  # st_size 0, and it never ends
    target = tmp_path / ("t.csv.gz" if name.endswith("env.json") else name)
    with pytest.raises(SchemaError, match="not a regular file"):
        datasets.read(target)
