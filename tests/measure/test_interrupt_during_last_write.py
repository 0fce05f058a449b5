"""A signal while the rows a sweep held back are written (hostile pass 3 of issue #35):
every row measured must still be on disk, once. The signals here are real ones sent to
this process from inside the write (``os.kill``), as a user's Ctrl-C would arrive; the
rows' write holds them until every row is written and counted (``interrupts.signals_held``).
Synthetic host copies on the CPU; nothing is timed."""

from __future__ import annotations

import itertools
import os
import signal

import pytest

from h2dlab.measure import harness, recorder, strategies
from h2dlab.measure.recorder import StopFlag, partial_path
from h2dlab.measure.spec import SweepSpec
from h2dlab.recording import datasets


class _Copy(strategies.Strategy):
    """Synthetic: a host copy that counts its calls."""

    name = "copy_test_only"
    needs_cuda = False
    allocates = False
    calls = 0

    def copy(self, x):
        type(self).calls += 1
        return x.clone()


@pytest.fixture
def copy_strategy(monkeypatch):
    monkeypatch.setitem(strategies.REGISTRY, _Copy.name, _Copy)
    _Copy.calls = 0
    return _Copy


def test_a_second_signal_while_held_back_rows_are_written_at_the_stop_keeps_every_row(
    tmp_path, copy_strategy, monkeypatch
):
    monkeypatch.setattr(harness, "FLUSH_AFTER_S", 3600.0)  # the rounds' rows wait (1 s in real use)
    stop = StopFlag()
    real_copy, real_write = _Copy.copy, recorder.RowWriter.write

    def copy(self, x):
        if type(self).calls == 4:  # the fifth copy is in flight when the first Ctrl-C comes
            stop.request()
        return real_copy(self, x)

    calls_after_stop = itertools.count()

    def write(self, row, flush=True):
        if stop and next(calls_after_stop) == 1:  # the second Ctrl-C, midway through the write
            os.kill(os.getpid(), signal.SIGINT)
        return real_write(self, row, flush)

    monkeypatch.setattr(_Copy, "copy", copy)
    monkeypatch.setattr(recorder.RowWriter, "write", write)
    spec = SweepSpec((_Copy.name,), (1024, 2048), device="cpu", reps=4, warmup=0, order="interleaved", seed=0)
    out = tmp_path / "w.csv"
    ticks = itertools.count(0.0, 1e-6)  # 1 us a copy: never a slow cell
    with pytest.raises(KeyboardInterrupt):
        harness.sweep(spec, out=out, progress=False, stop=stop, clock=lambda: next(ticks))
    assert _Copy.calls == 5  # five copies measured
    assert datasets.read(partial_path(out))["order"].tolist() == [0, 1, 2, 3, 4]


def test_a_signal_right_after_a_row_reaches_the_file_writes_it_once_and_the_run_resumes(
    tmp_path, copy_strategy, monkeypatch
):
    """Just after ``RowWriter.write`` put the second waiting row in the file's buffer, before
    ``write_all`` counts it, a Ctrl-C arrives: the run stops, each row is on disk once, and
    ``--resume`` finishes the plan."""
    real_write = recorder.RowWriter.write
    calls = itertools.count()

    def write(self, row, flush=True):
        real_write(self, row, flush)
        if next(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(recorder.RowWriter, "write", write)
    spec = SweepSpec((_Copy.name,), (1024, 2048), device="cpu", reps=3, warmup=0, order="ascending", seed=0)
    out = tmp_path / "d.csv"
    df = harness.sweep(spec, out=out, progress=False)
    assert df.attrs["stopped"]
    kept = datasets.read(partial_path(out) if partial_path(out).exists() else out)["order"].tolist()
    assert kept == list(range(len(kept))) and len(kept) >= 3  # each measured row once, in order
    monkeypatch.setattr(recorder.RowWriter, "write", real_write)
    whole = harness.sweep(spec, out=out, progress=False, resume=True)
    assert whole["order"].tolist() == list(range(6))


def test_a_signal_inside_a_held_block_acts_when_the_block_ends():
    from h2dlab.interrupts import signals_held

    done = []
    with pytest.raises(KeyboardInterrupt):
        with signals_held():
            os.kill(os.getpid(), signal.SIGINT)  # Python's own Ctrl-C handler is in place
            done.append("after the signal")
            done.append("the block's last step")
    assert done == ["after the signal", "the block's last step"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
