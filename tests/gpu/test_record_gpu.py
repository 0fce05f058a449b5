"""``h2dlab record --quick`` on a GPU: completes within its budget and leaves a whole
recording that ``session.recording`` reads, with the folder's own env.json
(run: pytest -q -m cuda tests/gpu/test_record_gpu.py -s)."""

import os
import subprocess
import sys
import time

import torch

from h2dlab.recording import datasets, session
from h2dlab.recording.env import GIT_COMMIT_VAR
from h2dlab.recording.env_folder import read_folder_env
from h2dlab.recording.folder import read_manifest
from h2dlab.recording.plan import PLAN_VERSION, experiments
from tests.conftest import ROOT


def test_record_quick_completes_and_the_folder_is_whole(tmp_path):
    folder = tmp_path / "quick"
    # the kit first, then whatever else this session imports from (e.g. wheels unpacked in /tmp/site)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    t0 = time.time()
    p = subprocess.run(
        [sys.executable, "-m", "h2dlab.cli.main", "record", "--quick", "--out", str(folder)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env=env,
    )
    took = time.time() - t0
    m = read_manifest(folder)
    walls = {r["name"]: (r.get("wall_s"), r["seconds"]) for r in (m or {}).get("experiments", [])}
    print(f"\nrecord --quick took {took:.0f} s; per experiment (wall s, est. s): {walls}")
    assert p.returncode == 0, p.stderr[-3000:]
    assert m["status"] == "complete" and m["gpu_name"] == torch.cuda.get_device_name(0)
    rec = session.recording(str(folder), environ={})
    want = {(e.kind, e.run) for e in experiments(quick=True, gpus=torch.cuda.device_count())}
    assert {(k, r) for k in rec.kinds() for r in rec.runs(k)} == want
    for kind, run in want:
        if kind == "overlap":
            assert len(rec.table(kind, run)) > 0
            continue
        df = rec.table(kind, run)
        env_ = rec.env(kind, run)
        assert len(df) == env_["planned_rows"] == env_["measured_rows"], (kind, run)
        errors = df[df["error"] != ""]
        assert errors.empty, f"{kind}/{run}: {errors['error'].iloc[0] if len(errors) else ''}"
        assert env_["gpu_name"] == m["gpu_name"]
    reg = rec.env("allocator", "pin-register-emptied")
    assert reg["PYTORCH_CUDA_ALLOC_CONF"].startswith("pinned_use_cuda_host_register:True")
    assert rec.env("allocator", "pin-warm").get("PYTORCH_CUDA_ALLOC_CONF") is None
    assert datasets.read(folder / "forum" / "ascending-1.csv.gz")["t_s"].max() > 0
    # the folder's own env.json: written by the recorder before any run, GPU read from NVML
    fe = read_folder_env(folder)
    assert fe is not None, "record --quick wrote no <folder>/env.json"
    assert (fe["quick"], fe["device"], fe["plan_version"], fe["resumed"]) == (True, "cuda", PLAN_VERSION, [])
    assert fe["command"] == f"h2dlab record --quick --out {folder}"
    assert fe["hostname"] == m["hostname"] and fe["cuda_available"] is True
    assert fe["gpu_name"] == m["gpu_name"] and fe["gpu_count"] == torch.cuda.device_count()
    assert fe["gpu_memory_gib"] and fe["torch"] == torch.__version__
    assert fe["date"] <= min(rec.env(k, r)["date"] for k, r in want if k != "overlap")
    if os.environ.get(GIT_COMMIT_VAR):
        assert (fe["git_commit"], fe["git_commit_source"]) == (os.environ[GIT_COMMIT_VAR].lower(), "env")
        assert rec.env("sweep", "pow2-interleaved")["git_commit"] == fe["git_commit"]
    assert session.recording(str(folder), environ={}).folder_env() == fe
    assert took <= 180, f"record --quick took {took:.0f} s, over its 3-minute budget"
