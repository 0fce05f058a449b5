# ruff: noqa: B023, F821, E402 - each lambda is called at once inside its loop; sys.path is set before the kit is imported.
"""Probe #34: how a mid-size pageable copy (4-256 MiB) could be cut, timed in one process.

For each size: ``pinned_reuse`` (the link's rate), ``.to()``, ``to_device`` as shipped, the host
copy alone, and caller-thread pipelines that copy chunk *i* into a pinned buffer with
``Tensor.copy_`` (PyTorch's intra-op threads) and queue its DMA on a side stream at once:
equal chunks (2-8) and growing chunks (the first small, each next ``ratio`` times larger, so
each host copy hides under the previous DMA). Wall time of copy + synchronize, median of
``n`` after 5 warm-up calls. Writes ``$OUT/midsize_schedules.json`` (default: the current folder).

    PYTHONPATH=$PWD python3 benchmarks/probes/midsize_schedules.py     # ~60-90 s on an H200
"""

import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.getcwd())
from h2dlab.transfer.fastpath import to_device

dev = torch.device("cuda", 0)
torch.empty(1, device=dev)
MiB = 1 << 20
ALIGN = 64 * 1024
side = torch.cuda.Stream(dev)


def wall(fn, n):
    ts = []
    for i in range(n + 5):
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        y = fn()
        torch.cuda.synchronize(dev)
        if i >= 5:
            ts.append((time.perf_counter() - t0) * 1e3)
        del y
    return statistics.median(ts)


def equal_bounds(size, k):
    step = -(-size // k)
    step = -(-step // ALIGN) * ALIGN
    return list(range(0, size, step)) + [size]


def growing_bounds(size, first, ratio):
    b, n = [0], first
    while b[-1] < size:
        b.append(min(size, b[-1] + max(ALIGN, (int(n) // ALIGN) * ALIGN)))
        n *= ratio
    return b


def pipeline(x, stg, dst, bounds):
    """Caller-thread staging: each chunk's host copy, then its DMA queued on `side` at once."""
    cur = torch.cuda.current_stream(dev)
    side.wait_stream(cur)
    for a, b in zip(bounds, bounds[1:], strict=False):
        stg[a:b].copy_(x[a:b])
        with torch.cuda.stream(side):
            dst[a:b].copy_(stg[a:b], non_blocking=True)
    cur.wait_stream(side)
    return dst


rows = []
t_all = time.perf_counter()
print("torch threads", torch.get_num_threads(), "cpus", os.cpu_count(), flush=True)
for size in (4 * MiB, 16 * MiB, 38535168, 64 * MiB, 256 * MiB):
    n = 30 if size <= 64 * MiB else 12
    x = torch.randint(0, 255, (size,), dtype=torch.uint8)
    pin = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    pin.copy_(x)
    dst = torch.empty(size, dtype=torch.uint8, device=dev)
    stg = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    r = {"size_bytes": size}
    r["pinned_reuse"] = wall(lambda: dst.copy_(pin, non_blocking=True), n)
    r["to"] = wall(lambda: x.to(dev), n)
    r["to_device"] = wall(lambda: to_device(x, dev), n)
    r["host_copy_only"] = wall(lambda: stg.copy_(x), n)
    for k in (1, 2, 3, 4, 6, 8):
        bb = equal_bounds(size, k)
        r[f"equal_{k}"] = wall(lambda: pipeline(x, stg, dst, bb), n)
    for first in (1 * MiB, 2 * MiB, 4 * MiB):
        for ratio in (1.5, 2.0):
            if first >= size:
                continue
            bb = growing_bounds(size, first, ratio)
            r[f"grow_{first // MiB}MiB_x{ratio}"] = wall(lambda: pipeline(x, stg, dst, bb), n)
    best = min((k for k in r if k.startswith(("equal_", "grow_"))), key=r.get)
    r["best_pipeline"] = best
    r["best_over_pinned_reuse_rate"] = r["pinned_reuse"] / r[best]
    r["to_device_over_pinned_reuse_rate"] = r["pinned_reuse"] / r["to_device"]
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}), flush=True)
    rows.append(r)
    del x, pin, dst, stg
out = {"what": __doc__.splitlines()[0], "ms": rows, "elapsed_s": time.perf_counter() - t_all,
       "torch": torch.__version__, "gpu": torch.cuda.get_device_name(dev)}  # fmt: skip
with open(os.path.join(os.environ.get("OUT", "."), "midsize_schedules.json"), "w") as f:
    json.dump(out, f, indent=1)
