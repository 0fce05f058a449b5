"""``h2dlab record --quick`` on a GPU: completes within its budget and leaves a whole
recording that ``session.recording`` reads (run: pytest -q -m cuda tests/gpu/test_record.py -s)."""

import os
import subprocess
import sys
import time

import torch

from h2dlab import datasets, session
from h2dlab.record_plan import experiments, read_manifest
from tests.conftest import ROOT


def test_record_quick_completes_and_the_folder_is_whole(tmp_path):
    folder = tmp_path / "quick"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.time()
    p = subprocess.run(
        [sys.executable, "-m", "h2dlab.cli", "record", "--quick", "--out", str(folder)],
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
    reg = rec.env("allocator", "pin-register-warm")
    assert reg["PYTORCH_CUDA_ALLOC_CONF"].startswith("pinned_use_cuda_host_register:True")
    assert rec.env("allocator", "pin-warm").get("PYTORCH_CUDA_ALLOC_CONF") is None
    assert datasets.read(folder / "forum" / "ascending-1.csv.gz")["t_s"].max() > 0
    assert took <= 180, f"record --quick took {took:.0f} s, over its 3-minute budget"
