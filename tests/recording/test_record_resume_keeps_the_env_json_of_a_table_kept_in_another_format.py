"""hostile8: 766c58c keeps a run's orphaned env.json (``sweep/tiny.csv.gz.env.json``, its table
gone) when another table beside it holds that run's rows, but ``run._run_kept_elsewhere`` looks
only at sibling ``.csv.gz`` files. The kit reads and writes .csv, .parquet and .xlsx tables too:
a user who ran ``gunzip sweep/tiny.csv.gz`` (now ``tiny.csv``), or kept the table as
``tiny-old.parquet`` or ``.xlsx``, still has the run's rows there, and ``record --resume`` forces
the run again (``--force``) over that table's only fingerprint (host, GPU, date, command, spec),
nothing said. Data loss (lesser: the user left the env.json behind)."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from h2dlab.cli import main as cli
from h2dlab.recording import datasets, tableio
from h2dlab.recording.run import keep_orphan_env

RUN = {"kind": "sweep", "run": "tiny", "args": ["measure"]}
ARGS = ["measure", "--device", "cpu", "--strategies", "pageable", "--sizes", "1KiB", "--reps", "2"]
ARGS += ["--warmup", "0", "--no-progress", "--order", "ascending"]


@pytest.mark.parametrize("kept_as", ["tiny.csv", "tiny-old.parquet", "tiny-old.xlsx"])
def test_orphan_env_json_is_kept_where_a_table_of_another_format_holds_its_run(tmp_path, kept_as):
    kind = tmp_path / "sweep"
    kind.mkdir()
    out = kind / "tiny.csv.gz"
    assert cli.main([*ARGS, "--out", str(out)]) == 0  # a real (tiny, CPU) run, as `record` runs it
    fingerprint = datasets.env_path(out).read_bytes()
    if kept_as == "tiny.csv":  # `gunzip sweep/tiny.csv.gz`
        (kind / kept_as).write_bytes(gzip.decompress(out.read_bytes()))
    else:  # kept in another format; only the .csv.gz's env.json is left
        tableio.save(tableio.read(out), kind / kept_as)
        datasets.env_path(kind / kept_as).unlink(missing_ok=True)
    out.unlink()
    run_ids = set(pd.read_csv(kind / kept_as)["run_id"]) if kept_as.endswith(".csv") else None
    if run_ids is None:
        reader = pd.read_parquet if kept_as.endswith(".parquet") else pd.read_excel
        run_ids = set(reader(kind / kept_as)["run_id"])
    assert run_ids == {json.loads(fingerprint)["run_id"]}  # the run's rows, kept
    # its env.json may be that table's: the resume moves it aside, never writes over it
    kept = keep_orphan_env(out, RUN)
    assert kept is not None and kept.read_bytes() == fingerprint and kept.name.endswith(".env.json")
    assert not datasets.env_path(out).exists()
