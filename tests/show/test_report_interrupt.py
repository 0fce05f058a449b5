"""Ctrl-C or SIGTERM while `h2dlab report` executes a notebook (hostile tester, session 29:
a 70-line traceback and exit 1, once exit 0, because nbclient takes both signals for itself
in the main thread, swallows a Ctrl-C or fails on the kernel the signal reached). The
notebook now runs in a thread of its own; the signal reaches the main thread, which shuts
the kernel down and stops as interrupted. Here a fake execution signals the main thread and
runs until the kernel is shut down, then returns (as nbclient swallowing it) or fails."""

import signal
import threading

import nbclient
import pytest

from h2dlab.cli import main as cli
from h2dlab.show import report


def _fake(sig, then, gone):
    def execute(self, **kw):  # noqa: ARG001
        signal.pthread_kill(threading.main_thread().ident, sig)  # as a Ctrl-C reaches the main thread
        assert gone.wait(5), "the kernel was never shut down"
        then()

    return execute


def _fail():
    raise AssertionError("assert self.kc is not None")  # nbclient's cleanup, the kernel gone


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("then", [lambda: None, _fail], ids=["swallowed", "cleanup-fails"])
def test_an_interrupted_report_exits_130_in_one_line(monkeypatch, tmp_path, capsys, sig, then):
    gone, stopped = threading.Event(), []
    monkeypatch.setattr(nbclient.NotebookClient, "execute", _fake(sig, then, gone))
    monkeypatch.setattr(report, "_stop_kernel", lambda km: (stopped.append(km), gone.set()))
    code = cli.main(["report", "--outdir", str(tmp_path / "r"), "--only", "04-pinned-memory-primer"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_INTERRUPTED == 130
    assert err.strip().splitlines()[-1] == "h2dlab: interrupted" and "Traceback" not in err
    assert len(stopped) == 1  # the notebook's kernel is shut down, not left behind
    assert not (tmp_path / "r" / "04-pinned-memory-primer.html").exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers given back
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_failure_without_a_signal_is_raised_as_it_was(monkeypatch, tmp_path):
    monkeypatch.setattr(nbclient.NotebookClient, "execute", lambda self, **kw: _fail())
    with pytest.raises(AssertionError, match="self.kc is not None"):
        report.build(tmp_path / "r", notebooks=["04-pinned-memory-primer"])
