"""An env.json over its stated limit is not read whole and not used (issue 35).

Before, an env.json was read whole up to the 1 GiB a table may unpack to (then parsed): a
fingerprint is a few kB (the bundled recording's largest is 6 kB), so a large one is no
run's, and reading it filled memory. Now one over ``tableio.env_max_bytes`` (1 MiB, plus
16 KiB per run id of its table: a survey keeps each rank's facts) is read no further than
the limit, and, like another run's env.json, is not used: one warning line says so.
Synthetic tables and env.json files.
"""

from __future__ import annotations

import json
import os
import warnings

import pandas as pd
import pytest

from h2dlab.recording import datasets, tableio
from h2dlab.recording.env_folder import read_folder_env
from tests.recording.test_validate import synthetic

RUN = "a1b2c3d4e5f6"


def _table(tmp_path, run_id=RUN, n=3):
    table = tmp_path / "t.csv"
    datasets.save(_rows(run_id, n), table, env={"run_id": run_id, "gpu_name": "synthetic"})
    return table


def _rows(run_id, n):
    """``n`` rows of a synthetic version 1 table (``test_validate.synthetic``) of run ``run_id``."""
    return synthetic(n, run_id=run_id)


def test_an_env_json_over_1_mib_beside_a_table_is_not_used_and_one_warning_says_so(tmp_path):
    table = _table(tmp_path)
    pad = "x" * ((1 << 20) + (32 << 10))
    env = {"run_id": RUN, "gpu_name": "GPU", "padding": pad}  # valid JSON, naming this run
    datasets.env_path(table).write_text(json.dumps(env))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        df = datasets.read(table)
    assert df.attrs.get("env") is None
    said = [str(w.message) for w in seen]
    assert said == [
        f"t.csv.env.json is over the {(1 << 20) + (16 << 10):,} bytes an env.json may hold, so it is not used "
        "for t.csv: this table has no env.json"
    ]


def test_a_huge_env_json_is_read_no_further_than_the_limit(tmp_path, monkeypatch):
    table = _table(tmp_path)
    big = datasets.env_path(table)
    with open(big, "wb") as fh:  # 4 GiB, sparse: read whole, it would fill this machine's memory
        fh.truncate(4 << 30)
    asked = []
    real_open = open

    def counting_open(path, mode="r", *a, **k):
        fh = real_open(path, mode, *a, **k)
        if str(path) == str(big):
            real_read = fh.read
            fh = _Reads(fh, real_read, asked)
        return fh

    monkeypatch.setattr("builtins.open", counting_open)
    with pytest.warns(UserWarning, match="is over the 1,064,960 bytes an env.json may hold"):
        assert tableio.read_env(table, run_ids=[RUN]) is None
    assert asked and max(asked) <= (1 << 20) + (16 << 10) + 1


class _Reads:
    def __init__(self, fh, read, asked):
        self._fh, self._read, self._asked = fh, read, asked

    def read(self, n=-1):
        self._asked.append(n if n is not None and n >= 0 else float("inf"))
        return self._read(n)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()

    def __getattr__(self, name):
        return getattr(self._fh, name)


def test_a_survey_env_json_of_a_large_fleet_is_still_read(tmp_path):
    # a survey's env.json keeps each rank's facts: 1000 ranks of ~2 kB is over 1 MiB in all
    survey = "s0123456789a"
    ids = [f"{survey}-r{r:05d}" for r in range(1000)]
    table = tmp_path / "fleet.csv"
    rows = pd.concat([_rows(i, 1) for i in ids], ignore_index=True)
    ranks = {str(r): {"host": f"node{r:04d}", "facts": "f" * 2000} for r in range(1000)}
    datasets.save(rows, table, env={"survey": {"survey_id": survey, "ranks": ranks}})
    assert os.path.getsize(datasets.env_path(table)) > 1 << 20
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = tableio.read_env(table, run_ids=ids)
    assert env["survey"]["ranks"]["999"]["host"] == "node0999"


def test_an_env_json_just_under_the_limit_is_used(tmp_path):
    table = _table(tmp_path)
    env = {"run_id": RUN, "gpu_name": "GPU", "padding": ""}
    env["padding"] = "x" * ((1 << 20) - len(json.dumps(env)))
    datasets.env_path(table).write_text(json.dumps(env))
    assert os.path.getsize(datasets.env_path(table)) == 1 << 20
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tableio.read_env(table, run_ids=[RUN])["gpu_name"] == "GPU"


def test_a_recording_s_own_env_json_over_1_mib_is_not_used(tmp_path):
    (tmp_path / "env.json").write_text(json.dumps({"gpu_name": "GPU", "padding": "x" * (1 << 20)}))
    with pytest.warns(
        UserWarning, match="is over the 1,048,576 bytes an env.json may hold, so it is not used"
    ):
        assert read_folder_env(tmp_path) is None
    (tmp_path / "env.json").write_text(json.dumps({"gpu_name": "GPU"}))
    assert read_folder_env(tmp_path) == {"gpu_name": "GPU"}


def test_many_run_ids_do_not_raise_the_env_json_limit_past_its_cap():
    """16 KiB more per run id, but never more than ENV_CAP_BYTES: a planted table of 65,536 run
    ids (65,536 rows) let a 1 GiB env.json be read whole."""
    from h2dlab.recording import tableio

    assert tableio.env_max_bytes(0) == 1 << 20
    assert tableio.env_max_bytes(1000) == (1 << 20) + 1000 * (16 << 10)  # a fleet of 1000 GPUs
    assert tableio.env_max_bytes(65_536) == tableio.ENV_CAP_BYTES == 64 << 20
