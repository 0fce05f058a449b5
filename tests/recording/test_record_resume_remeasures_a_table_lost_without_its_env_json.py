"""hostile6: ``record --resume`` measures again a "done" run whose table is gone (hostile5's
fix), but only where its env.json went too. Where the table alone was lost (``rm`` of the
``.csv.gz``, a copy that skipped it), its env.json is left beside the missing table; the
child command, given neither ``--resume`` nor ``--force``, refused to write over that
env.json, the run FAILED, and the recorder advised "retry them with: h2dlab record --resume",
which fails the same way every time. The env.json is the lost run's own (its command names
this run's ``--out``): the run should be measured again."""

from __future__ import annotations

from h2dlab.recording import datasets
from tests.recording.test_record import _plan, _record

TINY = {"kind": "sweep", "run": "tiny", "args": ["measure", "--sizes", "1KiB", "--reps", "2", "--warmup", "0", "--strategies", "pageable"], "seconds": 2}  # fmt: skip


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
