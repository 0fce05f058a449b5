"""A stop during ``measure --reference`` says that the reference check was not taken (issue 35).

Before, a SIGTERM while ``torch.utils.benchmark`` timed the cells left the table whole
without the reference in its env.json, and the command said a bare "h2dlab: interrupted";
a SIGTERM during the sweep's last copies (which it lets end: every row measured) was
ignored and the reference check ran for its full length, exit 0. Now the rows written are
said as for a whole table, one line says the reference was not taken, and the exit code is
130. Real signals (``signal.raise_signal``); CPU host copies, the reference itself patched.
"""

import signal

import pytest

from h2dlab.cli import main as cli
from h2dlab.measure import harness, reference
from h2dlab.recording import datasets

ARGS = ["measure", "--device", "cpu", "--strategies", "pageable", "--sizes", "1KiB,4KiB", "--reps", "3"]
ARGS += ["--warmup", "0", "--no-progress", "--order", "ascending", "--reference"]
ROWS = 6


def _raise(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt


@pytest.fixture(autouse=True)
def sigterm_raises():
    """SIGTERM outside a measurement raises ``KeyboardInterrupt`` (as in the CLI), never kills pytest."""
    old = signal.signal(signal.SIGTERM, _raise)
    yield
    signal.signal(signal.SIGTERM, old)


def test_a_sigterm_during_the_reference_check_says_it_was_not_taken(tmp_path, capsys, monkeypatch):
    def interrupted(*a, **k):
        signal.raise_signal(signal.SIGTERM)
        raise AssertionError("the signal did not interrupt")

    monkeypatch.setattr(reference, "reference_medians_us", interrupted)
    out = tmp_path / "r.csv"
    rc = cli.main([*ARGS, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 130
    assert err[-2].startswith(f"wrote {out} ({ROWS} rows: {ROWS} timed")
    assert err[-1] == (
        f"h2dlab: interrupted: the reference check was not taken (it was interrupted); {out} is whole and kept without it"
    )
    df = datasets.read(out)
    assert len(df) == ROWS
    assert "reference" not in datasets.read_env(out)


def test_a_sigterm_during_the_last_copies_skips_the_reference_and_says_so(tmp_path, capsys, monkeypatch):
    calls = []
    monkeypatch.setattr(reference, "reference_medians_us", lambda *a, **k: calls.append(1) or {})
    real, visits = harness._measure_visit, []

    def visit(*a, **k):
        real(*a, **k)
        visits.append(1)
        if len(visits) == 2:  # after the last cell's copies: every row is measured
            signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(harness, "_measure_visit", visit)
    out = tmp_path / "r.csv"
    rc = cli.main([*ARGS, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 130
    assert calls == []
    assert err[-1] == (
        "h2dlab: interrupted: the reference check was not taken (a stop was asked for before it began); "
        f"{out} is whole and kept without it"
    )
    assert len(datasets.read(out)) == ROWS
    assert datasets.read_env(out)["stopped_by_signal"] == signal.SIGTERM


def test_a_reference_check_left_alone_is_taken_and_exits_0(tmp_path, capsys, monkeypatch):
    fake = {("pageable", n): {"reference_median_us": 1.0, "reference_iqr_us": 0.1, "reference_blocks": 3.0,
                              "reference_calls_per_block": 10.0} for n in (1024, 4096)}  # fmt: skip
    monkeypatch.setattr(reference, "reference_medians_us", lambda *a, **k: fake)
    out = tmp_path / "r.csv"
    rc = cli.main([*ARGS, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "interrupted" not in err
    assert [r["size_bytes"] for r in datasets.read_env(out)["reference"]] == [1024, 4096]


# ``measure --reference --resume`` of that whole table said "finished: nothing to resume" and
# exited 0, without the reference (hostile pass 5): it now takes the check on the table's rows.
def test_resume_of_a_table_whose_reference_was_stopped_does_not_say_it_is_done(tmp_path, capsys, monkeypatch):
    def interrupted(*a, **k):
        signal.raise_signal(signal.SIGTERM)
        raise AssertionError("the signal did not interrupt")

    monkeypatch.setattr(reference, "reference_medians_us", interrupted)
    out = tmp_path / "r.csv"
    assert cli.main([*ARGS, "--out", str(out)]) == 130
    assert "reference" not in datasets.read_env(out)
    capsys.readouterr()

    fake = {("pageable", n): {"reference_median_us": 1.0, "reference_iqr_us": 0.1, "reference_blocks": 3.0,
                              "reference_calls_per_block": 10.0} for n in (1024, 4096)}  # fmt: skip
    monkeypatch.setattr(reference, "reference_medians_us", lambda *a, **k: fake)
    rc = cli.main([*ARGS, "--out", str(out), "--resume"])
    err = capsys.readouterr().err
    taken = "reference" in (datasets.read_env(out) or {})
    # either the check is taken now, or the command says it was not and does not exit 0
    assert taken or (rc != 0 and "reference" in err), (rc, err)
    assert taken and rc == 0  # the check is taken now, on the finished table's rows
    again = cli.main([*ARGS, "--out", str(out), "--resume"])
    assert again == 0 and "nothing to resume" in capsys.readouterr().err  # and then it is finished
