"""report.build and session.resolve_mode: the caller's environment is left as it was."""

import os

import pytest
import torch

from h2dlab import report
from h2dlab.errors import UsageError
from h2dlab.session import MODES, resolve_mode


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
