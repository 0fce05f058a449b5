"""On a real GPU: the device-to-host strategies return the source's bytes, the
both-ways rows are sane (full duplex beats one direction after the other), and every
batch method's device tensors equal their sources."""

import numpy as np
import pytest
import torch

from h2dlab.measure import batch_methods, strategies
from h2dlab.measure.batch import BatchSpec, batch
from h2dlab.measure.batch_methods import batch_sizes, make_batch
from h2dlab.measure.duplex import DuplexSpec, duplex
from h2dlab.measure.harness import sweep
from h2dlab.measure.spec import SweepSpec

MiB = 1024**2
CUDA = torch.device("cuda", 0)


def _rand(nbytes, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)


@pytest.mark.parametrize("name", strategies.names("d2h"))
@pytest.mark.parametrize("nbytes", [1024, 3 * MiB + 4096, 20 * MiB + 5, 64 * MiB])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_every_d2h_strategy_returns_the_bytes(name, nbytes, dtype):
    nbytes -= nbytes % torch.empty((), dtype=dtype).element_size()
    x = _rand(nbytes, seed=nbytes).view(dtype)
    s = strategies.get(name)
    s.prepare(x, CUDA)
    for _ in range(2):  # reused buffers too
        y = s.copy(x)
        assert y.device.type == "cpu" and y.dtype == x.dtype and y.shape == x.shape
        assert torch.equal(y.view(torch.uint8), x.view(torch.uint8)), name
    if name in ("d2h_pinned_reuse", "d2h_non_blocking"):
        assert y.is_pinned()
    if name in ("d2h_pageable", "d2h_staged"):
        assert not y.is_pinned()
    s.cleanup()


def test_d2h_sweep_rows(tmp_path):
    spec = SweepSpec(tuple(strategies.names("d2h")), (MiB, 64 * MiB), device="cuda", reps=3, warmup=1)
    df = sweep(spec, out=tmp_path / "d.csv", progress=False)
    assert (df["error"] == "").all(), df.loc[df["error"] != "", "error"].iloc[0]
    assert (df["direction"] == "d2h").all() and df["event_ms"].gt(0).all()
    big = df[~df.warmup & (df.size_bytes == 64 * MiB)]
    gbps = (big.size_bytes / big.event_ms / 1e6).groupby(big.strategy).median()
    assert gbps["d2h_pinned_reuse"] > 5, gbps.to_dict()  # pinned DMA: tens of GB/s on PCIe Gen4/5


def test_duplex_rows_are_sane(tmp_path):
    spec = DuplexSpec(sizes=(MiB, 64 * MiB), reps=5, warmup=1)
    df = duplex(spec, out=tmp_path / "b.csv", progress=False)
    assert (df["error"] == "").all(), df.loc[df["error"] != "", "error"].iloc[0]
    timed = df[~df.warmup]
    duo = timed[timed.strategy == "duplex"]
    pairs = duo.groupby(["size_bytes", "rep"])
    assert pairs["direction"].apply(lambda d: sorted(d) == ["d2h", "h2d"]).all()
    assert (pairs["t_s"].nunique() == 1).all() and (pairs["wall_ms"].nunique() == 1).all()
    span = pairs["event_ms"].max()
    assert (span.to_numpy() <= pairs["wall_ms"].first().to_numpy() * 1.05 + 0.05).all()
    big = timed[timed.size_bytes == 64 * MiB]
    alone = big[big.strategy == "alone"].groupby("direction")["event_ms"].median()
    both = span.loc[64 * MiB].median()
    for d, ms in alone.items():
        assert 64 * MiB / ms / 1e6 < 100, (d, ms)  # no PCIe x16 link moves 100 GB/s one way
    # Full duplex: both at once take clearly less than one after the other.
    assert both < 0.9 * alone.sum(), (both, alone.to_dict())


def _available(dev):
    return [m for m in batch_methods.METHODS if not batch_methods.available(m, dev)]


@pytest.mark.parametrize("layout", ["equal", "mixed"])
@pytest.mark.parametrize(("n", "total"), [(1, 4 * MiB), (64, 16 * MiB), (1024, 64 * MiB)])
def test_batch_methods_give_identical_device_tensors(layout, n, total):
    src = _rand(total, seed=n)
    ts = make_batch(batch_sizes(n, total, layout, seed=1), src)
    for name in _available(CUDA):
        m = batch_methods.get(name)
        m.prepare(ts, CUDA)
        for _ in range(2):
            ys = m.copy(ts)
            torch.cuda.synchronize()
            assert len(ys) == n and all(y.device.type == "cuda" for y in ys), name
            assert all(torch.equal(y.cpu(), t) for y, t in zip(ys, ts, strict=True)), name
        m.cleanup()


def test_batch_run_rows(tmp_path):
    spec = BatchSpec(counts=(1, 64), totals=(MiB, 16 * MiB), layout="mixed", reps=2, warmup=1)
    df = batch(spec, out=tmp_path / "b.csv", progress=False)
    ran = df[df.strategy.isin(_available(CUDA))]
    assert (ran["error"] == "").all(), ran.loc[ran["error"] != "", "error"].iloc[0]
    assert ran["event_ms"].gt(0).all() and set(ran["n_tensors"]) == {1, 64}
    skipped = df[~df.strategy.isin(_available(CUDA))]
    assert skipped["error"].str.startswith("unavailable").all()
    assert np.isfinite(ran["wall_ms"]).all()
