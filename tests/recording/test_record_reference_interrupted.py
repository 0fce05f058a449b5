"""A recording whose reference check was stopped measures that run again on resume (issue 35).

``measure --reference`` stopped during its reference check keeps a whole table without the
reference, says so and exits 130 (``tests/cli/test_measure_reference_interrupted.py``);
``record`` marks the experiment interrupted. Before, ``record --resume`` then found a whole
table and marked the experiment done: a recording whose reference run holds no reference,
said nowhere. Now the run is measured again (``--force``: the check times the sweep's own
cells in its own process). A CPU recording of one synthetic experiment with the check (a sweep:
the plan's reference kind needs CUDA).
"""

from __future__ import annotations

import json

from h2dlab.recording import datasets
from h2dlab.recording import run as record_run
from h2dlab.recording.folder import MANIFEST, read_manifest
from tests.recording.test_record import _plan, _record

REF = {"kind": "sweep", "run": "ref", "args": ["measure", "--sizes", "1KiB", "--reps", "3", "--warmup", "0", "--strategies", "pageable", "--reference"], "seconds": 3}  # fmt: skip


def test_a_reference_run_whose_check_was_stopped_is_measured_again_on_resume(tmp_path):
    folder = tmp_path / "rec"
    p = _record("--device", "cpu", "--plan", _plan(tmp_path, REF), "--out", str(folder))
    _, err = p.communicate(timeout=240)
    assert p.returncode == 0, err
    table = folder / "sweep" / "ref.csv.gz"
    env_file = datasets.env_path(table)
    env = json.loads(env_file.read_text())
    assert env["reference"]
    first_run = env["run_id"]
    # as a stopped check leaves it: the table whole, no reference, the experiment interrupted
    del env["reference"]
    env_file.write_text(json.dumps(env))
    m = json.loads((folder / MANIFEST).read_text())
    m["experiments"][0]["status"], m["status"] = "interrupted", "incomplete"
    (folder / MANIFEST).write_text(json.dumps(m))
    r = read_manifest(folder)["experiments"][0]
    if hasattr(record_run, "_reference_missing"):  # the previous code has neither
        assert record_run._reference_missing(table, r)
        cmd = record_run._child_command(r, folder, lambda sub: {"--resume", "--force", "--no-progress"})
        assert "--force" in cmd and "--resume" not in cmd

    p = _record("--resume", str(folder))
    _, err = p.communicate(timeout=240)
    assert p.returncode == 0, err
    assert read_manifest(folder)["experiments"][0]["status"] == "done"
    env = json.loads(env_file.read_text())
    assert [row["size_bytes"] for row in env["reference"]] == [1024]
    assert env["run_id"] != first_run  # measured again, in the process that took the check
    assert not record_run._reference_missing(table, r)
