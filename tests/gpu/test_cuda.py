"""Correctness on a real GPU: every strategy bytewise, timings consistent, the fast path
equal to .to(), pinning in place, the forum protocol's counters, OOM rows kept."""

import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch

from h2dlab.measure import strategies
from h2dlab.measure.harness import sweep
from h2dlab.measure.overlap import SCENARIOS, overlap
from h2dlab.measure.spec import OverlapSpec, SweepSpec
from h2dlab.recording import datasets
from tests.conftest import ROOT, run_cli
from tests.gpu.tensors import rand_tensor, same_bytes

MiB = 1024**2
DTYPES = [torch.uint8, torch.float16, torch.bfloat16, torch.float32, torch.int64, torch.bool]


@pytest.mark.parametrize("name", strategies.names())
@pytest.mark.parametrize("nbytes", [1024, 3 * MiB + 4096, 64 * MiB])
def test_every_strategy_is_bytewise_correct(name, nbytes):
    x = rand_tensor((nbytes,), torch.uint8, seed=nbytes)
    s = strategies.get(name)
    s.prepare(x, torch.device("cuda", 0))
    y = s.copy(x)
    torch.cuda.synchronize()
    assert y.device.type == "cuda"
    assert same_bytes(y, x)
    s.cleanup()


def test_sweep_rows_and_event_vs_host_clock(tmp_path):
    out = tmp_path / "s.csv"
    spec = SweepSpec(("pinned_reuse", "pageable"), (64 * MiB,), device="cuda", reps=15, warmup=2)
    df = sweep(spec, out=out, progress=False)
    assert len(df) == 2 * 17 and (df["error"] == "").all()
    timed = df[~df["warmup"]]
    # The host clock encloses the events (launch before, synchronisation after), so it
    # reads a little more on every row, and never a millisecond more.
    assert (timed["wall_ms"] >= timed["event_ms"] * 0.999).all()
    assert ((timed["wall_ms"] - timed["event_ms"]) < 1.0).all()
    pg = timed[timed.strategy == "pageable"]  # several ms per copy: the clocks agree within 5 %
    assert abs(pg.wall_ms.median() - pg.event_ms.median()) / pg.wall_ms.median() < 0.05
    # pinned_reuse reuses its buffers: no new pinned block and no cudaMalloc per copy.
    pr = timed[timed.strategy == "pinned_reuse"]
    assert (pr["host_allocs"] == 0).all() and (pr["device_allocs"] == 0).all()
    env = datasets.read_env(out)  # the fingerprint beside the table (named after the whole file name)
    assert env["gpu_name"] and env["cuda_available"]


def test_empty_cache_forces_device_alloc():
    df = sweep(
        SweepSpec(("pageable",), (32 * MiB,), device="cuda", reps=4, warmup=1, empty_cache=True),
        progress=False,
    )
    assert (df.loc[~df.warmup, "device_allocs"] >= 1).all()
    df2 = sweep(SweepSpec(("pageable",), (32 * MiB,), device="cuda", reps=4, warmup=1), progress=False)
    assert (df2.loc[~df2.warmup, "device_allocs"] == 0).all()


# to_device, the Stager and pinned(): tests/gpu/test_transfer.py


def test_forum_protocol_counters(tmp_path):
    # A fresh process, so that the first pin_memory() starts CUDA as in the forum.
    r = run_cli("forum", "--seqs", "1,6,11,16,26", "--out", str(tmp_path / "f.csv"), "--no-progress")
    assert r.returncode == 0, r.stderr
    df = datasets.read(tmp_path / "f.csv")
    assert len(df) == 15 and (df["error"] == "").all()
    pin = df[df.strategy == "pin_memory"].sort_values("order")
    # The first pin_memory() starts CUDA: far slower by the host clock than by events.
    first = pin.iloc[0]
    assert first["wall_ms"] > 50 and first["wall_ms"] > 10 * first["event_ms"]
    # Power-of-two growth: 512 KiB, 4 MiB, 8 MiB, (8 MiB reused), 16 MiB.
    assert pin["host_allocs"].tolist() == [1, 1, 1, 0, 1]
    direct = df[df.strategy == "direct_to_cuda"]
    assert (direct["device_allocs"] >= 1).all()  # empty_cache() before each


def test_oom_row_is_kept_and_sweep_goes_on(tmp_path):
    # Cached blocks bypass the fraction check: start from an empty device cache.
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(0.001)
    try:
        df = sweep(
            SweepSpec(
                ("pageable",), (1 * MiB, 512 * MiB), device="cuda", reps=2, warmup=0, order="ascending"
            ),
            out=tmp_path / "o.csv",
            progress=False,
        )
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    assert len(df) == 4
    big = df[df.size_bytes == 512 * MiB]
    assert big["error"].str.startswith("OOM").all()
    assert (df.loc[df.size_bytes == MiB, "error"] == "").all()
    assert len(pd.read_csv(tmp_path / "o.csv")) == 4


def test_cli_bad_cuda_index(tmp_path):
    n = torch.cuda.device_count()
    r = run_cli("measure", "--device", f"cuda:{n}", "--sizes", "1KiB", "--out", str(tmp_path / "x.csv"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"no cuda:{n}" in r.stderr


def test_cli_interrupt_and_resume_on_gpu(tmp_path):
    out = tmp_path / "i.csv"
    args = [
        "measure",
        "--device",
        "cuda",
        "--sizes",
        "256MiB",
        "--strategies",
        "pageable",
        "--reps",
        "60",
        "--warmup",
        "0",
        "--out",
        str(out),
        "--no-progress",
    ]
    p = subprocess.Popen(
        [sys.executable, "-m", "h2dlab.cli.main", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    partial = tmp_path / "i.csv.partial.csv"
    t0 = time.time()
    while time.time() - t0 < 120:
        if partial.exists() and len(partial.read_text().splitlines()) > 5:
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "--resume" in err and "Traceback" not in err
    kept = pd.read_csv(out)
    assert 4 <= len(kept) < 60 and list(kept["order"]) == list(range(len(kept)))
    r = run_cli(*args, "--resume")
    assert r.returncode == 0, r.stderr
    done = pd.read_csv(out)
    assert list(done["order"]) == list(range(60))
    assert done["run_id"].nunique() == 1


def test_overlap_timelines(tmp_path):
    df = overlap(OverlapSpec(64 * MiB, reps=2))
    assert set(df.scenario) == set(SCENARIOS) and len(df) == 2 * 3 * 2
    assert (df.end_ms > df.start_ms).all()
    w = df[df.rep == 1].set_index(["scenario", "op"])
    # On one stream the compute starts after the copy ends; on two streams with a
    # pinned source it starts before the copy ends.
    assert (
        w.loc[("serial_pinned", "compute"), "start_ms"] >= w.loc[("serial_pinned", "copy"), "end_ms"] - 0.01
    )
    assert w.loc[("overlap_pinned", "compute"), "start_ms"] < w.loc[("overlap_pinned", "copy"), "end_ms"]


FAULT_SCRIPT = """
import sys
import torch
from h2dlab import strategies
from h2dlab.measure.harness import sweep
from h2dlab.measure.spec import SweepSpec
from h2dlab.measure.timing import CudaFault


@strategies.register
class Assert(strategies.Strategy):
    name = "assert_test_only"
    calls = 0

    def copy(self, x):
        type(self).calls += 1
        y = x.to(self.device)
        if type(self).calls == 3:
            y[torch.tensor([y.numel() * 8], device=self.device)]  # out of bounds: a device-side assert
        return y


try:
    sweep(SweepSpec(("assert_test_only",), (1024,), device="cuda", reps=5, warmup=0), out=sys.argv[1], progress=False)
except CudaFault as exc:
    print("FAULT", exc)
    sys.exit(3)
"""


def test_cuda_fault_stops_the_sweep_with_rows_kept(tmp_path):
    """A device-side assert poisons the context: the sweep stops at once, keeps its rows
    (the failing copy's row records the error) and raises CudaFault."""
    out = tmp_path / "fault.csv"
    r = subprocess.run(
        [sys.executable, "-c", FAULT_SCRIPT, str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert r.returncode == 3, r.stdout + r.stderr
    assert "FAULT" in r.stdout and "3 of 5 rows kept" in r.stdout
    kept = datasets.read(out)
    assert len(kept) == 3 and (kept["error"].iloc[:2] == "").all()
    assert "device-side assert" in kept["error"].iloc[2] or "CUDA error" in kept["error"].iloc[2]
