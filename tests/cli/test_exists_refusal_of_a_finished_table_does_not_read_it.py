"""hostile6: hostile5's fix (``cli.checks._other_command``) read the whole table at ``--out``
(``recorder.existing_rows``) before every "exists" refusal, to name the command of a
stopped run, also for a finished table, where that name is never said: ``measure --out``
onto a finished table of 400,000 rows (a forgotten ``--force``) took 4.3 s and 0.9 GB to
refuse, against 1.4 s and 0.3 GB before. A finished table is refused from its env.json."""

from __future__ import annotations

from h2dlab.cli import main as cli
from h2dlab.measure import recorder

MEASURE = ["measure", "--device", "cpu", "--strategies", "pageable", "--sizes", "1KiB", "--reps", "2"]
MEASURE += ["--warmup", "0", "--no-progress"]


def test_the_exists_refusal_of_a_finished_table_does_not_read_its_rows(tmp_path, monkeypatch, capsys):
    out = tmp_path / "t.csv"
    assert cli.main([*MEASURE, "--out", str(out)]) == 0
    capsys.readouterr()

    def read(*a, **k):
        raise AssertionError("the finished table's rows were read to refuse it")

    monkeypatch.setattr(recorder, "existing_rows", read)
    for cmd in (MEASURE, ["batch", "--device", "cpu", "--no-progress"]):
        assert cli.main([*cmd, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "exists" in err and len(err.strip().splitlines()) == 1, err
