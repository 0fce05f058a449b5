"""hostile5: the "exists" refusal suggests ``--resume`` only where it would work (issue 35),
yet a stopped run of another command is offered one: ``batch --out`` a stopped ``measure``
table says "continue its run with --resume", and that ``batch ... --resume`` is refused
("kind was 'sweep', now 'batch'"). The same with ``measure --out`` a stopped batch table.
The line should leave ``--resume`` out there, or name the command whose run it is."""

from h2dlab.cli import main as cli
from tests.measure.test_resume_finished import _stopped

BATCH = ["batch", "--device", "cpu", "--totals", "1MiB", "--counts", "1", "--reps", "2", "--no-progress"]


def test_batch_into_a_stopped_measure_table_is_not_offered_a_resume_that_is_refused(tmp_path, capsys):
    out = _stopped(tmp_path, "r.csv")  # a measure sweep stopped after its first cell
    assert cli.main([*BATCH, "--out", str(out)]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert cli.main([*BATCH, "--out", str(out), "--resume"]) == 2  # the resume is refused
    assert "cannot resume" in capsys.readouterr().err
    assert "--resume" not in line or "h2dlab measure" in line, line
