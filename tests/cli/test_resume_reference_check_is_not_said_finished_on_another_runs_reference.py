"""hostile7: ``measure --reference --resume`` of a finished table takes the missing check only
where the table's own env.json names this machine (c64b2ec, ``cli.loop.take_missing_reference``);
otherwise one line, exit 2. Where the env.json beside the table is another run's (copied there)
and that run's holds a reference, ``_reference_written`` reads it without the table's run ids,
finds the other run's reference and lets the "finished, nothing to resume" line stand: exit 0 to
a command that asked for the table's reference check, none of which the table has (the readers
do not use that env.json; a warning says so). The contract of the fix: exit 2, nothing written.
Lesser: the warning is printed, nothing is lost."""

from __future__ import annotations

import json

from h2dlab.cli import main as cli
from h2dlab.measure import reference
from h2dlab.recording import datasets

ARGS = ["measure", "--device", "cpu", "--strategies", "pageable", "--sizes", "1KiB", "--reps", "2"]
ARGS += ["--warmup", "0", "--no-progress", "--order", "ascending", "--reference"]
FAKE = {
    ("pageable", 1024): {
        "reference_median_us": 1.0,
        "reference_iqr_us": 0.1,
        "reference_blocks": 3.0,
        "reference_calls_per_block": 10.0,
    }
}  # fmt: skip  (synthetic reference timings)


def test_resume_reference_does_not_exit_0_on_another_runs_env_json_holding_a_reference(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(reference, "reference_medians_us", lambda *a, **k: FAKE)
    mine, theirs = tmp_path / "mine.csv", tmp_path / "theirs.csv"
    assert cli.main([*ARGS, "--out", str(mine)]) == 0
    env = json.loads(datasets.env_path(mine).read_text())
    del env["reference"]  # as a check stopped by Ctrl-C leaves it
    datasets.env_path(mine).write_text(json.dumps(env))
    assert cli.main([*ARGS, "--out", str(theirs)]) == 0  # another run, with its reference
    fingerprint = datasets.env_path(theirs).read_bytes()
    datasets.env_path(mine).write_bytes(fingerprint)  # copied beside mine.csv
    capsys.readouterr()
    rc = cli.main([*ARGS, "--out", str(mine), "--resume"])
    err = capsys.readouterr().err
    assert datasets.env_path(mine).read_bytes() == fingerprint  # holds (nothing written)
    assert datasets.read(mine).attrs.get("env") is None  # the table has no reference of its own
    assert rc == 2, (rc, err)
