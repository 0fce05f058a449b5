"""hostile7: a run noted done whose table is gone but whose own env.json is left starts again
with ``--force`` (c64b2ec, ``run._orphan_env_of_its_own``). "Gone" is judged by the table's
name only: a table the user renamed in its kind folder (``mv sweep/tiny.csv.gz
sweep/tiny-old.csv.gz``, to keep it beside a new run) is still there, with the env.json's own
``run_id`` in every row. The forced run wrote its env.json over that one: the renamed table's
only fingerprint (host, GPU, date, command, spec) was lost, nothing said. Before c64b2ec the run
failed and the env.json was kept. Data loss (lesser: the user left the env.json behind)."""

from __future__ import annotations

import json

from h2dlab.recording import datasets
from tests.recording.test_record import _plan, _record

TINY = {"kind": "sweep", "run": "tiny", "args": ["measure", "--sizes", "1KiB", "--reps", "2", "--warmup", "0", "--strategies", "pageable"], "seconds": 2}  # fmt: skip


def test_resume_keeps_the_env_json_of_a_table_renamed_in_its_kind_folder(tmp_path):
    folder = tmp_path / "rec"
    p = _record("--device", "cpu", "--plan", _plan(tmp_path, TINY), "--out", str(folder))
    _, err = p.communicate(timeout=240)
    assert p.returncode == 0, err
    table = folder / "sweep" / "tiny.csv.gz"
    fingerprint = datasets.env_path(table).read_bytes()
    renamed = table.rename(folder / "sweep" / "tiny-old.csv.gz")  # kept; its env.json left behind
    assert set(datasets.read(renamed)["run_id"]) == {json.loads(fingerprint)["run_id"]}

    p = _record("--resume", str(folder))
    _, err = p.communicate(timeout=240)
    kept = [
        f
        for f in (folder / "sweep").iterdir()
        if f.name.endswith(".env.json") and f.read_bytes() == fingerprint
    ]
    assert kept, (p.returncode, err)  # the renamed table's fingerprint is somewhere, not lost
