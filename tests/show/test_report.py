"""report.build and session.resolve_mode: the caller's environment is left as it was."""

import os
import re

import pytest
import torch

from h2dlab.errors import UsageError
from h2dlab.recording.session import MODES, resolve_mode
from h2dlab.show import report


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_build_refuses_live_without_cuda_and_leaves_os_environ_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("H2DLAB_MODE", raising=False)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    before = dict(os.environ)
    with pytest.raises(UsageError, match="live mode needs CUDA"):
        report.build(outdir=tmp_path, mode="live")
    assert dict(os.environ) == before


def test_resolve_mode_reads_the_given_environment(monkeypatch):
    monkeypatch.setenv("H2DLAB_MODE", "live")
    assert resolve_mode("auto", {"H2DLAB_MODE": "replay"}) == "replay"
    assert resolve_mode("replay", {}) == "replay"
    with pytest.raises(UsageError, match="unknown mode 'fast': use auto, replay, live"):
        resolve_mode("auto", {"H2DLAB_MODE": "fast"})
    assert MODES == ("auto", "replay", "live")


TINY = """# %% [markdown]
# # Tiny

# %%
import os
import h2dlab
print("kernel pid", os.getpid(), "data", os.environ.get("H2DLAB_DATA"), "kit", h2dlab.__file__)
"""


@pytest.fixture
def tiny_root(tmp_path, monkeypatch):
    """A checkout whose only notebook prints its kernel's pid (the workbook left out)."""
    (tmp_path / "root" / "notebooks").mkdir(parents=True)
    (tmp_path / "root" / "notebooks" / "tiny.py").write_text(TINY)
    monkeypatch.setattr(report, "ROOT", tmp_path / "root")
    monkeypatch.setattr(report, "workbook", lambda path, data: path)
    monkeypatch.delenv("H2DLAB_MODE", raising=False)
    monkeypatch.delenv("H2DLAB_DATA", raising=False)
    return tmp_path


def _kernel_output(out):

    html = (out / "tiny.html").read_text()
    found = re.search(r"kernel pid (\d+) data (\S+) kit (\S+)", html)
    assert found, "the notebook's output is not in its page"
    return int(found.group(1)), found.group(2), found.group(3)


def test_build_shuts_each_kernel_down_and_writes_its_wall_times(tiny_root, capsys):
    import json
    from pathlib import Path

    out = tiny_root / "out"
    assert report.build(outdir=out, notebooks=["tiny"]) == 0
    pid, data, kit = _kernel_output(out)
    assert not Path(f"/proc/{pid}").exists(), "the notebook's kernel outlived report.build"
    assert (
        data == "None"
        and Path(kit).resolve() == Path(report.__file__).resolve().parent.parent / "__init__.py"
    )
    timing = json.loads((out / report.TIMING).read_text())
    assert timing["mode"] == "replay" and timing["record_s"] is None and timing["failed"] is None
    assert set(timing["notebooks"]) == {"tiny"} and 0 < timing["notebooks"]["tiny"] <= timing["total_s"]
    assert timing["workbook_s"] is not None and timing["started"] <= timing["finished"]
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"h2dlab report: {timing['total_s']:.0f} s end to end (replay; notebooks ")


def test_live_build_times_the_recording_and_hands_it_to_every_kernel(tiny_root, monkeypatch, capsys):
    """Live mode without a GPU: the recording step is a stand-in that takes 1.5 s."""
    import json
    import time
    from pathlib import Path

    from h2dlab.recording import session

    folder = tiny_root / "box-rec"
    folder.mkdir()

    def recording(data, mode, environ=None):
        time.sleep(1.5)
        return type("Rec", (), {"folder": folder, "made_now": True})()

    monkeypatch.setattr(report, "resolve_mode", lambda mode, env=None: "live")
    monkeypatch.setattr(session, "recording", recording)
    out = tiny_root / "out"
    assert report.build(outdir=out, mode="live", notebooks=["tiny"]) == 0
    pid, data, _ = _kernel_output(out)
    assert data == str(folder) and not Path(f"/proc/{pid}").exists()
    timing = json.loads((out / report.TIMING).read_text())
    assert timing["mode"] == "live" and 1.5 <= timing["record_s"] <= timing["total_s"]
    assert re.search(r"end to end \(live; recording this machine \d+ s, notebooks", capsys.readouterr().err)


def test_a_failed_notebook_is_named_without_terminal_colours(tmp_path, capsys, monkeypatch):
    """The failure line quoted the kernel's coloured traceback: '\\x1b[31mValueError\\x1b[39m'."""
    import nbclient
    from nbclient.exceptions import CellExecutionError

    from h2dlab.show import report

    def fail(self, **kw):
        tb = "Cell In[3], line 1\n\x1b[31mValueError\x1b[39m: synthetic failure"  # as nbclient words it
        raise CellExecutionError(tb, "ValueError", "synthetic failure")

    monkeypatch.setattr(nbclient.NotebookClient, "execute", fail)
    assert report.build(outdir=tmp_path, notebooks=["05-explore"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "\x1b" not in err and "failed (ValueError: synthetic failure)" in err, err
