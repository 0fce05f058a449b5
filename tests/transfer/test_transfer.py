"""to_device and the Stager on a CPU-only machine: every option and odd tensor is checked
before CUDA is touched, small tensors are handed to .to() at once and cheaply, fast-path
settings are read and checked, and the staging loop itself (threads, chunks, slots, errors)
runs for real against a fake CUDA so its bytes can be compared."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.transfer import copyargs, stager
from h2dlab.transfer import fastpath as transfer
from tests.fake_cuda import install as install_fake_cuda

KiB, MiB, GiB = 1024, 1024**2, 1024**3


@pytest.fixture
def to_calls(monkeypatch):
    """Record every Tensor.to call instead of running it (no CUDA here)."""
    calls = []

    def fake_to(self, *args, **kwargs):
        calls.append((self, args, kwargs))
        return self

    monkeypatch.setattr(torch.Tensor, "to", fake_to)
    return calls


BAD_DEVICES = [
    ("meta", ValueError, "CUDA device"),
    ("cuda:x", ValueError, "not a device name"),
    ("gpu", ValueError, "not a device name"),
    ("", ValueError, "not a device name"),
    (" cuda", ValueError, "not a device name"),
    ("cuda:-1", ValueError, "not a device name"),
    (-1, ValueError, ">= 0"),
    (1.5, TypeError, "device must be"),
    (None, TypeError, "device must be"),
    (True, TypeError, "device must be"),
    (["cuda"], TypeError, "device must be"),
]


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu"), "cpu:0"])
@pytest.mark.parametrize("nbytes", [16, 2 * GiB])
@pytest.mark.parametrize("non_blocking", [False, True])
def test_a_non_cuda_target_is_plain_to_at_any_size(to_calls, device, nbytes, non_blocking):
    """Device-agnostic code calls to_device(x, device) where it called x.to(device): a CPU target
    is that call, untouched, however large (no ring, no CUDA), and the Stager still refuses it."""
    x = torch.zeros(1).expand(nbytes // 4) if nbytes > MiB else torch.zeros(nbytes // 4)
    out = transfer.to_device(x, device, non_blocking=non_blocking)
    assert out is x
    assert len(to_calls) == 1
    _, args, kwargs = to_calls[0]
    assert args == (torch.device(device),)
    assert kwargs == ({"non_blocking": True} if non_blocking else {})
    with pytest.raises(ValueError, match="CUDA device"):
        stager.Stager(device)


@pytest.mark.parametrize(("device", "exc", "msg"), BAD_DEVICES)
def test_bad_device_is_refused_before_any_copy(to_calls, device, exc, msg):
    with pytest.raises(exc, match=msg):
        transfer.to_device(torch.zeros(4), device)
    with pytest.raises(exc, match=msg):
        stager.Stager(device)
    assert to_calls == []


BAD_OPTIONS = [
    ({"num_threads": 0}, ValueError, "num_threads must be between 1 and 256, got 0"),
    ({"num_threads": -3}, ValueError, "num_threads"),
    ({"num_threads": 10**6}, ValueError, "num_threads"),
    ({"num_threads": 2.5}, TypeError, "num_threads must be an integer"),
    ({"num_threads": "4"}, TypeError, "num_threads must be an integer"),
    ({"num_threads": True}, TypeError, "num_threads must be an integer"),
    ({"chunk_bytes": 1}, ValueError, "chunk_bytes must be between 4096"),
    ({"chunk_bytes": 0}, ValueError, "chunk_bytes"),
    ({"chunk_bytes": -MiB}, ValueError, "chunk_bytes"),
    ({"chunk_bytes": 4095}, ValueError, "chunk_bytes"),
    ({"chunk_bytes": 2 * GiB}, ValueError, "chunk_bytes"),
    ({"chunk_bytes": 4096.0}, TypeError, "chunk_bytes must be an integer"),
    ({"min_bytes": -1}, ValueError, "min_bytes must be between 0"),
    ({"min_bytes": 1e6}, TypeError, "min_bytes must be an integer"),
    ({"min_bytes": float("nan")}, TypeError, "min_bytes"),
    ({"non_blocking": "yes"}, TypeError, "non_blocking must be True or False"),
    ({"non_blocking": 1}, TypeError, "non_blocking"),
    ({"non_blocking": None}, TypeError, "non_blocking"),
]


@pytest.mark.parametrize(("opts", "exc", "msg"), BAD_OPTIONS)
@pytest.mark.parametrize("nbytes", [0, 4, 64 * MiB])
def test_bad_option_is_refused_whatever_the_size(to_calls, opts, exc, msg, nbytes):
    # Validation comes before the size check: a small tensor does not slip through.
    with pytest.raises(exc, match=msg):
        transfer.to_device(torch.empty(nbytes, dtype=torch.uint8), "cuda", **opts)
    assert to_calls == []


@pytest.mark.parametrize(
    ("opts", "exc", "msg"),
    [
        ({"threads": 0}, ValueError, "threads must be between 1"),
        ({"threads": 1.0}, TypeError, "threads must be an integer"),
        ({"chunk_bytes": 1}, ValueError, "chunk_bytes must be between 4096"),
        ({"chunk_bytes": "16MiB"}, TypeError, "chunk_bytes must be an integer"),
    ],
)
def test_stager_options_checked_before_cuda(opts, exc, msg):
    with pytest.raises(exc, match=msg):
        stager.Stager("cuda", **opts)


def test_without_cuda_a_staged_copy_says_so():
    assert not torch.cuda.is_available()
    with pytest.raises(RuntimeError, match=r"needs CUDA.*is_available\(\) is False"):
        transfer.to_device(torch.zeros(4), "cuda", min_bytes=0)
    with pytest.raises(RuntimeError, match="needs CUDA"):
        stager.Stager("cuda")


@pytest.mark.parametrize("x", [12, "tensor", np.zeros(4), [1.0, 2.0], None])
def test_not_a_tensor(to_calls, x):
    with pytest.raises(TypeError, match="expects a torch.Tensor"):
        transfer.to_device(x, "cuda")


def test_meta_tensor_refused_at_any_size(to_calls):
    for n in (0, 4, 2**30):
        with pytest.raises(ValueError, match="meta tensor has no data"):
            transfer.to_device(torch.empty(n, device="meta"), "cuda")
        with pytest.raises(ValueError, match="meta tensor has no data"):
            transfer.to_device(torch.empty(n, device="meta"), "cuda", min_bytes=0)
    assert to_calls == []


def _odd_tensors():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 8, generator=g)
    c = torch.randn(5, dtype=torch.complex64, generator=g)
    return {
        "empty": torch.empty(0),
        "empty_2d": torch.empty(3, 0, 5, dtype=torch.float64),
        "scalar": torch.tensor(3.5),
        "bool": torch.tensor([True, False, True]),
        "complex": c,
        "conj": c.conj(),
        "transposed": x.t(),
        "strided": x[:, ::2],
        "expanded": torch.ones(1, 4).expand(1000, 4),
        "sparse": x.to_sparse(),
        "requires_grad": torch.ones(3, requires_grad=True),
        "parameter": torch.nn.Parameter(torch.ones(3)),
    }


@pytest.mark.parametrize("name", list(_odd_tensors()))
@pytest.mark.parametrize("non_blocking", [False, True])
def test_small_and_odd_tensors_go_to_plain_to(to_calls, name, non_blocking):
    x = _odd_tensors()[name]
    assert transfer.to_device(x, "cuda:0", non_blocking=non_blocking) is x
    ((obj, args, kwargs),) = to_calls
    # non_blocking=False is .to()'s default: left out, a keyword costs the call ~0.3 us
    assert obj is x and args == (torch.device("cuda", 0),)
    assert kwargs == ({"non_blocking": True} if non_blocking else {})


@pytest.mark.parametrize("name", ["empty", "empty_2d", "sparse", "requires_grad", "parameter"])
def test_what_staging_cannot_help_goes_to_plain_to_even_when_forced(to_calls, name):
    x = _odd_tensors()[name]
    if name.startswith("empty") or name == "sparse":  # decided before any CUDA call
        assert transfer.to_device(x, 1, min_bytes=0) is x
        assert to_calls[0][1] == (torch.device("cuda", 1),)
    assert copyargs.takes_plain_to(x)


def test_takes_plain_to():
    assert not copyargs.takes_plain_to(torch.zeros(4))
    assert not copyargs.takes_plain_to(torch.zeros(4).t())  # dense views are staged
    assert copyargs.takes_plain_to(torch.zeros(0))
    assert copyargs.takes_plain_to(torch.zeros(3, requires_grad=True))
    assert copyargs.takes_plain_to(torch.eye(3).to_sparse())
    with pytest.raises(ValueError, match="meta"):
        copyargs.takes_plain_to(torch.zeros(3, device="meta"))


def test_the_threshold_decides(to_calls):
    x = torch.empty(MiB, dtype=torch.uint8)
    assert transfer.to_device(x, "cuda", min_bytes=MiB + 1) is x  # below: .to()
    assert len(to_calls) == 1
    with pytest.raises(RuntimeError, match="needs CUDA"):  # at the threshold: staged
        transfer.to_device(x, "cuda", min_bytes=MiB)
    assert len(to_calls) == 1


def test_fast_path_touches_no_staging_machinery(to_calls, monkeypatch):
    """Below the threshold to_device goes straight to .to(): no Stager, ring or thread is
    made. (How many microseconds it adds is measured by benchmarks/bench_transfer.py,
    beside .to() in the same run, not in a timed unit test.)"""

    def boom(*a, **k):
        raise AssertionError("the small-tensor path built staging machinery")

    monkeypatch.setattr(transfer, "Stager", boom)
    monkeypatch.setattr(transfer, "_stager", boom)
    x = torch.zeros(256)
    assert transfer.to_device(x, "cuda") is x
    assert len(to_calls) == 1
    assert transfer.ring_bytes() == 0


# --- chunking -------------------------------------------------------------------------


def _sizes(bounds):
    return [b - a for a, b in zip(bounds, bounds[1:], strict=False)]


@pytest.mark.parametrize(
    ("nbytes", "threads", "chunk", "sizes"),
    [
        # 256 MiB over 16 threads: 4 MiB chunks (4 per thread, not 1), the first chunk and the
        # last wave in 1 MiB pieces
        (256 * MiB, 16, 16 * MiB, [MiB] * 4 + [4 * MiB] * 47 + [MiB] * 64),
        (GiB, 16, 16 * MiB, [4 * MiB] * 4 + [16 * MiB] * 47 + [4 * MiB] * 64),
        (4 * GiB, 16, 16 * MiB, [4 * MiB] * 4 + [16 * MiB] * 239 + [4 * MiB] * 64),
        (256 * MiB, 1, 16 * MiB, [4 * MiB] * 4 + [16 * MiB] * 14 + [4 * MiB] * 4),  # engine "torch"
        # a slot that is no multiple of 4 pieces: the first chunk's remainder joins its last piece
        (
            5 * (4 * MiB + 4 * KiB),
            1,
            4 * MiB + 4 * KiB,
            [MiB] * 3 + [MiB + 4 * KiB] + [4 * MiB + 4 * KiB] * 3 + [MiB] * 4 + [4 * KiB],
        ),  # fmt: skip
        (GiB, 16, 2 * MiB, [2 * MiB] * 512),  # pieces would be < 1 MiB: no finer tail
        (32 * MiB, 16, 16 * MiB, [MiB] * 32),
        (10, 16, 16 * MiB, [10]),
        (3 * MiB, 4, 64 * KiB, [64 * KiB] * 48),
        (MiB + 5, 4, 5000, [5000] * 209 + [3581]),  # an odd slot size is used as it is
    ],
)
def test_chunk_plan_examples(nbytes, threads, chunk, sizes):
    assert _sizes(stager.chunk_plan(nbytes, threads, chunk)) == sizes
    assert stager.chunk_plan(0, threads, chunk) == [0]


@settings(max_examples=300, deadline=None)
@given(
    nbytes=st.integers(1, 2**36),
    threads=st.integers(1, 256),
    chunk=st.integers(stager.MIN_CHUNK_BYTES, stager.MAX_CHUNK_BYTES),
)
def test_chunk_plan_covers_every_byte_once(nbytes, threads, chunk):
    bounds = stager.chunk_plan(nbytes, threads, chunk)
    sizes = _sizes(bounds)
    assert bounds[0] == 0 and bounds[-1] == nbytes
    assert all(0 < n <= chunk for n in sizes)  # no empty chunk; each fits its slot
    # Deep enough to overlap: no larger than WAVES chunks per thread asks (page rounding aside).
    assert max(sizes) < max(stager.MIN_STEP_BYTES, -(-nbytes // (threads * stager.WAVES))) + 4096
    # Not needlessly fine: the pieces never go below MIN_STEP_BYTES unless the slot or the copy is smaller.
    assert min(sizes[:-1] or [nbytes]) >= min(stager.MIN_STEP_BYTES, chunk, nbytes) or len(sizes) == 1
    assert len(sizes) <= -(-nbytes // min(chunk, stager.MIN_STEP_BYTES)) + 1


# --- fast-path settings -----------------------------------------------------------------


def _fp(**kw):
    d = {
        "format": 1,
        "min_bytes": 64 * MiB,
        "threads": 1,
        "chunk_bytes": 8 * MiB,
        "measured_on": {"gpu_name": "X"},
    }
    d.update(kw)
    return d


def test_read_fastpath_file(tmp_path):
    p = tmp_path / "fastpath.json"
    p.write_text(json.dumps(_fp()))
    s = transfer.read_fastpath(p)
    assert (s["min_bytes"], s["threads"], s["chunk_bytes"]) == (64 * MiB, 1, 8 * MiB)
    assert s["source"] == str(p) and s["measured_on"] == {"gpu_name": "X"}


def test_read_fastpath_caps_threads_at_the_cores():
    s = transfer.read_fastpath(_fp(threads=256))
    assert 1 <= s["threads"] <= (len(__import__("os").sched_getaffinity(0)))


@pytest.mark.parametrize(
    ("d", "msg"),
    [
        (_fp(format=2), "format 1"),
        ([1, 2], "format 1"),
        ({k: v for k, v in _fp().items() if k != "threads"}, "has no 'threads'"),
        (_fp(min_bytes=-5), "min_bytes must be between"),
        (_fp(chunk_bytes=1), "chunk_bytes must be between"),
        (_fp(threads="16"), "threads must be an integer"),
        (_fp(huge_pages="yes"), "huge_pages must be true or false"),
    ],
)
def test_read_fastpath_refuses_bad_settings(tmp_path, d, msg):
    p = tmp_path / "f.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=msg):
        transfer.read_fastpath(p)


def test_read_fastpath_unreadable(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    for p in (tmp_path / "bad.json", tmp_path / "missing.json"):
        with pytest.raises(ValueError, match="cannot read fast-path settings"):
            transfer.read_fastpath(p)


def test_use_fastpath_moves_the_threshold_and_restores(to_calls):
    x = torch.empty(2 * MiB, dtype=torch.uint8)
    prev = transfer.use_fastpath(_fp(min_bytes=MiB))
    try:
        assert transfer.fastpath()["min_bytes"] == MiB
        with pytest.raises(RuntimeError, match="needs CUDA"):  # now staged
            transfer.to_device(x, "cuda")
        transfer.use_fastpath(_fp(min_bytes=4 * MiB))
        assert transfer.to_device(x, "cuda") is x and len(to_calls) == 1
    finally:
        transfer.use_fastpath(prev)
    assert transfer.fastpath() == prev


def test_shipped_settings_are_valid():
    s = transfer.fastpath()
    if transfer.FASTPATH_FILE.exists():
        assert s["source"] == str(transfer.FASTPATH_FILE) and s["measured_on"]
    else:
        assert s["min_bytes"] == transfer.DEFAULT_MIN_BYTES
    assert s["threads"] >= 1 and s["chunk_bytes"] >= stager.MIN_CHUNK_BYTES


# --- the staging loop, run for real against a fake CUDA ----------------------------------


class _FakeCudart:
    def __init__(self):
        self.registered = {}

    def cudaHostRegister(self, ptr, nbytes, flags):
        self.registered[ptr] = nbytes
        return 0

    def cudaHostUnregister(self, ptr):
        return 0 if self.registered.pop(ptr, None) else 1


@pytest.fixture
def fake_cuda(monkeypatch):
    """Enough of torch.cuda for a Stager whose DMA is a CPU copy (synchronous)."""
    install_fake_cuda(monkeypatch)
    rt = _FakeCudart()
    monkeypatch.setattr(torch.cuda, "cudart", lambda: rt)
    return rt


def _cpu_stager(**kw):
    s = stager.Stager("cuda", **kw)
    s.device = torch.device("cpu")  # results land on the CPU: the loop is what is tested
    return s


@pytest.fixture
def made_stagers(fake_cuda, monkeypatch):
    """Every Stager that transfer builds, in order (each on the CPU), from an empty ring."""
    made = []

    def spy(*a, **k):
        made.append(_cpu_stager(**k))
        return made[-1]

    monkeypatch.setattr(transfer, "Stager", spy)
    transfer.free_ring()
    return made


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bool, torch.float16, torch.complex64, torch.int64])
@pytest.mark.parametrize("shape", [(1,), (3 * MiB + 7,), (257, 129, 3)])
def test_staging_loop_bytes_match(fake_cuda, dtype, shape):
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randint(
        0, 255, (int(np.prod(shape)) * torch.empty((), dtype=dtype).element_size(),), generator=g
    )
    x = x.to(torch.uint8).view(dtype).reshape(shape)
    with _cpu_stager(threads=4, chunk_bytes=64 * KiB) as s:
        y = s(x)
        assert y.shape == x.shape and y.dtype == x.dtype and y.is_contiguous()
        assert torch.equal(y.reshape(-1).view(torch.uint8), x.reshape(-1).view(torch.uint8))
    assert s.closed and fake_cuda.registered == {}


def test_staging_loop_views_conj_and_reuse(fake_cuda):
    g = torch.Generator().manual_seed(1)
    s = _cpu_stager(threads=3, chunk_bytes=16 * KiB)
    s.timeline = []
    sizes = []
    for x in (
        torch.randn(300, 200, generator=g).t(),
        torch.randn(1000, 64, generator=g)[:, ::3],
        torch.randn(5000, dtype=torch.complex64, generator=g).conj(),
        torch.randn(7, generator=g).neg(),
        torch.randn(40000, generator=g),
    ):
        y = s.to_device(x, non_blocking=True)
        assert torch.equal(y, x.resolve_conj().resolve_neg())
        sizes.append(x.numel() * x.element_size())
    # Each call cut its bytes into chunks that tile it exactly, spread over the threads.
    assert [t["nbytes"] for t in s.timeline] == sizes
    for t in s.timeline:
        spans = sorted((c["offset"], c["offset"] + c["bytes"]) for c in t["chunks"])
        assert spans[0][0] == 0 and spans[-1][1] == t["nbytes"]
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
        assert all(
            c["bytes"] <= 16 * KiB and c["wait"] <= c["copy"] <= c["copied"] <= c["queued"]
            for c in t["chunks"]
        )
    s.close()
    s.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        s.to_device(torch.zeros(10))


def test_staging_loop_spreads_chunks_over_threads(fake_cuda, monkeypatch):
    real = np.copyto

    def slow_copy(dst, src):  # a copy long enough for every worker to wake (the GIL is free)
        time.sleep(0.002)
        real(dst, src)

    monkeypatch.setattr(np, "copyto", slow_copy)
    s = _cpu_stager(threads=3, chunk_bytes=4 * KiB)
    s.timeline = []
    x = torch.arange(30 * 1024, dtype=torch.int32)  # 30 chunks
    assert torch.equal(s(x), x)
    assert {c["thread"] for c in s.timeline[-1]["chunks"]} == {0, 1, 2}
    s.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        s.to_device(torch.zeros(10))


def test_staging_loop_error_reaches_the_caller_and_the_ring_survives(fake_cuda, monkeypatch):
    s = _cpu_stager(threads=4, chunk_bytes=8 * KiB)
    x = torch.arange(100_000, dtype=torch.int32)
    real = np.copyto
    calls = []

    def flaky(dst, src):
        calls.append(1)
        if len(calls) == 5:
            raise OSError("disk on fire")
        real(dst, src)

    monkeypatch.setattr(np, "copyto", flaky)
    with pytest.raises(OSError, match="disk on fire"):
        s(x)
    n_failed = len(calls)
    assert n_failed < len(stager.chunk_plan(x.numel() * 4, 4, 8 * KiB)) - 1  # the others stopped early
    monkeypatch.setattr(np, "copyto", real)
    assert torch.equal(s(x), x)
    s.host_copy(x)  # the host side alone runs too
    s.close()


def test_stager_keeps_its_threads(fake_cuda):
    import threading

    before = threading.active_count()
    s = _cpu_stager(threads=5, chunk_bytes=4 * KiB)
    assert threading.active_count() == before + 4  # the caller is the fifth
    for n in (10, 100_000, 3):
        assert torch.equal(s(torch.ones(n)), torch.ones(n))
    assert threading.active_count() == before + 4
    assert s.nbytes == 5 * stager.SLOTS_PER_THREAD * 4 * KiB and "40 KiB" not in repr(s)
    s.close()
    assert threading.active_count() == before


def test_to_device_uses_one_stager_per_device(made_stagers, monkeypatch):
    made = made_stagers
    x = torch.arange(5000.0)
    opts = {"min_bytes": 0, "num_threads": 2, "chunk_bytes": 4 * KiB}
    slots = transfer.fastpath()["slots"]  # not an argument: the shipped fastpath.json's
    assert torch.equal(transfer.to_device(x, "cuda", **opts), x)
    assert transfer.ring_bytes() == 2 * slots * 4 * KiB
    assert torch.equal(transfer.to_device(x, "cuda", **opts), x)
    assert len(made) == 1  # kept
    assert torch.equal(transfer.to_device(x, "cuda", **{**opts, "num_threads": 3}), x)
    assert len(made) == 2 and made[0].closed  # replaced, not piled up
    assert transfer.free_ring() == 3 * slots * 4 * KiB and transfer.ring_bytes() == 0
    assert made[1].closed


def test_unused_stager_is_collected_and_released(fake_cuda):
    import gc
    import threading

    before = threading.active_count()
    s = _cpu_stager(threads=4, chunk_bytes=4 * KiB)
    assert torch.equal(s(torch.ones(10_000)), torch.ones(10_000))
    assert threading.active_count() == before + 3 and len(fake_cuda.registered) == 1
    del s
    gc.collect()
    assert threading.active_count() == before and fake_cuda.registered == {}


def test_huge_page_ring(fake_cuda):
    x = torch.arange(300_000, dtype=torch.int64)
    with _cpu_stager(threads=3, chunk_bytes=64 * KiB, huge_pages=True) as s:
        assert s.huge_pages and s.nbytes == 3 * 2 * 64 * KiB
        assert torch.equal(s(x), x)
    assert fake_cuda.registered == {}
    with pytest.raises(TypeError, match="huge_pages must be True or False"):
        stager.Stager("cuda", huge_pages=1)
    assert transfer.fastpath()["huge_pages"] in (True, False)


@pytest.mark.parametrize("threads", [1, 3])
def test_torch_engine_copies_with_tensor_copy_not_numpy(fake_cuda, monkeypatch, threads):
    def no_numpy(dst, src):
        raise AssertionError("the torch engine must not copy with NumPy")

    monkeypatch.setattr(np, "copyto", no_numpy)
    x = torch.arange(3 * MiB // 8 + 13, dtype=torch.float64)
    with _cpu_stager(threads=threads, chunk_bytes=64 * KiB, engine="torch") as s:
        s.timeline = []
        assert torch.equal(s(x), x) and torch.equal(s(x[::2]), x[::2])
        assert "engine='torch'" in repr(s)
        spans = sorted((c["offset"], c["bytes"]) for c in s.timeline[0]["chunks"])
        assert sum(b for _, b in spans) == x.numel() * 8 and max(b for _, b in spans) <= 64 * KiB
        s.host_copy(x)
    with pytest.raises(ValueError, match="engine must be one of"):
        stager.Stager("cuda", engine="omp")


def test_fastpath_engine_is_read_and_decides_the_ring(made_stagers, monkeypatch):
    made = made_stagers
    assert transfer.read_fastpath(_fp())["engine"] == "numpy"  # absent: the old behaviour
    assert transfer.read_fastpath(_fp(engine="torch"))["engine"] == "torch"
    with pytest.raises(ValueError, match="engine must be one of"):
        transfer.read_fastpath(_fp(engine="gpu"))
    prev = transfer.use_fastpath(_fp(min_bytes=0, threads=1, chunk_bytes=64 * KiB, engine="torch"))
    try:
        x = torch.arange(100_000.0)
        assert torch.equal(transfer.to_device(x, "cuda"), x)
        assert made[-1].engine == "torch" and made[-1].threads == 1
    finally:
        transfer.use_fastpath(prev)
        transfer.free_ring()


# --- slots per thread and the smallest chunk (settings the benchmark tunes) ----------------


def test_fastpath_slots_and_min_step_are_read_with_defaults_for_older_files():
    old = transfer.read_fastpath(_fp())  # a file from before these settings
    assert (old["slots"], old["min_step_bytes"]) == (stager.SLOTS_PER_THREAD, stager.MIN_STEP_BYTES)
    new = transfer.read_fastpath(_fp(slots=3, min_step_bytes=8 * MiB))
    assert (new["slots"], new["min_step_bytes"]) == (3, 8 * MiB)
    for bad, msg in (
        ({"slots": 1}, "slots must be between 2 and"),
        ({"slots": 2.5}, "slots must be an integer"),
        ({"min_step_bytes": 0}, "min_step_bytes must be between"),
    ):
        with pytest.raises(ValueError, match=msg):
            transfer.read_fastpath(_fp(**bad))


@pytest.mark.parametrize("engine", ["numpy", "torch"])
def test_stager_with_three_slots_and_a_larger_min_step(fake_cuda, engine):
    x = torch.arange(5 * MiB // 4 + 3, dtype=torch.int32)  # 5 MiB + 12 bytes
    with _cpu_stager(threads=2, chunk_bytes=256 * KiB, slots=3, min_step_bytes=128 * KiB, engine=engine) as s:
        assert s.nbytes == 2 * 3 * 256 * KiB and "slots=3" in repr(s)
        s.timeline = []
        assert torch.equal(s(x), x) and torch.equal(s(x[::3]), x[::3])
        sizes = sorted(c["bytes"] for c in s.timeline[0]["chunks"])
        assert sum(sizes) == x.nbytes and min(sizes[1:]) >= 128 * KiB and max(sizes) <= 256 * KiB
        assert {c["slot"] for c in s.timeline[0]["chunks"]} == {0, 1, 2}  # every slot used
    with pytest.raises(ValueError, match="slots must be between"):
        stager.Stager("cuda", slots=9)


def test_min_step_makes_fewer_larger_chunks():
    # 64 MiB on one thread with 32 MiB slots: 1 MiB pieces allowed -> 4 MiB pieces at both ends;
    # 8 MiB smallest -> four 16 MiB chunks (the pieces would be 4 MiB, below it)
    fine = stager.chunk_plan(64 * MiB, 1, 32 * MiB)
    coarse = stager.chunk_plan(64 * MiB, 1, 32 * MiB, 8 * MiB)
    assert _sizes(fine) == [4 * MiB] * 4 + [16 * MiB] * 2 + [4 * MiB] * 4
    assert _sizes(coarse) == [16 * MiB] * 4


def test_to_device_rebuilds_the_ring_when_slots_change(made_stagers, monkeypatch):
    made = made_stagers
    x = torch.arange(100_000.0)
    prev = transfer.use_fastpath(_fp(min_bytes=0, threads=1, chunk_bytes=64 * KiB, engine="torch", slots=3))
    try:
        assert torch.equal(transfer.to_device(x, "cuda"), x)
        assert made[-1].slots == 3 and transfer.ring_bytes() == 3 * 64 * KiB
        transfer.use_fastpath(_fp(min_bytes=0, threads=1, chunk_bytes=64 * KiB, engine="torch", slots=4))
        assert torch.equal(transfer.to_device(x, "cuda"), x)
        assert len(made) == 2 and made[0].closed and made[1].slots == 4
    finally:
        transfer.use_fastpath(prev)
        transfer.free_ring()
