"""The harness on the CPU: plans, size parsing, rows, a seeded fake clock, failures."""

import itertools

import numpy as np
import pytest
import torch

from h2dlab.errors import UsageError
from h2dlab.measure import strategies
from h2dlab.measure.concurrent import concurrent, parse_gpus
from h2dlab.measure.device import resolve_device
from h2dlab.measure.harness import sweep
from h2dlab.measure.plan import plan_sweep
from h2dlab.measure.spec import SweepSpec
from h2dlab.measure.timing import CudaFault
from h2dlab.recording import datasets
from h2dlab.units import parse_size, parse_sizes


def test_parse_size_units():
    assert parse_size("1KiB") == 1024
    assert parse_size("64MiB") == 64 * 2**20
    assert parse_size("1.5KiB") == 1536
    assert (
        parse_size("2GiB") == 2 * 2**30
    )  # decimal units (2GB) are refused: tests/project/test_sizes_binary.py
    assert parse_size("4096") == 4096


@pytest.mark.parametrize("bad", ["12QB", "0", "-1KiB", "", "KiB", "1.3B", "1..2..3"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError):
        parse_sizes(bad)


def test_parse_sizes_ranges_and_forum():
    assert parse_sizes("1KiB..8KiB") == [1024, 2048, 4096, 8192]
    assert parse_sizes("3KiB..8KiB") == [3072, 4096, 8192]
    assert parse_sizes("8KiB,1KiB,8KiB") == [1024, 8192]
    forum = parse_sizes("forum")
    assert len(forum) == 210 and forum[0] == 24 * 2 * 4096 * 2 and forum[-1] == 24 * 2 * 1046 * 4096 * 2
    with pytest.raises(ValueError, match="backwards"):
        parse_sizes("1GiB..1KiB")


def test_plan_is_seeded_and_complete():
    a = plan_sweep(["pageable", "staged"], [1024, 2048, 4096], reps=3, warmup=1, seed=7)
    b = plan_sweep(["pageable", "staged"], [1024, 2048, 4096], reps=3, warmup=1, seed=7)
    c = plan_sweep(["pageable", "staged"], [1024, 2048, 4096], reps=3, warmup=1, seed=8)
    assert a == b and a != c
    assert len(a) == 2 * 3 * 4
    assert [r["order"] for r in a] == list(range(24))
    # Within a cell: warm-up first, then reps 0..2, consecutively.
    cell = [(r["warmup"], r["rep"]) for r in a[:4]]
    assert cell == [(True, 0), (False, 0), (False, 1), (False, 2)]
    asc = plan_sweep(["pageable"], [4096, 1024], reps=1, warmup=0, order="ascending")
    assert [r["size_bytes"] for r in asc] == [1024, 4096]


def test_reps_large_applies_from_one_gib():
    p = plan_sweep(["pageable"], [2**20, 2**30], reps=10, warmup=0, reps_large=3, order="ascending")
    assert sum(r["size_bytes"] == 2**30 for r in p) == 3 and sum(r["size_bytes"] == 2**20 for r in p) == 10


def test_cpu_sweep_rows_with_fake_clock(tmp_path):
    ticks = itertools.count(0, 0.001)  # every clock read advances 1 ms: wall_ms is exactly 1
    spec = SweepSpec(("pageable", "pin_then_copy"), (1024, 4096), device="cpu", reps=3, warmup=1, seed=1)
    df = sweep(
        spec,
        out=tmp_path / "r.csv",
        progress=False,
        clock=lambda: next(ticks),
    )
    assert list(df.columns) == list(datasets.COLUMNS)
    assert len(df) == 16 and df["run_id"].nunique() == 1
    ok = df[df.strategy == "pageable"]
    assert (ok["error"] == "").all()
    assert np.allclose(ok["wall_ms"], 1.0)
    assert ok["event_ms"].isna().all() and ok["host_allocs"].isna().all()
    assert ok["warmup"].sum() == 2
    pin = df[df.strategy == "pin_then_copy"]
    assert pin["error"].str.contains("needs CUDA").all() and pin["wall_ms"].isna().all()
    back = datasets.read(tmp_path / "r.csv")
    assert back.attrs["env"]["spec"]["strategies"] == ["pageable", "pin_then_copy"]
    assert back.attrs["env"]["measured_rows"] == 16
    assert not (tmp_path / "r.csv.partial.csv").exists()


def test_cpu_copy_is_a_real_copy():
    x = torch.arange(100, dtype=torch.uint8)
    s = strategies.get("pageable")
    s.prepare(x, torch.device("cpu"))
    y = s.copy(x)
    assert torch.equal(y, x) and y.data_ptr() != x.data_ptr()


def test_sizes_must_fit_dtype():
    with pytest.raises(UsageError, match="multiple"):
        SweepSpec(("pageable",), (1023,), device="cpu", dtype="float32")


def test_refuses_size_larger_than_memory():
    with pytest.raises(UsageError, match="host memory"):
        sweep(SweepSpec(("pageable",), (2**50,), device="cpu"), progress=False)


def test_no_cuda_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(UsageError, match="device cpu"):
        resolve_device("cuda")


def test_registry_names_and_unknown():
    assert {
        "pageable",
        "pageable_non_blocking",
        "pin_then_copy",
        "pinned_reuse",
        "host_register",
        "staged",
    } <= set(strategies.names())
    with pytest.raises(KeyError, match="choose from"):
        strategies.get("teleport")


def test_concurrent_two_processes_on_cpu(tmp_path):
    """The multi-GPU code path (one process per device, a barrier per cell), run with two
    CPU processes: rows from both, with gpu and world columns, one table."""
    out = tmp_path / "c.csv"
    spec = SweepSpec(("pageable",), (4096, 65536), device="cpu", reps=3, warmup=1)
    df = concurrent(spec, gpus="1..2", out=out)
    back = datasets.read(out)
    assert len(back) == len(df) == (1 + 2) * 2 * 4
    counts = back.groupby(["world", "gpu"]).size().to_dict()
    assert counts == {(1, 0): 8, (2, 0): 8, (2, 1): 8}
    assert back["run_id"].nunique() == 1 and (back["error"] == "").all()
    assert back.attrs["env"]["spec"]["worlds"] == [1, 2]


def test_parse_gpus():
    assert parse_gpus("all", 4) == ([0, 1, 2, 3], [4])
    assert parse_gpus("1..2", 2) == ([0, 1], [1, 2])
    assert parse_gpus("0,1", 2) == ([0, 1], [2])
    with pytest.raises(UsageError, match="no device 2"):
        parse_gpus("0,2", 2)
    with pytest.raises(UsageError, match="cannot read"):
        parse_gpus("two", 2)


def test_interleaved_plan_spreads_reps_over_time():
    p = plan_sweep(["pageable", "staged"], [1024, 2048, 4096], reps=4, warmup=1, order="interleaved", seed=3)
    assert len(p) == 6 * 5
    assert all(r["warmup"] for r in p[:6]) and not any(r["warmup"] for r in p[6:])
    # Each round of 6 timed rows visits every cell once, with rep == round number.
    for k in range(4):
        rnd = p[6 + 6 * k : 12 + 6 * k]
        assert {(r["strategy"], r["size_bytes"]) for r in rnd} == {
            (s, n) for s in ("pageable", "staged") for n in (1024, 2048, 4096)
        }
        assert {r["rep"] for r in rnd} == {k}
    # Two consecutive timed rows can share a cell only across a round boundary (3 here).
    same = sum(
        a["size_bytes"] == b["size_bytes"] and a["strategy"] == b["strategy"]
        for a, b in zip(p[6:], p[7:], strict=False)
    )
    assert same <= 3


def test_interleaved_cpu_sweep(tmp_path):
    out = tmp_path / "i.csv"
    spec = SweepSpec(("pageable",), (1024, 4096, 16384), device="cpu", reps=3, warmup=1, order="interleaved")
    df = sweep(
        spec,
        out=out,
        progress=False,
    )
    assert len(df) == 12 and (df["error"] == "").all()
    assert df.groupby("size_bytes").size().tolist() == [4, 4, 4]


class _Failing(strategies.Strategy):
    """Synthetic: a host copy that fails on chosen calls with a chosen error."""

    name = "failing_test_only"
    needs_cuda = False
    calls = 0
    fail_on: dict = {}

    def copy(self, x):
        type(self).calls += 1
        exc = type(self).fail_on.get(type(self).calls)
        if exc is not None:
            raise exc
        return x.clone()


@pytest.fixture
def failing(monkeypatch):
    monkeypatch.setitem(strategies.REGISTRY, _Failing.name, _Failing)
    _Failing.calls = 0
    return _Failing


def test_oom_is_a_row_and_the_sweep_goes_on(tmp_path, failing):
    failing.fail_on = {2: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")}
    spec = SweepSpec((failing.name,), (1024, 2048), device="cpu", reps=3, warmup=0, order="ascending")
    df = sweep(spec, out=tmp_path / "o.csv", progress=False)
    assert len(df) == 6
    errors = df["error"].tolist()
    # The failing copy and the rest of its cell carry the error; the next cell is measured.
    assert errors[0] == "" and errors[1].startswith("OOM: CUDA out of memory") and errors[2] == errors[1]
    assert errors[3:] == ["", "", ""] and df["wall_ms"].iloc[3:].notna().all()


@pytest.mark.parametrize(
    "message",
    [
        "CUDA error: an illegal memory access was encountered",
        "CUDA error: device-side assert triggered",
        "cudaErrorLaunchFailure: unspecified launch failure",
    ],
)
def test_cuda_fault_stops_the_sweep_and_keeps_the_rows(tmp_path, failing, message):
    failing.fail_on = {3: RuntimeError(message)}
    out = tmp_path / "f.csv"
    spec = SweepSpec((failing.name,), (1024, 2048), device="cpu", reps=3, warmup=0, order="ascending")
    with pytest.raises(CudaFault, match="3 of 6 rows kept") as info:
        sweep(spec, out=out, progress=False)
    assert message.split(":")[0] in str(info.value)
    kept = datasets.read(out)
    assert len(kept) == 3 and kept["error"].tolist()[:2] == ["", ""]
    assert kept["error"].iloc[2].startswith("RuntimeError: ") and message in kept["error"].iloc[2]
    assert failing.calls == 3  # nothing ran after the fault
    assert not (tmp_path / "f.csv.partial.csv").exists()


def test_other_runtime_error_is_a_row(tmp_path, failing):
    failing.fail_on = {1: RuntimeError("pin_memory is not supported here")}
    spec = SweepSpec((failing.name,), (1024, 2048), device="cpu", reps=2, warmup=0, order="ascending")
    df = sweep(spec, progress=False)
    assert df["error"].tolist() == ["RuntimeError: pin_memory is not supported here"] * 2 + ["", ""]


def test_a_bug_in_a_strategy_propagates(failing):
    failing.fail_on = {1: TypeError("a bug")}
    with pytest.raises(TypeError, match="a bug"):
        sweep(SweepSpec((failing.name,), (1024,), device="cpu", reps=1, warmup=0), progress=False)
