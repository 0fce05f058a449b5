# ruff: noqa: B023, F821, E402 - each lambda is called at once inside its loop; names are deleted
# at the loop's end to free GPU memory; sys.path is set before the kit is imported.
"""Probe #30 (2): which host work between two timed copies slows the next pageable copy,
and which loop designs keep the kit's event time at the reference's."""

import json
import os
import resource
import statistics
import sys
import time

import torch

sys.path.insert(0, os.getcwd())
from torch.utils import benchmark

from h2dlab.measure import strategies
from h2dlab.measure.threadstat import sched_state
from h2dlab.measure.timing import Timer, device_segment_count, host_alloc_count

dev = torch.device("cuda", 0)
torch.empty(1, device=dev)
N = 300


def spin(us):
    u = time.perf_counter() + us * 1e-6
    while time.perf_counter() < u:
        pass


woken = torch.cuda.Event()


def wake():
    woken.record()
    woken.synchronize()


_w = torch.randint(0, 255, (1024,), dtype=torch.uint8)


def warm(n):
    _w.to(dev)


def snap():
    return (
        resource.getrusage(resource.RUSAGE_THREAD),
        sched_state(),
        host_alloc_count(),
        device_segment_count(dev),
        time.thread_time(),
        time.perf_counter(),
    )


def snap_small():
    return (
        resource.getrusage(resource.RUSAGE_THREAD),
        sched_state(),
        time.thread_time(),
        time.perf_counter(),
    )


def loop(fn, gap=None, pre=None, n=N):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ev, gaps = [], []
    last = None
    for i in range(n + 20):
        torch.cuda.synchronize(dev)
        if gap:
            gap()
        if pre:
            pre()
        t0 = time.perf_counter()
        if last is not None and i >= 20:
            gaps.append((t0 - last) * 1e6)
        s.record()
        y = fn()
        e.record()
        torch.cuda.synchronize(dev)
        last = time.perf_counter()
        if i >= 20:
            ev.append(s.elapsed_time(e) * 1e3)
        del y
    return round(statistics.median(ev), 1), round(statistics.median(gaps), 1)


def block(fn, n=N, reads=None):
    """Events per rep, all kept; per-copy sync; nothing else between copies but `reads`."""
    evs = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n + 20)
    ]
    snaps, last, gaps = [], None, []
    for i, (s, e) in enumerate(evs):
        if reads:
            snaps.append(reads())
        t0 = time.perf_counter()
        if last is not None and i >= 20:
            gaps.append((t0 - last) * 1e6)
        s.record()
        y = fn()
        e.record()
        torch.cuda.synchronize(dev)
        last = time.perf_counter()
        del y
    ev = [s.elapsed_time(e) * 1e3 for s, e in evs[20:]]
    return round(statistics.median(ev), 1), round(statistics.median(gaps), 1)


out = []
src = torch.randint(0, 255, (1 << 20,), dtype=torch.uint8)
for name in ("pageable", "pinned_reuse"):
    for size in (1024, 65536, 1 << 20):
        x = src[:size]
        st = strategies.get(name)
        st.prepare(x, dev)

        def fn():
            return st.copy(x)

        def sync():
            return torch.cuda.synchronize(dev)

        m = benchmark.Timer(stmt="fn(); sync()", globals={"fn": fn, "sync": sync}).blocked_autorange(
            min_run_time=0.4
        )
        row = {"strategy": name, "size": size, "reference": round(m.median * 1e6, 1)}
        row["bare"] = loop(fn)
        for us in (10, 20, 50, 100, 200):
            row[f"spin{us}"] = loop(fn, gap=lambda us=us: spin(us))
        row["spin200_wake"] = loop(fn, gap=lambda: spin(200), pre=wake)
        row["spin200_copy1k"] = loop(fn, gap=lambda: spin(200), pre=lambda: warm(1024))
        row["sleep200"] = loop(fn, gap=lambda: time.sleep(200e-6))
        row["block"] = block(fn)
        row["block_snap"] = block(fn, reads=snap)
        row["block_snap_small"] = block(fn, reads=snap_small)
        t = Timer(dev, evidence="light")
        evl = []
        for i in range(N + 20):
            y, rec = t(fn)
            if i >= 20:
                evl.append(rec["event_ms"] * 1e3)
            del y
        row["timer_light"] = round(statistics.median(evl), 1)
        st.cleanup()
        out.append(row)
        print(json.dumps(row), flush=True)
    if name == "pageable":
        pass
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "p30b.json"), "w"), indent=1)
