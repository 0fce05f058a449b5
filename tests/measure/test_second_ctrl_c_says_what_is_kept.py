"""A second Ctrl-C during a measurement says what it kept and how to resume (issue 35).

The first Ctrl-C (or SIGTERM) lets the copy in flight end and the table be written, and the
command says "interrupted: N of M rows kept in OUT; resume with: ...". A second one stops at
once: before, the command said only "h2dlab: interrupted" (exit 130), though the rows were
in the partial file and a resume would continue from them. Real signals
(``signal.raise_signal``), sent from inside the loop after its second cell; CPU host copies.
"""

import shlex
import signal

import pytest

from h2dlab.cli import main as cli
from h2dlab.measure import harness
from h2dlab.measure.recorder import existing_rows, partial_path
from h2dlab.recording import datasets

ARGS = ["measure", "--device", "cpu", "--strategies", "pageable", "--sizes", "1KiB,4KiB,16KiB", "--reps", "3"]
ARGS += ["--warmup", "0", "--no-progress", "--order", "ascending"]
ROWS = 9


@pytest.fixture
def two_ctrl_c_after_two_cells(monkeypatch):
    real = harness._measure_visit
    visits = []

    def visit(*a, **k):
        real(*a, **k)
        visits.append(1)
        if len(visits) == 2:
            signal.raise_signal(signal.SIGINT)  # the first: stop after the copy in flight
            signal.raise_signal(signal.SIGINT)  # the second: stop now

    monkeypatch.setattr(harness, "_measure_visit", visit)
    return visits


def test_a_second_ctrl_c_says_how_many_rows_are_kept_where_and_how_to_resume(
    tmp_path, capsys, monkeypatch, two_ctrl_c_after_two_cells
):
    out = tmp_path / "r.csv"
    rc = cli.main([*ARGS, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 130
    assert err.count("\n") == 0, err  # one line
    partial = partial_path(out)
    resume = ["h2dlab", *ARGS, "--out", str(out), "--resume"]
    assert err == (
        f"h2dlab: interrupted: the table was not written; 6 of {ROWS} rows kept in {partial}; "
        f"resume with: {shlex.join(resume)}"
    )
    assert not out.exists()
    kept, _ = existing_rows(out)
    assert sorted(kept["order"]) == list(range(6))
    # the line runs as printed and finishes the table from the rows kept
    monkeypatch.undo()
    rc = cli.main(shlex.split(err.split("resume with: ", 1)[1])[1:])
    assert rc == 0, capsys.readouterr().err
    df = datasets.read(out)
    assert len(df) == ROWS and sorted(df["order"]) == list(range(ROWS))
    assert df["run_id"].nunique() == 1


def test_a_second_ctrl_c_in_a_batch_run_says_the_same(tmp_path, capsys, monkeypatch):
    from h2dlab.measure import batch

    real, shapes = batch._shape, []

    def shape(*a, **k):
        real(*a, **k)
        shapes.append(1)
        if len(shapes) == 1:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(batch, "_shape", shape)
    out = tmp_path / "b.csv"
    args = ["batch", "--device", "cpu", "--counts", "1,4", "--totals", "64KiB", "--methods", "loop_to"]
    args += ["--reps", "2", "--warmup", "0", "--no-progress", "--out", str(out)]
    rc = cli.main(args)
    err = capsys.readouterr().err.strip()
    assert rc == 130
    kept, _ = existing_rows(out)
    assert len(kept) > 0
    assert err == (
        f"h2dlab: interrupted: the table was not written; {len(kept)} of "
        f"{len(kept) * 2} rows kept in {partial_path(out)}; resume with: {shlex.join(['h2dlab', *args, '--resume'])}"
    )
