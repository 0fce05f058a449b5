"""On a real GPU: a Timer with a pause wakes the GPU, idles it ``pause_s`` before the
timed copy and keeps the pause out of the copy's own times. Functional only: how much a
pause costs the next copy is what ``measure --pause`` records, not asserted here."""

import math
import time

import torch

from h2dlab.measure.harness import sweep
from h2dlab.measure.spec import SweepSpec
from h2dlab.measure.timing import Timer

KiB = 1024


def _copies(pause_s, n=20):
    dev = torch.device("cuda", 0)
    torch.zeros(1, device=dev)
    src = torch.empty(4 * KiB, dtype=torch.uint8).pin_memory()
    dst = torch.empty(4 * KiB, dtype=torch.uint8, device=dev)
    timer = Timer(dev, pause_s=pause_s)
    recs, starts = [], []
    for _ in range(n):
        t = time.perf_counter()
        _, rec = timer(lambda: dst.copy_(src, non_blocking=True))
        starts.append(time.perf_counter() - t)
        recs.append(rec)
    assert torch.equal(dst.cpu(), src)
    return recs, starts


def test_a_paused_timer_spins_before_the_copy_and_times_only_the_copy():
    paused, took = _copies(0.010)
    plain, _ = _copies(0.0)
    for rec in paused + plain:
        assert math.isfinite(rec["event_ms"]) and rec["event_ms"] > 0, rec
        assert math.isfinite(rec["wall_ms"]) and rec["event_ms"] <= rec["wall_ms"] + 0.05, rec
    # The pause happens before t0: a 4 KiB copy's wall time does not hold the 10 ms.
    assert all(rec["wall_ms"] < 5 for rec in paused), [r["wall_ms"] for r in paused]
    assert all(t >= 0.010 for t in took), took  # each call did spin its 10 ms


def test_measure_pause_runs_on_cuda_and_records_it(tmp_path):
    spec = SweepSpec(("pinned_reuse", "pageable"), (4 * KiB, 64 * KiB), device="cuda",
                     reps=5, warmup=1, order="interleaved", seed=1, pause_ms=3)  # fmt: skip
    df = sweep(spec, out=tmp_path / "p.csv", progress=False)
    assert (df["error"] == "").all() and len(df) == 2 * 2 * 6
    assert df["event_ms"].notna().all() and df["wall_ms"].lt(500).all()
    assert df.attrs["env"]["spec"]["pause_ms"] == 3.0
