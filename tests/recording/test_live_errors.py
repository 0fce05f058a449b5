"""Live mode's recorder failing reaches the user in the kit's one-line style (helper "guard").

live.live_recording raised a bare RuntimeError("h2dlab record exited with N: see
FOLDER/record.log") when its child `h2dlab record` failed: `h2dlab report --mode live`
printed a traceback (cli.failure re-raises what is not a UsageError/OSError) and exit 1,
and the log it named did not exist when the recorder refused at once. Now: UsageError
(exit 2) when the recorder refused its command, Unavailable (exit 1) when it failed or was
stopped; one line that ends with the recorder's own error. Machines here are SYNTHETIC.
"""

import json
import subprocess

import pytest
import torch

from h2dlab.cli import main as cli
from h2dlab.errors import Unavailable, UsageError
from h2dlab.recording import live, session

MACHINE = {"hostname": "synthetic-host", "gpu_name": "Synthetic GPU", "gpu_count": 1}


def _damaged_unfinished(runs):
    """An unfinished recording of MACHINE whose recording.json lacks its device and plan:
    live mode resumes it, and the recorder refuses (exit 2)."""
    folder = runs / "synthetic-host-synthetic-gpu-2030-01-01"
    folder.mkdir(parents=True)
    manifest = {**MACHINE, "status": "incomplete", "created": "2030-01-01T00:00:00"}
    (folder / "recording.json").write_text(json.dumps(manifest))
    return folder


def test_a_refused_resume_is_a_usage_error_with_the_recorders_line(tmp_path, monkeypatch):
    monkeypatch.setenv("H2DLAB_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("H2DLAB_RESUME", "1")  # live mode resumes only when asked
    folder = _damaged_unfinished(tmp_path / "runs")
    said = []
    with pytest.raises(UsageError) as exc:
        live.live_recording(echo=said.append, machine=MACHINE)
    assert not isinstance(exc.value, Unavailable)
    assert str(exc.value) == (
        f"recording this machine was refused (h2dlab record --resume {folder} exited with 2): "
        f"{folder / 'recording.json'} is damaged (device None is not cpu, cuda or cuda:N): "
        "it cannot be resumed; record into a new folder"
    )
    assert said[0] == f"recording this machine once: h2dlab record --resume {folder}"


class _FakeRecorder:
    """A SYNTHETIC recorder process: prints ``lines`` and exits with ``rc``."""

    def __init__(self, lines, rc):
        self.stdout, self.rc = iter(lines), rc

    def __call__(self, *a, **k):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def wait(self):
        return self.rc


@pytest.mark.parametrize("rc,how", [(1, "failed"), (130, "stopped")])
def test_a_failed_recording_is_unavailable(tmp_path, monkeypatch, rc, how):
    monkeypatch.setenv("H2DLAB_RUNS", str(tmp_path / "runs"))
    lines = ["forum/ascending-1 ...\n", "h2dlab: error: CUDA error: synthetic failure\n", "\n"]
    monkeypatch.setattr(subprocess, "Popen", _FakeRecorder(lines, rc))
    with pytest.raises(Unavailable) as exc:
        live.live_recording(echo=lambda line: None, machine=MACHINE)
    text = str(exc.value)
    assert text.startswith(f"recording this machine {how} (h2dlab record --quick --out {tmp_path / 'runs'}/")
    assert f"exited with {rc}): CUDA error: synthetic failure; finish it with h2dlab record --resume " in text
    assert "H2DLAB_RESUME=1 lets live mode resume it" in text
    assert "\n" not in text and "record.log" not in text  # no log was written: none is named


def test_report_live_says_it_in_one_line(tmp_path, monkeypatch, capsys):
    """Through the command (a pretend CUDA machine): before, a RuntimeError traceback, exit 1."""
    monkeypatch.setenv("H2DLAB_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("H2DLAB_RESUME", "1")  # live mode resumes only when asked
    monkeypatch.delenv("H2DLAB_DATA", raising=False)
    folder = _damaged_unfinished(tmp_path / "runs")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(session, "this_machine", lambda: dict(MACHINE))
    rc = cli.main(["report", "--mode", "live", "--outdir", str(tmp_path / "reports")])
    out, err = capsys.readouterr()
    assert rc == 2 and "Traceback" not in err
    line = [x for x in err.splitlines() if x.startswith("h2dlab: error:")]
    assert line == [
        f"h2dlab: error: recording this machine was refused (h2dlab record --resume {folder} exited with 2): "
        f"{folder / 'recording.json'} is damaged (device None is not cpu, cuda or cuda:N): it cannot be "
        "resumed; record into a new folder"
    ]


def test_report_live_without_cuda_names_the_option_given(tmp_path, capsys):
    """`report --mode live` on a machine without CUDA said "use H2DLAB_MODE=replay", which
    --mode overrides: following it changed nothing."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the refusal on a machine without CUDA")
    assert cli.main(["report", "--mode", "live", "--outdir", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--mode replay" in err[0] and "H2DLAB_MODE" not in err[0], err
    assert not (tmp_path / "r").exists()


def test_live_mode_refuses_a_runs_variable_naming_a_file_before_recording(tmp_path, monkeypatch):
    """Live mode (report --mode live, a notebook's MODE) with H2DLAB_RUNS naming a file: it
    started `h2dlab record --quick --out FILE/<name>`, which failed, and raised a RuntimeError
    ("record exited with 2") that showed as a traceback. Now: UsageError naming the variable,
    and no recorder started."""
    import subprocess

    from h2dlab.errors import UsageError
    from h2dlab.recording import live

    (tmp_path / "afile").write_text("not a folder")
    monkeypatch.setenv("H2DLAB_RUNS", str(tmp_path / "afile"))

    def no_recorder(*a, **k):
        raise AssertionError(f"a recorder was started: {a}")

    monkeypatch.setattr(subprocess, "Popen", no_recorder)
    with pytest.raises(UsageError, match=f"H2DLAB_RUNS={tmp_path / 'afile'} names where recordings go, but"):
        live.live_recording(machine={"hostname": "synthetic-host", "gpu_name": "Synthetic GPU"})
