"""``h2dlab survey`` on one GPU under torchrun: under a minute, every planned copy
measured, and the pinned copies of 256 MiB and 1 GiB within 3 % of the bundled H200
recording (data/h200: sweep pow2 and d2h), where this is an H200 like the recording's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from h2dlab.recording import datasets
from h2dlab.recording.session import Recorded
from h2dlab.survey.against import TOLERANCE, against_recording
from h2dlab.survey.verdicts import gpu_table

ROOT = Path(__file__).resolve().parents[2]


def test_a_one_rank_torchrun_survey_finishes_within_a_minute_and_matches_the_recording(tmp_path):
    out = tmp_path / "survey"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
         "-m", "h2dlab", "survey", "--out", str(out), "--report"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    took = time.monotonic() - t0
    assert (out / "fleet.csv.gz").exists(), done.stderr[-3000:]
    assert took < 60, f"the survey took {took:.0f} s"
    fleet = datasets.read(out / "fleet.csv.gz")
    gpus = gpu_table(fleet)
    assert gpus["status"].tolist() == ["ok"]
    assert str(gpus.at[0, "gpu_uuid"]).startswith("GPU-")
    assert (fleet["error"].fillna("") == "").all()
    assert (out / "fleet.html").exists()
    if "H200" not in torch.cuda.get_device_name(0):
        pytest.skip("the recording is an H200's: no comparison on another GPU")
    rec = Recorded("h200")
    ref = pd.concat([rec.table("sweep", "pow2-interleaved"), rec.table("d2h", "d2h")], ignore_index=True)
    table = against_recording(fleet, ref)
    checked = table[table["checked"]]
    assert len(checked) == 4, table  # h2d and d2h pinned at 256 MiB and 1 GiB
    assert ((checked["ratio"] - 1).abs() <= TOLERANCE).all(), checked
