"""The side-by-side with PyTorch's pin_memory/non_blocking tutorial: its ratios are the
recording's medians, and the agreement it states flips with the data (synthetic tables)."""

import numpy as np
import pandas as pd
import pytest

from h2dlab.explain.rows import timed, value_ms
from h2dlab.findings import tutorial as ft
from h2dlab.recording import datasets, session
from tests.synthetic_workload import SYNTHETIC_MS, synthetic_workload


@pytest.fixture(scope="module")
def rec():
    return session.recording("h200")


def test_ratios_are_the_recording_s_medians(rec):
    sweep, batch = rec.table("sweep", "pow2-interleaved"), rec.table("batch", "equal")
    f = ft.tutorial(sweep, batch)
    t = timed(sweep)
    t = t.assign(ms=value_ms(t))
    for size, r in list(f["pin_ratio"].items())[::5]:
        one = t[t.size_bytes == size].groupby("strategy").ms.median()
        assert r == pytest.approx(one["pin_then_copy"] / one["pageable"])
    assert f["slower_sizes"] == sum(r > 1 for r in f["pin_ratio"].values())
    b = timed(batch[batch.n_tensors == batch.n_tensors.max()])
    m = b.groupby(["strategy", "size_bytes"]).wall_ms.median()
    for size, r in f["nb_ratio"].items():
        assert r == pytest.approx(m["loop_non_blocking", size] / m["loop_to", size])
    assert f"at {f['slower_sizes']} of {f['sizes']} sizes" in f.verdict and "host-side figures" in f.verdict


def _sweep(pin_over_pageable: float) -> pd.DataFrame:
    rows = []
    for i, size in enumerate(2 ** np.arange(10, 20)):
        for rep in range(3):
            for s, ms in (("pageable", 1.0), ("pin_then_copy", pin_over_pageable)):
                rows.append(dict(run_id="synthetic", order=len(rows), strategy=s, size_bytes=int(size), shape="",
                                 dtype="uint8", rep=rep, warmup=False, t_s=float(len(rows)), wall_ms=ms * (1 + i),
                                 event_ms=ms * (1 + i), host_allocs=0.0, device_allocs=0.0, empty_cache=False, error=""))  # fmt: skip
    return datasets.validate(pd.DataFrame(rows), source="synthetic")


def test_agreement_flips_with_a_synthetic_sweep():
    slow = ft.tutorial(_sweep(1.5))
    assert slow.holds and slow["slower_sizes"] == 10 and 'agrees with "usually slower"' in slow.verdict
    fast = ft.tutorial(_sweep(0.5))
    assert not fast.holds and "does not agree" in fast.verdict and "faster at the other 10" in fast.verdict


def test_the_step_ratio_comes_from_the_workload_table():
    f = ft.tutorial(_sweep(1.5), workload=synthetic_workload())
    r = SYNTHETIC_MS["pin_memory_each_step"] / SYNTHETIC_MS["pageable_to"]
    assert f["step_ratio"] == pytest.approx(r) and f"{r:.2f}x as long as plain `.to()` (slower)" in f.verdict
