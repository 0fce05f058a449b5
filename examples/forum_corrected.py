"""The forum's copy experiment, corrected: CUDA started before timing, a warm-up copy per
cell, repetitions in shuffled order, CUDA events beside the host clock, buffers made once
and no empty_cache() in the timed loop; median and quartiles printed. Run: python forum_corrected.py"""

import random
import statistics as st
import time

import torch

SIZES, REPS = [2**k for k in range(10, 31, 4)], 10  # 1 KiB .. 1 GiB, 10 timed copies each
dev = torch.device("cuda")
torch.zeros(1, device=dev)  # CUDA context start-up happens here, not in the first timing
cells = []
for n in SIZES:
    src, dst = torch.ones(n, dtype=torch.uint8), torch.empty(n, dtype=torch.uint8, device=dev)
    cells += [("pageable", n, src, dst), ("pinned", n, src.pin_memory(), dst)]
for _, _, s, d in cells:
    d.copy_(s)  # warm-up: one untimed copy per cell (allocators, first-touch, clocks)
plan = [c for c in cells for _ in range(REPS)]
random.Random(0).shuffle(plan)  # a slow moment spreads over sizes instead of posing as one
times: dict[tuple[str, int], list[tuple[float, float]]] = {}
ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
for kind, n, s, d in plan:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    ev0.record()
    d.copy_(s, non_blocking=True)
    ev1.record()
    ev1.synchronize()
    times.setdefault((kind, n), []).append((ev0.elapsed_time(ev1), (time.perf_counter() - t0) * 1e3))
print("memory size_bytes event_ms_median event_ms_q1 event_ms_q3 host_ms_median GB/s")
for (kind, n), v in sorted(times.items()):
    ev = [e for e, _ in v]
    q1, med, q3 = st.quantiles(ev, n=4)
    print(f"{kind} {n} {med:.4f} {q1:.4f} {q3:.4f} {st.median(h for _, h in v):.4f} {n / med / 1e6:.2f}")
