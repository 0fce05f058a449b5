"""The recipes on a GPU: each script runs as pasted, its buffers are pinned once and reused,
the data arrives intact; the workload experiment runs every way without an error."""

import subprocess
import sys

import pytest
import torch

from h2dlab import recipes
from h2dlab.recording import datasets
from tests.conftest import ROOT, run_cli

DEV = "cuda"


@pytest.mark.parametrize("name", list(recipes.RECIPES))
def test_recipe_script_runs_as_pasted_on_the_gpu(name):
    p = subprocess.run(
        [sys.executable, str(recipes.path(name))], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "cuda" in p.stdout, p.stdout


def _host_allocs() -> int:
    return int(torch.cuda.host_memory_stats().get("num_host_alloc", 0))


def test_pinned_buffer_is_pinned_once_and_each_step_s_batch_arrives():
    r = recipes.load("pinned_buffer")
    buf = r.PinnedBuffer((64, 3, 224, 224), torch.float32, DEV)
    assert buf.host.is_pinned() and buf.gpu.device.type == "cuda"
    allocs = []
    for step in range(8):
        batch = torch.full((64, 3, 224, 224), float(step))
        x = buf.send(batch)
        assert float((x * 2).sum()) == 2 * step * batch.numel()  # read on the same stream, after the copy
        allocs.append(_host_allocs())
    # No pinning inside the loop. The count is taken from the first step on: reading a CUDA
    # scalar (float(), .item()) makes one pinned block of its own the first time (seen on the
    # H200, torch 2.11: 1 -> 2 over the first step), which is PyTorch's, not the recipe's.
    assert allocs[1:] == [allocs[0]] * 7, allocs


def test_dataloader_yields_pinned_batches_that_arrive_with_their_labels():
    r = recipes.load("dataloader")
    images, labels = torch.randn(64, 3, 8, 8), torch.arange(64)
    loader = r.make_loader(torch.utils.data.TensorDataset(images, labels), 16, DEV, num_workers=2)
    assert loader.pin_memory
    seen = []
    for b in loader:
        assert all(t.is_pinned() for t in b)
        x, y = r.to_device(b, DEV)
        assert x.is_cuda and torch.equal(x.cpu(), images[y.cpu()])
        seen += y.tolist()
    assert sorted(seen) == list(range(64))


def test_prefetcher_copies_on_its_side_stream_and_each_step_sees_its_batch():
    r = recipes.load("prefetch")
    host = [torch.full((256, 1024, 64), float(i), pin_memory=True) for i in range(6)]  # 64 MiB each
    pf = r.Prefetcher(host, DEV)
    assert pf.stream is not None and pf.stream != torch.cuda.current_stream()
    for i, x in enumerate(pf):
        whole = bool((x == float(i)).all())  # a kernel on the main stream: it must see the whole batch
        assert x.is_cuda and whole
    assert i == 5


def test_many_tensor_ways_deliver_every_tensor_and_packing_pins_once():
    mt = recipes.load("many_tensors")
    tensors = [torch.randn(3, 32, 32) for _ in range(64)] + [
        torch.arange(64),
        torch.ones(5, dtype=torch.float16),
    ]
    sender = mt.PackedSender(tensors, DEV)
    assert sender.host.is_pinned()
    before = _host_allocs()
    for _ in range(3):
        got = sender.send(tensors)
        assert all(g.is_cuda and torch.equal(g.cpu(), t) for g, t in zip(got, tensors, strict=True))
    assert _host_allocs() == before
    pinned = [t.pin_memory() for t in tensors]
    outs = [torch.empty_like(t, device=DEV) for t in tensors]
    for got in (
        mt.loop_to(tensors, DEV),
        mt.pin_each_then_copy(tensors, DEV),
        mt.foreach_pinned_beforehand(pinned, outs),
    ):
        torch.cuda.synchronize()
        assert all(torch.equal(g.cpu(), t) for g, t in zip(got, tensors, strict=True))
    if mt.tensordict_available():
        pytest.skip(mt.tensordict_available())
    assert all(torch.equal(g.cpu(), t) for g, t in zip(mt.tensordict_to(tensors, DEV), tensors, strict=True))


def test_results_come_back_into_one_pinned_buffer():
    r = recipes.load("results_to_host")
    back = r.ResultsToHost((64, 1000), torch.float32, DEV)
    assert back.host.is_pinned()
    for step in range(5):
        y = torch.full((64, 1000), float(step), device=DEV) * 2
        back.start(y)
        assert torch.equal(back.get(), torch.full((64, 1000), 2.0 * step))


def test_workload_runs_every_way_on_the_gpu_without_an_error(tmp_path):
    out = tmp_path / "w.csv.gz"
    p = run_cli(
        "workload", "--steps", "3", "--warmup", "12", "--passes", "1", "--out", str(out), "--no-progress"
    )
    assert p.returncode == 0, p.stderr[-2000:]
    df = datasets.load(out)
    assert (df["error"] == "").all(), df.loc[df["error"] != "", ["strategy", "error"]].head()
    assert df["event_ms"].notna().all() and (df["event_ms"] > 0).all()
    spec = df.attrs["envs"][df["run_id"].iloc[0]]["spec"]
    assert spec["matmuls"] >= 1 and spec["shape"] == [64, 3, 224, 224]
    resident = df[(df["strategy"] == "resident") & ~df["warmup"]]["event_ms"].median()
    assert 0.5 * 4.5 < resident < 4 * 4.5  # the calibrated compute is near its 4.5 ms target
