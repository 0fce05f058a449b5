"""hostile5: ``record --resume`` of a recording whose "done" experiment has lost its table
(deleted, a disk that lost it, a folder copied in part) said "recorded 1 of 1 experiments",
exit 0, and ``--json`` listed the missing file as the experiment's table. The resume should
measure the run again, or say that its table is missing and not exit 0."""

from __future__ import annotations

import json

from h2dlab.recording import datasets
from tests.recording.test_record import _plan, _record

TINY = {"kind": "sweep", "run": "tiny", "args": ["measure", "--sizes", "1KiB", "--reps", "2", "--warmup", "0", "--strategies", "pageable"], "seconds": 2}  # fmt: skip


def test_resume_does_not_count_a_done_run_whose_table_is_gone(tmp_path):
    folder = tmp_path / "rec"
    p = _record("--device", "cpu", "--plan", _plan(tmp_path, TINY), "--out", str(folder))
    _, err = p.communicate(timeout=240)
    assert p.returncode == 0, err
    table = folder / "sweep" / "tiny.csv.gz"
    assert table.exists()
    table.unlink()
    datasets.env_path(table).unlink()

    p = _record("--resume", str(folder), "--json")
    out, err = p.communicate(timeout=240)
    remeasured = table.exists()
    said = p.returncode != 0 and "tiny" in err
    assert remeasured or said, (p.returncode, err, json.loads(out) if out.strip() else out)
    assert remeasured and p.returncode == 0 and "its table is gone: measured again" in err
    assert len(datasets.read(table)) == 2


# Where the table alone was lost, its env.json left beside it, the child refused to write over
# that env.json and the run failed at every resume (hostile pass 6): the env.json is the lost
# run's own (its command names this run's --out), so the run starts again with --force.
def test_resume_remeasures_a_done_run_whose_table_alone_is_gone(tmp_path):
    folder = tmp_path / "rec"
    p = _record("--device", "cpu", "--plan", _plan(tmp_path, TINY), "--out", str(folder))
    _, err = p.communicate(timeout=240)
    assert p.returncode == 0, err
    table = folder / "sweep" / "tiny.csv.gz"
    table.unlink()  # its env.json is left
    assert datasets.env_path(table).exists()

    p = _record("--resume", str(folder))
    _, err = p.communicate(timeout=240)
    assert p.returncode == 0 and table.exists(), (p.returncode, err)
    assert len(datasets.read(table)) == 2
