"""Device-to-host strategies on the CPU: the registry keeps directions apart, a sweep's
rows carry the direction of their strategy, and the staged way back reassembles the
bytes chunk by chunk (run on a fake CUDA)."""

import pytest
import torch

from h2dlab.measure import strategies
from h2dlab.measure.harness import sweep
from h2dlab.measure.spec import SweepSpec
from h2dlab.measure.strategies_d2h import D2HStaged
from h2dlab.recording import datasets
from tests.fake_cuda import FakeEvent, FakeStream, fake_cuda  # noqa: F401 - fixture

D2H = {"d2h_pageable", "d2h_pinned_reuse", "d2h_non_blocking", "d2h_staged"}


def test_names_by_direction():
    assert set(strategies.names("d2h")) == D2H
    assert not D2H & set(strategies.names())  # a sweep with no strategies named stays h2d
    assert set(strategies.names(None)) == set(strategies.REGISTRY)
    assert all(strategies.direction_of(n) == "d2h" for n in D2H)
    assert strategies.direction_of("pinned_reuse") == "h2d"
    with pytest.raises(ValueError, match="direction"):
        strategies.names("up")


def test_d2h_needs_cuda_except_pageable():
    cpu = torch.device("cpu")
    assert strategies.available("d2h_pageable", cpu) == ""
    for n in D2H - {"d2h_pageable"}:
        assert "needs CUDA" in strategies.available(n, cpu)


def test_d2h_sweep_rows_say_d2h_and_bytes_match(tmp_path):
    spec = SweepSpec(("d2h_pageable", "pageable"), (4096, 65536), device="cpu", reps=2, warmup=1)
    df = sweep(spec, out=tmp_path / "d.csv", progress=False)
    assert (df["error"] == "").all()
    assert dict(df.groupby("strategy")["direction"].unique().map(tuple)) == {
        "d2h_pageable": ("d2h",),
        "pageable": ("h2d",),
    }
    assert (df["n_tensors"] == 1).all()
    back = datasets.read(tmp_path / "d.csv")
    assert back.loc[back.strategy == "d2h_pageable", "direction"].eq("d2h").all()
    assert back["minflt"].ge(0).all() and back["cpu_ms"].ge(0).all()


class _Wrong(strategies.Strategy):
    """Synthetic: a d2h copy that returns the wrong bytes."""

    name = "d2h_wrong_test_only"
    direction = "d2h"
    needs_cuda = False

    def copy(self, x):
        return torch.zeros_like(x)


def test_the_byte_check_catches_a_wrong_d2h_copy(monkeypatch):
    monkeypatch.setitem(strategies.REGISTRY, _Wrong.name, _Wrong)
    df = sweep(SweepSpec((_Wrong.name,), (4096,), device="cpu", reps=2, warmup=0), progress=False)
    assert df["error"].iloc[0].startswith("wrong result") and df["direction"].eq("d2h").all()


@pytest.mark.parametrize("nbytes", [1, 999, 1000, 1001, 7 * 1000 + 3])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_staged_way_back_reassembles_every_chunk(fake_cuda, nbytes, dtype):  # noqa: F811
    n = max(1, nbytes // torch.empty((), dtype=dtype).element_size())
    x = torch.randint(0, 100, (n,)).to(dtype)
    s = D2HStaged()
    s.device, s.src = torch.device("cpu"), x.clone()
    s.ring = [torch.empty(1000, dtype=torch.uint8) for _ in range(s.slots)]  # 1000-byte slots
    s.stream, s.done = FakeStream(), [FakeEvent() for _ in range(s.slots)]
    y = s.copy(x)
    assert y.dtype == x.dtype and y.shape == x.shape and y.data_ptr() != s.src.data_ptr()
    assert torch.equal(y.view(torch.uint8), x.view(torch.uint8))
    chunks = -(-x.nbytes // 1000)
    assert sum(e.recorded for e in s.done) == chunks and s.stream.waits == 1
