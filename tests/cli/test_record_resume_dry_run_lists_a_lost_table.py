"""hostile6: ``record --resume`` measures again a "done" run whose table is gone (hostile5's
fix, in ``recording.run.record``), but ``record --resume --dry-run``, which says what the
resume will do, still lists only the runs not noted done: "0 experiments ... estimated 0 s",
exit 0, for a resume that then measures one. The dry run should list the run to measure."""

from __future__ import annotations

from h2dlab.cli import main as cli
from h2dlab.recording import datasets
from tests.recording.test_record import _plan, _record

TINY = {"kind": "sweep", "run": "tiny", "args": ["measure", "--sizes", "1KiB", "--reps", "2", "--warmup", "0", "--strategies", "pageable"], "seconds": 2}  # fmt: skip


def test_resume_dry_run_lists_a_done_run_whose_table_is_gone(tmp_path, capsys):
    folder = tmp_path / "rec"
    p = _record("--device", "cpu", "--plan", _plan(tmp_path, TINY), "--out", str(folder))
    _, err = p.communicate(timeout=240)
    assert p.returncode == 0, err
    table = folder / "sweep" / "tiny.csv.gz"
    table.unlink()
    datasets.env_path(table).unlink()

    assert cli.main(["record", "--resume", str(folder), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "1 experiment " in out and "tiny" in out, out
