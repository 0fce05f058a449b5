"""Live mode resumes an unfinished recording only when asked (issue #35).

Before: a notebook in live mode resumed the newest unfinished recording of this machine it
found in the runs folder, without asking, so a recording.json planted there was run. Now it
says, in one line, how to finish it (``h2dlab record --resume``) and starts nothing, unless
``H2DLAB_RESUME=1`` (or ``resume=True``) asks for it. Machines here are SYNTHETIC.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from h2dlab.errors import UsageError
from h2dlab.recording import live

MACHINE = {"hostname": "synthetic-host", "gpu_name": "Synthetic GPU", "gpu_count": 1}


def _unfinished(runs):
    folder = runs / "synthetic-host-synthetic-gpu-2030-01-01"
    folder.mkdir(parents=True)
    (folder / "recording.json").write_text(json.dumps({**MACHINE, "status": "incomplete", "created": "2030"}))
    return folder


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("H2DLAB_RUNS", str(tmp_path / "runs"))
    monkeypatch.delenv("H2DLAB_RESUME", raising=False)
    started = []

    def recorder(cmd, **kw):
        started.append(cmd)
        raise AssertionError("a recorder was started")

    monkeypatch.setattr(subprocess, "Popen", recorder)
    return tmp_path / "runs", started


@pytest.mark.parametrize("value", [None, "", "0", "yes", "true "])
def test_an_unfinished_recording_is_not_resumed_unasked(runs, monkeypatch, value):
    root, started = runs
    if value is not None:
        monkeypatch.setenv("H2DLAB_RESUME", value)
    folder = _unfinished(root)
    with pytest.raises(UsageError) as exc:
        live.live_recording(echo=lambda line: None, machine=MACHINE)
    assert started == []
    assert str(exc.value) == (
        f"an unfinished recording of this machine is in {folder}: finish it with "
        f"`h2dlab record --resume {folder}` (or set H2DLAB_RESUME=1 to let live mode resume it), "
        "or move it out of the runs folder to record anew"
    )


@pytest.mark.parametrize("how", ["env", "argument"])
def test_it_is_resumed_when_asked(runs, monkeypatch, how):
    root, started = runs
    folder = _unfinished(root)
    if how == "env":
        monkeypatch.setenv("H2DLAB_RESUME", "1")
    with pytest.raises(AssertionError, match="a recorder was started"):
        live.live_recording(
            echo=lambda line: None, machine=MACHINE, resume=True if how == "argument" else None
        )
    assert started and started[0][-2:] == ["--resume", str(folder)]


def test_resume_false_wins_over_the_variable(runs, monkeypatch):
    root, started = runs
    _unfinished(root)
    monkeypatch.setenv("H2DLAB_RESUME", "1")
    with pytest.raises(UsageError, match="an unfinished recording"):
        live.live_recording(echo=lambda line: None, machine=MACHINE, resume=False)
    assert started == []
