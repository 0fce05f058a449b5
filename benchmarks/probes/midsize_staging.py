# ruff: noqa: B023, F821, E402 - each lambda is called at once inside its loop; names are deleted
# at the loop's end to free GPU memory; sys.path is set before the kit is imported.
"""Probe #34: mid-size pageable->GPU copies: to_device against simple staging schedules."""

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
print("torch threads", torch.get_num_threads(), "cpus", os.cpu_count(), flush=True)


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


rows = []
for size in (1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB):
    n = 40 if size <= 64 * MiB else 15
    x = torch.randint(0, 255, (size,), dtype=torch.uint8)
    pin = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    pin.copy_(x)
    dst = torch.empty(size, dtype=torch.uint8, device=dev)
    stg = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    r = {"size_mib": size // MiB}
    r["pinned_reuse"] = wall(lambda: dst.copy_(pin, non_blocking=True), n)
    r["to"] = wall(lambda: x.to(dev), n)
    r["to_device"] = wall(lambda: to_device(x, dev), n)
    r["host_copy_only"] = wall(lambda: stg.copy_(x), n)

    def simple():
        stg.copy_(x)
        return dst.copy_(stg, non_blocking=True)

    r["stage_then_copy"] = wall(simple, n)
    for c in (1, 2, 4, 8, 16):
        cb = c * MiB
        if cb >= size:
            continue

        def chunked(cb=cb):
            for a in range(0, size, cb):
                stg[a : a + cb].copy_(x[a : a + cb])
                dst[a : a + cb].copy_(stg[a : a + cb], non_blocking=True)
            return dst

        r[f"chunked_{c}MiB"] = wall(chunked, n)
    for th in (4, 8):
        old = torch.get_num_threads()
        torch.set_num_threads(th)
        r[f"host_copy_only_t{th}"] = wall(lambda: stg.copy_(x), n)
        torch.set_num_threads(old)
    gb = {k: (round(size / v / 1e6, 1) if k != "size_mib" else v) for k, v in r.items()}
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}), flush=True)
    print("GB/s", json.dumps(gb), flush=True)
    rows.append(r)
    del x, pin, dst, stg
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "p34.json"), "w"), indent=1)
