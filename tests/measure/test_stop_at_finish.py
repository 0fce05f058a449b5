"""A stop that arrives while a measurement writes its table (issue 35, open defect of
fcd3b25's SIGHUP test).

Before, the stop flag covered the measuring loop only: a SIGTERM during ``run.finish``
(the fingerprint, the census, the final table's write) raised at once, the command said
a bare "h2dlab: interrupted" (exit 130), and the table was missing, its rows only in the
partial file. Now the flag covers the finish: one signal there lets the table be written
(every planned row measured: exit 0); a second one stops the write, keeps the partial
file and says how to resume. The signals are real (``signal.raise_signal``), sent from
inside the finish by a patched ``collect_env`` / ``save``; the copies are CPU host copies.
"""

import signal

import pandas as pd
import pytest

from h2dlab.cli import main as cli
from h2dlab.measure import recorder
from h2dlab.measure.harness import sweep
from h2dlab.measure.recorder import StopFlag, partial_path
from h2dlab.measure.spec import SweepSpec
from h2dlab.recording import datasets

ARGS = ["measure", "--device", "cpu", "--strategies", "pageable", "--sizes", "1KiB,4KiB", "--reps", "3"]
ARGS += ["--warmup", "0", "--no-progress"]
ROWS = 6


def _raise(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt


@pytest.fixture
def signal_in_finish(monkeypatch):
    """Send ``signals`` to this process from inside the finish: the first from the
    fingerprint (``collect_env``, its second call: the first is the run's start), the
    next from the final table's write (``datasets.save``). Meanwhile SIGTERM outside a
    measurement raises ``KeyboardInterrupt`` (as in the CLI), never kills pytest."""
    old = signal.signal(signal.SIGTERM, _raise)
    yield _arm(monkeypatch)
    signal.signal(signal.SIGTERM, old)


def _arm(monkeypatch):

    def arm(*signals):
        left = list(signals)
        calls = []
        real_env, real_save = recorder.collect_env, recorder.datasets.save

        def env(*a, **k):
            calls.append(1)
            if len(calls) == 2 and left:
                signal.raise_signal(left.pop(0))
            return real_env(*a, **k)

        def save(*a, **k):
            if left:
                signal.raise_signal(left.pop(0))
            return real_save(*a, **k)

        monkeypatch.setattr(recorder, "collect_env", env)
        monkeypatch.setattr(recorder.datasets, "save", save)

    return arm


def test_a_sigterm_while_the_table_is_written_still_writes_it(tmp_path, capsys, signal_in_finish):
    out = tmp_path / "r.csv"
    signal_in_finish(signal.SIGTERM)
    rc = cli.main([*ARGS, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "wrote" in err and "interrupted" not in err
    df = datasets.read(out)
    assert len(df) == ROWS and sorted(df["order"]) == list(range(ROWS))
    assert not partial_path(out).exists()
    assert datasets.read_env(out)["measured_rows"] == ROWS


def test_a_second_signal_in_the_finish_keeps_the_rows_and_says_how_to_resume(
    tmp_path, capsys, signal_in_finish
):
    out = tmp_path / "r.csv"
    signal_in_finish(signal.SIGTERM, signal.SIGINT)
    rc = cli.main([*ARGS, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 130
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"{ROWS} of {ROWS} rows kept in {partial_path(out)}" in lines[0]
    assert "resume with: h2dlab measure" in lines[0] and lines[0].endswith("--resume")
    assert not out.exists() and len(pd.read_csv(partial_path(out))) == ROWS
    assert signal.getsignal(signal.SIGTERM) is _raise  # every handler given back
    # the line's own command finishes it: the rows come from the partial file
    assert cli.main([*ARGS, "--out", str(out), "--resume"]) == 0
    df = datasets.read(out)
    assert len(df) == ROWS and df["run_id"].nunique() == 1 and not partial_path(out).exists()


def test_the_library_keeps_every_row_when_the_finish_is_cut(tmp_path, signal_in_finish):
    spec = SweepSpec(("pageable",), (1024, 4096), device="cpu", reps=3, warmup=0, seed=0)
    out = tmp_path / "r.csv"
    signal_in_finish(signal.SIGTERM, signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt, match=r"resume it \(resume=True\)"):
        sweep(spec, out=out, progress=False)
    assert len(pd.read_csv(partial_path(out))) == ROWS and not out.exists()


def test_a_stop_in_the_loop_is_still_a_stop(tmp_path):
    """The flag's meaning inside the loop is unchanged: rows missing, ``stopped``."""
    spec = SweepSpec(("pageable",), (1024, 4096), device="cpu", reps=3, warmup=0, seed=0)
    out, stop = tmp_path / "r.csv", StopFlag()
    df = sweep(spec, out=out, progress=False, stop=stop, before_cell=lambda f: f.request(signal.SIGTERM))
    assert len(df) == 0 and df.attrs["stopped"] and out.exists()
