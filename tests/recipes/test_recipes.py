"""The recipes in examples/ (loaded through h2dlab.recipes) deliver the data intact on a
CPU-only torch, where each falls back to plain copies; the files are the code that runs."""

import ast
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab import recipes
from tests.conftest import ROOT

DEV = "cpu"


def test_each_recipe_is_loaded_from_its_file_in_examples():
    for name in recipes.RECIPES:
        p = ROOT / "examples" / f"recipe_{name}.py"
        assert recipes.path(name) == p
        assert recipes.load(name).__file__ == str(p)
        assert recipes.source(name) == p.read_text()
    with pytest.raises(KeyError, match="choose from one_tensor"):
        recipes.path("nope")


def test_recipe_files_need_only_torch_so_a_reader_can_paste_them():
    allowed = {"torch", "torch.utils.data"}
    for name in recipes.RECIPES:
        tree = ast.parse(recipes.source(name))
        top = {n.module for n in tree.body if isinstance(n, ast.ImportFrom)}
        top |= {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names}
        assert top <= allowed, (name, top - allowed)
        assert ast.get_docstring(tree).count("Run: python examples/recipe_") == 1, name
        assert len(recipes.source(name).splitlines()) <= 110, name  # short enough to read


def test_every_recipe_script_runs_as_pasted_on_a_cpu_only_torch():
    code = "import runpy, sys\nfor p in sys.argv[1:]:\n    runpy.run_path(p, run_name='__main__')\n"
    paths = [str(recipes.path(n)) for n in recipes.RECIPES]
    p = subprocess.run(
        [sys.executable, "-c", code, *paths], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 6 and lines[0] == "36.8 MiB copied to cpu"
    assert lines[1] == "3 steps through one pinned buffer on cpu"
    assert lines[2] == "one epoch of 4 batches on cpu, pinned: False"


def test_one_tensor_arrives_equal():
    x = torch.randn(4, 5)
    assert torch.equal(recipes.load("one_tensor").send_once(x, DEV), x)


def test_pinned_buffer_delivers_each_step_s_batch_through_one_buffer():
    r = recipes.load("pinned_buffer")
    buf = r.PinnedBuffer((3, 4), torch.float32, DEV)
    outs = []
    for step in range(4):
        batch = torch.arange(12, dtype=torch.float32).reshape(3, 4) * (step + 1)
        x = buf.send(batch)
        assert torch.equal(x, batch)
        outs.append(x)
    assert all(o is outs[0] for o in outs)  # the one device buffer, reused
    buf.host_buffer().fill_(7.0)  # written in place, then sent without a batch
    assert torch.equal(buf.send(), torch.full((3, 4), 7.0))
    assert buf.sent is None and not buf.host.is_pinned()  # nothing to pin on a CPU


def test_dataloader_recipe_delivers_every_image_with_its_label_once():
    r = recipes.load("dataloader")
    images, labels = torch.randn(32, 2, 3), torch.arange(32)
    loader = r.make_loader(torch.utils.data.TensorDataset(images, labels), 8, DEV, num_workers=0)
    assert loader.pin_memory is False and loader.batch_size == 8
    seen = []
    for b in loader:
        x, y = r.to_device(b, DEV)
        assert isinstance(b, list) and torch.equal(x, images[y])
        seen += y.tolist()
    assert sorted(seen) == list(range(32))
    t = torch.ones(2)
    assert torch.equal(r.to_device(t, DEV), t) and isinstance(r.to_device((t, t), DEV), tuple)


def test_prefetcher_yields_each_batch_once_in_order():
    r = recipes.load("prefetch")
    host = [torch.full((2, 3), float(i)) for i in range(5)]
    got = list(r.Prefetcher(host, DEV))
    assert [float(g[0, 0]) for g in got] == [0.0, 1.0, 2.0, 3.0, 4.0]
    pairs = list(r.Prefetcher([(torch.ones(1), torch.zeros(1))] * 2, DEV))
    assert len(pairs) == 2 and isinstance(pairs[0], tuple) and float(pairs[1][0]) == 1.0
    assert list(r.Prefetcher([], DEV)) == []


_DTYPES = st.sampled_from([torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(_DTYPES, st.lists(st.integers(1, 5), min_size=0, max_size=3)), min_size=1, max_size=12)
)
def test_packed_sender_returns_every_tensor_intact_whatever_its_dtype_and_shape(specs):
    mt = recipes.load("many_tensors")
    g = torch.Generator().manual_seed(len(specs))
    tensors = [(torch.rand(shape, generator=g) * 100).to(dtype) for dtype, shape in specs]
    sender = mt.PackedSender(tensors, DEV)
    for round_ in range(2):
        batch = [t + round_ if t.dtype != torch.bool else t ^ bool(round_) for t in tensors]
        got = sender.send(batch)
        assert len(got) == len(batch)
        for a, b in zip(got, batch, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def test_many_tensor_ways_agree_and_a_transposed_tensor_is_packed_right():
    mt = recipes.load("many_tensors")
    tensors = [torch.arange(6.0).reshape(2, 3).t(), torch.arange(4), torch.ones(3, dtype=torch.float16)]
    assert not tensors[0].is_contiguous()
    for got in (
        mt.loop_to(tensors, DEV),
        mt.pin_each_then_copy(tensors, DEV),
        mt.PackedSender(tensors, DEV).send(tensors),
        mt.foreach_pinned_beforehand(tensors, [torch.empty_like(t) for t in tensors]),
    ):
        assert all(torch.equal(a, b) for a, b in zip(got, tensors, strict=True))


def test_tensordict_absent_is_said_not_raised(monkeypatch):
    mt = recipes.load("many_tensors")
    monkeypatch.setitem(sys.modules, "tensordict", None)  # import now fails
    assert mt.tensordict_available().startswith("tensordict is not installed")


def test_results_to_host_gives_each_step_s_result():
    r = recipes.load("results_to_host")
    back = r.ResultsToHost((2, 3), torch.float32, DEV)
    for step in range(3):
        back.start(torch.full((2, 3), step + 0.5))
        assert torch.equal(back.get(), torch.full((2, 3), step + 0.5))
