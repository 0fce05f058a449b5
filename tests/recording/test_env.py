"""The fingerprint's commit (H2DLAB_GIT_COMMIT wins over git) and its GPU fields read
without a CUDA context (``collect_env(gpu="nvml")``, what ``h2dlab record`` writes)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch

from h2dlab.cli import main as cli
from h2dlab.recording import datasets
from h2dlab.recording import env as envmod
from h2dlab.recording.env import GIT_COMMIT_VAR, collect_env, git_commit
from tests.conftest import refused_in_one_line

ROOT = Path(__file__).resolve().parents[2]
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _head() -> str | None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or None


def test_the_variable_wins_over_git():
    assert git_commit({GIT_COMMIT_VAR: COMMIT.upper()}) == (COMMIT, "env")
    assert git_commit({GIT_COMMIT_VAR: f"  {COMMIT[:7]}\n"}) == (COMMIT[:7], "env")


def test_without_the_variable_git_is_asked():
    head = _head()
    if head is None:
        pytest.skip("not a git checkout")
    assert git_commit({}) == (head, "git")
    assert git_commit({GIT_COMMIT_VAR: ""}) == (head, "git")  # set but empty: as if unset


@pytest.mark.parametrize("bad", ["not-a-commit", "abc", "g" * 40, COMMIT + "0"])
def test_a_value_that_is_no_commit_is_refused_with_a_warning(bad):
    with pytest.warns(UserWarning, match=f"{GIT_COMMIT_VAR}=.* is not a commit"):
        commit, source = git_commit({GIT_COMMIT_VAR: bad})
    assert commit != bad.lower() and source in ("git", None)


def test_collect_env_records_the_commit_and_its_source(monkeypatch):
    monkeypatch.setenv(GIT_COMMIT_VAR, COMMIT)
    env = collect_env(gpu=False)
    assert env["git_commit"] == COMMIT and env["git_commit_source"] == "env"
    monkeypatch.delenv(GIT_COMMIT_VAR)
    head = _head()
    env = collect_env(gpu=False)
    assert env["git_commit"] == head and env["git_commit_source"] == ("git" if head else None)


def test_gpu_nvml_reads_the_gpu_without_a_cuda_context(monkeypatch):
    """A synthetic NVML GPU: the fields come from NVML; torch's context calls would fail."""

    class H:
        pass

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: H(),
        nvmlDeviceGetName=lambda h: b"Synthetic GPU",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=80 * 2**30),
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 4,
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
        nvmlSystemGetDriverVersion=lambda: "580.1",
        nvmlDeviceGetGpuMaxPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=b"00000000:3b:00.0"),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)  # starts no context either

    def context(*a, **k):
        raise AssertionError("a CUDA context was started")

    for name in ("current_device", "get_device_properties", "init", "get_device_name", "set_device"):
        monkeypatch.setattr(torch.cuda, name, context)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    env = collect_env(gpu="nvml")
    assert (env["gpu_name"], env["gpu_count"], env["gpu_memory_gib"]) == ("Synthetic GPU", 2, 80.0)
    assert (env["pcie_gen_current"], env["pcie_gen_max"], env["driver_version"]) == (4, 5, "580.1")
    assert env["cuda_available"] is True and env["gpu_index"] == 0
    assert env["gpu_pci_bus_id"] == "00000000:3B:00.0"


def test_gpu_nvml_without_nvml_leaves_the_gpu_fields_null(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    env = collect_env(gpu="nvml")
    assert env["cuda_available"] is True and env["gpu_name"] is None and env["gpu_count"] == 1
    assert env["gpu_memory_gib"] is None and env["pcie_gen_max"] is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert collect_env(gpu="nvml")["cuda_available"] is False


def test_gpu_takes_only_its_three_values():
    with pytest.raises(ValueError, match="gpu must be True, False or 'nvml'"):
        collect_env(gpu="yes")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert envmod.describe(collect_env(gpu=False)).startswith("no GPU")


def test_gpu_nvml_under_a_mig_mask_leaves_the_gpu_fields_null(monkeypatch):
    """Synthetic NVML, CUDA_VISIBLE_DEVICES naming a MIG instance: which NVML GPU it is
    cannot be told before CUDA starts, so no other GPU's name or link is recorded."""
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: object(),
        nvmlDeviceGetName=lambda h: b"Synthetic GPU",
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4f1c")
    env = collect_env(gpu="nvml")
    assert env["cuda_available"] is True and env["gpu_name"] is None and env["pcie_gen_max"] is None


def test_env_records_the_openmp_settings(monkeypatch):
    """How PyTorch's OpenMP threads wait is part of the machine's state: set ones are
    recorded as given, unset ones as None."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    env = collect_env(gpu=False)
    assert env["openmp"]["OMP_WAIT_POLICY"] == "PASSIVE" and env["openmp"]["GOMP_SPINCOUNT"] is None
    assert set(env["openmp"]) == {
        "OMP_NUM_THREADS",
        "OMP_WAIT_POLICY",
        "GOMP_SPINCOUNT",
        "KMP_BLOCKTIME",
        "OMP_PROC_BIND",
    }


def test_a_bad_commit_variable_is_one_warning_line_once(tmp_path, capsys, monkeypatch):
    """H2DLAB_GIT_COMMIT=garbage printed Python's two-line warning (file:line and the source
    line) twice per measure: once per env.json written."""
    monkeypatch.setenv("H2DLAB_GIT_COMMIT", "garbage")
    argv = ["measure", "--device", "cpu", "--no-progress", "--strategies", "pageable", "--sizes", "1KiB"]
    for _ in range(2):  # a second command in the same process warns again, once
        out = tmp_path / f"m{_}.csv"
        assert cli.main([*argv, "--reps", "1", "--out", str(out)]) == 0
        err = capsys.readouterr().err.strip().splitlines()
        assert [ln for ln in err if "garbage" in ln] == [
            "h2dlab: warning: H2DLAB_GIT_COMMIT='garbage' is not a commit (7 to 40 hex digits): ignored, asking git"
        ], err
        assert len(err) == 2 and err[1].startswith("wrote "), err


DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.mark.parametrize("version", ['"4"', "true", "4.0"])
def test_a_schema_version_that_is_no_whole_number_is_a_damaged_env_json(tmp_path, capsys, version):
    """It said 'written with table schema version '4' ... upgrade h2dlab': no newer kit wrote it."""
    src = DATA / "h200/d2h/d2h.csv.gz"
    path = tmp_path / "v.csv.gz"
    shutil.copy(src, path)
    text = datasets.env_path(src).read_text()
    datasets.env_path(path).write_text(re.sub(r'"schema_version": \d+', f'"schema_version": {version}', text))
    line = refused_in_one_line(
        ["explain", str(path)], ["schema_version", "not a whole number", "damaged"], capsys, tmp_path
    )
    assert "upgrade" not in line
