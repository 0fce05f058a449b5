"""to_device, the Stager and pinning in place on a real GPU: bytes equal to .to() for many
sizes, dtypes and views; a stager reused across calls; the threshold hand-over; errors and
non-blocking semantics; the per-chunk timeline."""

import gc
import threading

import numpy as np
import pytest
import torch

from h2dlab.transfer import fastpath as transfer
from h2dlab.transfer import stager
from tests.gpu.tensors import rand_tensor, same_bytes

KiB, MiB = 1024, 1024**2
DTYPES = [torch.uint8, torch.float16, torch.bfloat16, torch.float32, torch.int64, torch.bool, torch.complex64]


@pytest.fixture(autouse=True)
def _free_rings():
    transfer.free_ring()  # also what tests in other files left
    yield
    transfer.free_ring()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("numel", [0, 1, 4 * MiB - 1, 8 * MiB + 3, 3 * 8 * MiB, 50 * MiB + 7])
def test_to_device_equals_to(dtype, numel):
    x = rand_tensor((numel,), dtype, seed=numel)
    y = transfer.to_device(x, "cuda", min_bytes=0, chunk_bytes=8 * MiB, num_threads=4)
    assert same_bytes(y, x.to("cuda"))


@pytest.mark.parametrize(
    ("threads", "chunk"), [(1, 4 * KiB), (3, 64 * KiB + 4096), (16, 16 * MiB), (7, 5 * MiB + 1)]
)
@pytest.mark.parametrize("nbytes", [1, 4095, 4097, MiB + 1, 33 * MiB + 13, 130 * MiB + 1])
def test_staged_bytes_for_odd_sizes_threads_and_slots(threads, chunk, nbytes):
    x = rand_tensor((nbytes,), torch.uint8, seed=nbytes + threads)
    assert same_bytes(transfer.to_device(x, "cuda", min_bytes=0, chunk_bytes=chunk, num_threads=threads), x)


@pytest.mark.parametrize("shape", [(3, 5, 7), (1024, 1024, 3), (17, 1, 257, 129)])
def test_to_device_shapes_and_views(shape):
    x = rand_tensor(shape, torch.float32, seed=1)
    c = rand_tensor(shape, torch.complex64, seed=2)
    views = (
        x,
        x.transpose(0, -1),
        x[..., ::2],
        x.flip(0),
        x[1:],
        x.unsqueeze(0).expand(2, *shape),
        c.conj(),
        -c,
    )
    for view in views:
        y = transfer.to_device(view, "cuda", min_bytes=0, chunk_bytes=64 * 1024)
        assert y.shape == view.shape and y.dtype == view.dtype and y.device.type == "cuda"
        assert torch.equal(y.cpu(), view.resolve_conj().resolve_neg().contiguous())
    assert torch.equal(transfer.to_device(torch.tensor(2.5), min_bytes=0).cpu(), torch.tensor(2.5))


def test_to_device_direct_paths():
    x = rand_tensor((1000,), torch.float32)
    assert torch.equal(transfer.to_device(x, "cuda").cpu(), x)  # small: .to()
    p = x.pin_memory()
    assert torch.equal(transfer.to_device(p, "cuda", min_bytes=0).cpu(), x)
    g = x.cuda()
    assert transfer.to_device(g, "cuda", min_bytes=0).data_ptr() == g.data_ptr()
    r = x.clone().requires_grad_()
    y = transfer.to_device(r, "cuda", min_bytes=0)
    assert y.requires_grad and y.grad_fn is not None  # .to() keeps the graph
    assert transfer.ring_bytes() == 0  # none of these needed a ring
    with pytest.raises(ValueError, match="does not exist"):
        stager.Stager(f"cuda:{torch.cuda.device_count()}")


_BASE: dict = {}


def _bytes_as(nbytes, dtype, seed=0):
    """``nbytes`` random bytes (rounded down to whole elements, at least one) seen as ``dtype``:
    one random buffer, sliced, so that many sizes and dtypes cost one generation."""
    item = torch.empty((), dtype=dtype).element_size()
    numel = max(1, nbytes // item)
    if seed not in _BASE or _BASE[seed].numel() < numel * item:
        g = torch.Generator().manual_seed(seed)
        _BASE[seed] = torch.randint(0, 256, (max(numel * item, 64 * MiB),), dtype=torch.uint8, generator=g)
    raw = _BASE[seed][: numel * item]
    return (raw & 1).view(torch.bool) if dtype == torch.bool else raw.view(dtype)


def _sizes_around(fp, cap=200 * MiB):
    """Sizes that probe the settings: around the threshold, a slot and its multiples, odd."""
    c, m = fp["chunk_bytes"], fp["min_bytes"]
    sizes = {1, 4095, 4097, c - 1, c, c + 1, 3 * c + 4097, 5 * c + 13, 64 * MiB + 1, 130 * MiB + 3}
    if m < cap:
        sizes |= {m - 1, m, m + 1}
    return sorted(n for n in sizes if 0 < n <= cap)


@pytest.mark.parametrize("dtype", DTYPES)
def test_to_device_with_the_shipped_settings_every_size_and_dtype(dtype):
    """What the benchmark wrote to fastpath.json, as to_device runs it: bytes equal to .to()
    for every dtype at sizes around the threshold and the slot (non-multiples included)."""
    fp = transfer.fastpath()
    for i, n in enumerate(_sizes_around(fp)):
        x = _bytes_as(n, dtype, seed=i % 3)
        assert same_bytes(transfer.to_device(x, "cuda"), x.to("cuda")), (dtype, n)
        assert same_bytes(transfer.to_device(x, "cuda", min_bytes=0), x), (dtype, n)  # staged at any size
    if fp["min_bytes"] <= 200 * MiB:
        assert transfer.ring_bytes() == fp["threads"] * fp["slots"] * fp["chunk_bytes"]


TUNABLE = [  # settings the benchmark's tuning grid may write
    {"engine": "torch", "threads": 1, "chunk_bytes": 32 * MiB, "slots": 3, "min_step_bytes": 8 * MiB},
    {"engine": "torch", "threads": 2, "chunk_bytes": 16 * MiB, "slots": 3, "min_step_bytes": MiB},
    {"engine": "torch", "threads": 1, "chunk_bytes": 64 * MiB, "slots": 2, "min_step_bytes": 8 * MiB},
    {"engine": "numpy", "threads": 4, "chunk_bytes": 16 * MiB, "slots": 3, "min_step_bytes": 8 * MiB},
    {"engine": "torch", "threads": 1, "chunk_bytes": 32 * MiB, "slots": 3, "min_step_bytes": MiB,
     "head_split": 4, "tail_split": 1},
    {"engine": "torch", "threads": 2, "chunk_bytes": 32 * MiB, "slots": 3, "min_step_bytes": MiB,
     "head_split": 1, "tail_split": 2},
]  # fmt: skip


def _cfg_id(c):
    return (f"{c['engine']}-{c['threads']}x{c['chunk_bytes'] // MiB}x{c['slots']}"
            f"-split{c.get('head_split', 4)}{c.get('tail_split', 4)}")  # fmt: skip


@pytest.mark.parametrize("cfg", TUNABLE, ids=_cfg_id)
def test_settings_the_tuning_may_pick(cfg):
    with stager.Stager("cuda", **cfg) as st:
        assert st.nbytes == cfg["threads"] * cfg["slots"] * cfg["chunk_bytes"] and "slots=" in repr(st)
        for i, n in enumerate((1, 4097, 8 * MiB + 1, 3 * cfg["chunk_bytes"] + 4097, 130 * MiB + 3)):
            x = _bytes_as(n, torch.uint8, seed=i)
            assert same_bytes(st(x), x), n
        x = _bytes_as(100 * MiB + 5, torch.float16, seed=7).clone()
        ref = x.clone()
        y = st(x, non_blocking=True)
        x.zero_()  # every byte has left x once the call returned
        assert same_bytes(y, ref)  # random bytes as float16 hold NaNs: compared as bytes
    prev = transfer.use_fastpath({"format": 1, "min_bytes": MiB, "measured_on": {}, **cfg})
    try:
        x = _bytes_as(96 * MiB + 3, torch.int64, seed=3)
        assert same_bytes(transfer.to_device(x), x)
        assert transfer.ring_bytes() == cfg["threads"] * cfg["slots"] * cfg["chunk_bytes"]
    finally:
        transfer.use_fastpath(prev)
        transfer.free_ring()


@pytest.mark.parametrize("tail_split", stager.SPLITS)
@pytest.mark.parametrize("head_split", stager.SPLITS)
def test_to_device_bytes_equal_with_each_split(head_split, tail_split):
    """to_device with each head/tail split the tuning may write (the shipped shape: torch
    engine, 1 thread x 32 MiB x 3 slots): bytes equal to the source, and the chunks the ones
    chunk_plan gives, around 256 MiB (where the splits cut) and at odd sizes."""
    cfg = {"engine": "torch", "threads": 1, "chunk_bytes": 32 * MiB, "slots": 3, "min_step_bytes": MiB,
           "head_split": head_split, "tail_split": tail_split}  # fmt: skip
    prev = transfer.use_fastpath({"format": 1, "min_bytes": MiB, "measured_on": {}, **cfg})
    try:
        for i, n in enumerate((8 * MiB + 1, 64 * MiB + 3, 256 * MiB, 256 * MiB + 4097)):
            x = _bytes_as(n, torch.float32 if n % 4 == 0 else torch.uint8, seed=i % 3)
            assert same_bytes(transfer.to_device(x, "cuda"), x), n
    finally:
        transfer.use_fastpath(prev)
        transfer.free_ring()
    x = _bytes_as(256 * MiB + 4097, torch.uint8, seed=5)
    with stager.Stager("cuda", **cfg) as st:
        st.timeline = []
        assert same_bytes(st(x, non_blocking=True), x)
        (t,) = st.timeline
    want = stager.chunk_plan(x.nbytes, 1, 32 * MiB, MiB, head_split=head_split, tail_split=tail_split)
    assert sorted(c["offset"] for c in t["chunks"]) == want[:-1]


def test_threshold_hand_over():
    prev = transfer.use_fastpath(
        {"format": 1, "min_bytes": 8 * MiB, "threads": 4, "chunk_bytes": 4 * MiB, "measured_on": {}}
    )
    try:
        transfer.free_ring()
        below = rand_tensor((8 * MiB - 1,), torch.uint8, seed=5)
        assert same_bytes(transfer.to_device(below), below)
        assert transfer.ring_bytes() == 0  # handed to .to()
        at = rand_tensor((8 * MiB,), torch.uint8, seed=6)
        assert same_bytes(transfer.to_device(at), at)
        assert transfer.ring_bytes() == 4 * stager.SLOTS_PER_THREAD * 4 * MiB  # staged with the settings
    finally:
        transfer.use_fastpath(prev)


def test_stager_reused_across_calls_of_different_sizes():
    with stager.Stager("cuda", threads=6, chunk_bytes=2 * MiB) as st:
        ring = st.nbytes
        outs, refs = [], []
        for i, n in enumerate((100 * MiB + 3, MiB + 1, 37 * MiB)):
            x = rand_tensor((n,), torch.uint8, seed=i)
            refs.append(x.clone())
            outs.append(st(x, non_blocking=True))
            x.zero_()  # allowed once the call returned
        torch.cuda.synchronize()
        for y, ref in zip(outs, refs, strict=True):
            assert same_bytes(y, ref)
        assert st.nbytes == ring == 6 * stager.SLOTS_PER_THREAD * 2 * MiB
        f = rand_tensor((3, 1000, 333), torch.float16, seed=9)
        assert same_bytes(st.to_device(f.transpose(0, 2)), f.transpose(0, 2))
    assert st.closed
    with pytest.raises(RuntimeError, match="closed"):
        st(torch.zeros(10))


def test_huge_page_ring():
    x = rand_tensor((50 * MiB + 3,), torch.uint8, seed=11)
    with stager.Stager("cuda", threads=4, chunk_bytes=2 * MiB, huge_pages=True) as st:
        assert same_bytes(st(x), x) and same_bytes(st(x[: MiB + 1]), x[: MiB + 1])


def test_non_blocking_source_may_change_after_return():
    x = rand_tensor((64 * MiB,), torch.uint8, seed=3)
    ref = x.clone()
    y = transfer.to_device(x, "cuda", non_blocking=True, chunk_bytes=4 * MiB, min_bytes=0)
    x.zero_()
    s = y.long().sum()  # work on the current stream sees the data (an exact integer sum)
    assert torch.equal(y.cpu(), ref)
    assert s.item() == ref.long().sum().item()


def test_on_a_side_stream():
    x = rand_tensor((40 * MiB,), torch.uint8, seed=4)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = transfer.to_device(x, non_blocking=True, min_bytes=0)
        total = y.long().sum()
    side.synchronize()
    assert total.item() == x.long().sum().item()


def test_many_calls_reuse_ring_and_free():
    for i in range(5):
        x = rand_tensor((20 * MiB + i,), torch.uint8, seed=i)
        assert same_bytes(transfer.to_device(x, min_bytes=0), x)
    assert transfer.ring_bytes() > 0
    freed = transfer.free_ring()
    assert freed > 0 and transfer.ring_bytes() == 0


def test_error_reaches_the_caller_and_the_ring_survives(monkeypatch):
    x = rand_tensor((32 * MiB,), torch.uint8)

    def boom(*a, **k):
        raise OSError("disk on fire")

    fp = transfer.fastpath()  # the engine that uses np.copyto, for every size's plan too
    prev = transfer.use_fastpath(
        {**fp, "engine": "numpy", "schedule": [{**s, "engine": "numpy"} for s in fp.get("schedule", [])]}
    )
    try:
        monkeypatch.setattr(np, "copyto", boom)
        with pytest.raises(OSError, match="disk on fire"):
            transfer.to_device(x, min_bytes=0)
        monkeypatch.undo()
        assert same_bytes(transfer.to_device(x, min_bytes=0), x)
    finally:
        transfer.use_fastpath(prev)


@pytest.mark.parametrize("threads", [1, 2])
def test_torch_engine_bytes_and_non_blocking(threads):
    with stager.Stager("cuda", threads=threads, chunk_bytes=8 * MiB, engine="torch") as st:
        for i, n in enumerate((3, MiB + 1, 40 * MiB + 5)):
            x = rand_tensor((n,), torch.uint8, seed=20 + i)
            assert same_bytes(st(x), x)
        x = rand_tensor((64 * MiB,), torch.uint8, seed=30)
        ref = x.clone()
        y = st(x, non_blocking=True)
        x.zero_()  # every byte has left x once the call returned
        assert torch.equal(y.cpu(), ref)
        f = rand_tensor((3, 1000, 3333), torch.float16, seed=31)
        assert same_bytes(st(f.transpose(0, 2)), f.transpose(0, 2))
        st.host_copy(f)


def test_to_device_with_the_torch_engine():
    prev = transfer.use_fastpath({**transfer.fastpath(), "engine": "torch", "threads": 1, "min_bytes": MiB})
    try:
        transfer.free_ring()
        x = rand_tensor((48 * MiB + 7,), torch.uint8, seed=40)
        assert same_bytes(transfer.to_device(x), x)
        fp = transfer.fastpath()
        assert transfer.ring_bytes() == fp["slots"] * fp["chunk_bytes"]
    finally:
        transfer.use_fastpath(prev)
        transfer.free_ring()


def test_unused_stager_is_collected_and_released():
    before = threading.active_count()
    st = stager.Stager("cuda", threads=4, chunk_bytes=MiB)
    st(rand_tensor((8 * MiB,), torch.uint8))
    assert threading.active_count() == before + 3
    del st
    gc.collect()
    assert threading.active_count() == before


def test_timeline_of_one_copy():
    x = rand_tensor((64 * MiB,), torch.uint8, seed=8)
    with stager.Stager("cuda", threads=4, chunk_bytes=4 * MiB) as st:
        st.timeline = []
        y = st(x)
        (t,) = st.timeline
        # the first chunk in 4 x 1 MiB, 11 x 4 MiB, the last wave in 16 x 1 MiB
        assert t["nbytes"] == 64 * MiB and len(t["chunks"]) == t["n_chunks"] == 31
        for c in t["chunks"]:
            e0, e1 = c["dma"]
            start, end = t["ref"].elapsed_time(e0), t["ref"].elapsed_time(e1)
            assert 0 <= start <= end
            assert t["t0"] <= c["wait"] <= c["copy"] <= c["copied"] <= c["queued"]
        st.host_copy(x)  # the host side alone; adds no timeline entry with DMA
    assert same_bytes(y, x)


def test_pinned_in_place():
    x = rand_tensor((16 * MiB,), torch.uint8)
    assert not x.is_pinned()
    with transfer.pinned(x) as px:
        assert px.data_ptr() == x.data_ptr() and px.is_pinned()
        y = px.to("cuda", non_blocking=True)
    assert not x.is_pinned()
    assert torch.equal(y.cpu(), x)
    with pytest.raises(ValueError, match="contiguous"):
        with transfer.pinned(x[::2]):
            pass
    with pytest.raises(ValueError, match="already pinned"):
        with transfer.pinned(x.pin_memory()):
            pass
    with pytest.raises(RuntimeError, match="inside"):
        with transfer.pinned(x):
            raise RuntimeError("inside")
    assert not x.is_pinned()  # unregistered on the error path too


def test_plans_of_a_schedule_share_one_ring_byte_for_byte():
    # issue 34: plans per size on one ring; non_blocking copies of alternating layouts, every
    # source overwritten at once: each result must still hold its source's bytes
    plans = [
        {
            "threads": 1,
            "chunk_bytes": 16 * MiB,
            "engine": "torch",
            "waves": 1,
            "head_split": 1,
            "tail_split": 1,
        },
        {"threads": 4, "chunk_bytes": 4 * MiB, "engine": "numpy", "waves": 2},
        {
            "threads": 2,
            "chunk_bytes": 8 * MiB,
            "engine": "torch",
            "waves": 3,
            "head_split": 4,
            "tail_split": 1,
        },
    ]
    with stager.Stager("cuda", threads=4, chunk_bytes=4 * MiB, slots=3) as st:
        outs = []
        for i in range(9):
            x = rand_tensor((3 * MiB * (i + 1) + 7,), torch.uint8, seed=40 + i)
            ref = x.clone()
            outs.append((st.to_device(x, plan=plans[i % 3], non_blocking=True), ref))
            x.zero_()
        torch.cuda.synchronize()
        for y, ref in outs:
            assert same_bytes(y, ref)


def test_to_device_follows_the_schedule_by_size():
    prev = transfer.use_fastpath(
        {
            **transfer.fastpath(),
            "min_bytes": 0,
            "schedule": [
                {
                    "below_bytes": 8 * MiB,
                    "threads": 1,
                    "chunk_bytes": 8 * MiB,
                    "engine": "torch",
                    "waves": 1,
                    "min_step_bytes": MiB,
                    "head_split": 1,
                    "tail_split": 1,
                },
                {
                    "below_bytes": 64 * MiB,
                    "threads": 2,
                    "chunk_bytes": 4 * MiB,
                    "engine": "numpy",
                    "waves": 2,
                    "min_step_bytes": MiB,
                    "head_split": 1,
                    "tail_split": 1,
                },
            ],
        }  # fmt: skip
    )
    try:
        for n in (5 * MiB + 1, 20 * MiB + 3, 100 * MiB + 5):
            x = rand_tensor((n,), torch.uint8, seed=n)
            assert same_bytes(transfer.to_device(x, "cuda"), x)
            assert same_bytes(transfer.to_device(x, "cuda", non_blocking=True), x)
        assert transfer.plan_for(20 * MiB)["engine"] == "numpy"
    finally:
        transfer.use_fastpath(prev)
