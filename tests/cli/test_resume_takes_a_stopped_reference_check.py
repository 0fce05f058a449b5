"""hostile5: ``measure --reference --resume`` of a whole table whose reference check was
stopped (exit 130, "the reference check was not taken") said "finished: nothing to resume;
it is left as it is" and exited 0, without the reference and without a word about it: the
user who asked for the check again is told the work is done. ``record --resume`` measures
such a run again (``run._reference_missing``); the plain command should take the check, or
say that it was not taken and how to get it (``--force``), with a non-zero exit."""

import signal

import pytest

from h2dlab.cli import main as cli
from h2dlab.measure import reference
from h2dlab.recording import datasets

ARGS = ["measure", "--device", "cpu", "--strategies", "pageable", "--sizes", "1KiB,4KiB", "--reps", "3"]
ARGS += ["--warmup", "0", "--no-progress", "--order", "ascending", "--reference"]


def _raise(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt


@pytest.fixture(autouse=True)
def sigterm_raises():
    old = signal.signal(signal.SIGTERM, _raise)
    yield
    signal.signal(signal.SIGTERM, old)


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
