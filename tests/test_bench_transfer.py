"""benchmarks/bench_transfer.py on a CPU: the crossover rule on synthetic ratios, and a dry run
of the whole script (tiny sizes, fake CUDA, copies on the CPU) so that a GPU run does not die
on a typo: every section runs, the result file has its layout, the fastpath file reads back."""

from __future__ import annotations

import importlib.util
import json
import sys
import time

import pytest
import torch

from h2dlab import stager, transfer
from tests.conftest import ROOT
from tests.test_transfer import fake_cuda  # noqa: F401 - the fixture

KiB, MiB, GiB = 1024, 1024**2, 1024**3


@pytest.fixture
def bench():
    spec = importlib.util.spec_from_file_location("bench_transfer", ROOT / "benchmarks" / "bench_transfer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows(ratios):  # synthetic: {size: staged/.to() speed ratio}
    return [{"size_bytes": n, "ratio": r} for n, r in ratios.items()]


@pytest.mark.parametrize(
    ("ratios", "want"),
    [
        ({MiB: 0.9, 32 * MiB: 1.2, 64 * MiB: 2.0, GiB: 4.0}, 32 * MiB),
        ({MiB: 0.9, 32 * MiB: 1.2, 64 * MiB: 1.0, GiB: 4.0}, GiB),  # a dip above: take over only after it
        ({GiB: 4.0, MiB: 1.5, 32 * MiB: 1.04}, GiB),  # unsorted input; 1.04 < margin
        ({MiB: 2.0, GiB: 3.0}, MiB),
        ({MiB: 0.5, GiB: 0.9}, transfer.MAX_MIN_BYTES),  # never stage
    ],
)
def test_choose_min_bytes(bench, ratios, want):
    assert bench.choose_min_bytes(_rows(ratios)) == want


class _Timer:
    def __init__(self, dev):
        pass

    def __call__(self, fn):
        t0 = time.perf_counter()
        out = fn()
        return out, {"wall_ms": (time.perf_counter() - t0) * 1e3 + 1e-3, "event_ms": float("nan")}


def test_dry_run_writes_every_section(bench, fake_cuda, monkeypatch, tmp_path):  # noqa: F811
    real_empty, real_empty_like = torch.empty, torch.empty_like
    monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **k: real_empty(*a, **k))
    monkeypatch.setattr(torch, "empty_like", lambda *a, pin_memory=False, **k: real_empty_like(*a, **k))
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: self.clone())
    real_stager = stager.Stager

    def cpu_stager(dev, **k):
        s = real_stager("cuda", **k)
        s.device = torch.device("cpu")
        return s

    monkeypatch.setattr(stager, "Stager", cpu_stager)
    monkeypatch.setattr(transfer, "to_device", lambda x, dev, **k: x.clone())
    prev = transfer.fastpath()
    staging = sys.modules["bench_staging"]
    monkeypatch.setattr(staging, "DEV", torch.device("cpu"))
    monkeypatch.setattr(staging, "STREAM_BYTES", 256 * KiB)
    for name, value in {
        "DEV": torch.device("cpu"),
        "Timer": _Timer,
        "collect_env": lambda argv=None: {"gpu_name": "none (CPU dry run)", "command": "dry run"},
        "TUNE_SIZES": (256 * KiB, 512 * KiB),
        "TIMELINE_BYTES": 256 * KiB,
        "BOUND_SIZES": (256 * KiB, MiB),
        "REPEATED": ((64 * KiB, 3), (MiB, 2)),
    }.items():
        monkeypatch.setattr(bench, name, value)
    out, fp = tmp_path / "r" / "fake.json", tmp_path / "fastpath.json"
    argv = ["--out", str(out), "--fastpath", str(fp), "--min", "1KiB", "--max", "1MiB", "--reps-small", "5"]
    try:
        assert bench.main([*argv, "--others", "pin_then_to,pinned_reuse"]) == 0
    finally:
        transfer.use_fastpath(prev)
    res = json.loads(out.read_text())
    assert set(res) >= {"env", "tuning", "crossover", "settings", "rows", "fastpath_overhead_us", "bounds",
                        "repeated", "timeline_256MiB", "ceilings", "targets", "elapsed_s"}  # fmt: skip
    sizes = [2**k for k in range(10, 21)]
    for m in ("to", "to_device", "pin_then_to", "pinned_reuse"):
        got = sorted(r["size_bytes"] for r in res["rows"] if r["method"] == m)
        assert got == sizes, m
    assert all(r["reps"] >= 5 and r["ms_q25"] <= r["ms_median"] <= r["ms_q75"] for r in res["rows"])
    assert [b["size_bytes"] for b in res["bounds"]] == [256 * KiB, MiB]
    b = res["bounds"][0]
    assert (
        b["upper_gbps"] == min(b["host_alone_gbps"], b["dma_alone_gbps"])
        and b["lower_gbps"] == b["host_under_dma_gbps"]
    )
    assert {r["method"] for r in res["repeated"]} >= {"to", "to_device", "pin_then_to", "stager"}
    t = res["timeline_256MiB"]
    assert sum(c["bytes"] for c in t["chunks"]) == 256 * KiB
    assert all(
        c["wait_start_ms"] <= c["copy_start_ms"] <= c["copy_end_ms"] <= c["queued_ms"] for c in t["chunks"]
    )
    settings = transfer.read_fastpath(fp)
    assert settings["min_bytes"] == res["crossover"]["min_bytes"] == res["settings"]["min_bytes"]
    assert settings["measured_on"]["gpu_name"] == "none (CPU dry run)"
    assert {t["what"] for t in res["targets"]} >= {"to_device / .to() speed, whole grid (min)"}


def test_refuses_bad_arguments(bench, capsys):
    assert bench.main(["--max", "lots"]) == 2
    assert bench.main(["--reps-large", "2"]) == 2
    err = capsys.readouterr().err
    assert "bench_transfer:" in err and "Traceback" not in err


def test_pick_takes_huge_pages_only_when_clearly_faster(bench):
    rows = [  # synthetic tuning rows
        {"threads": 8, "chunk_bytes": MiB, "huge_pages": False, "gbps_median": 30.0},
        {"threads": 16, "chunk_bytes": MiB, "huge_pages": False, "gbps_median": 32.0},
        {"threads": 16, "chunk_bytes": MiB, "huge_pages": True, "gbps_median": 32.5},
    ]
    assert bench.pick(rows) == rows[1]
    rows[2]["gbps_median"] = 33.0
    assert bench.pick(rows) == rows[2]
    assert bench.pick(rows[:2]) == rows[1]
