# ruff: noqa: B023, F821, E402 - each lambda is called at once inside its loop; names are deleted
# at the loop's end to free GPU memory; sys.path is set before the kit is imported.
"""Probe #30: where does the kit's small-copy event time come from? One process, each
variant times the same copies; prints medians (us) per (variant, strategy, size)."""

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
torch.cuda.init()
torch.empty(1, device=dev)
N = 300
out = []


def bare(fn, pre=None, n=N):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ev, iss = [], []
    for i in range(n + 20):
        torch.cuda.synchronize(dev)
        if pre:
            pre()
        t0 = time.perf_counter()
        s.record()
        y = fn()
        e.record()
        t1 = time.perf_counter()
        torch.cuda.synchronize(dev)
        if i >= 20:
            ev.append(s.elapsed_time(e) * 1e3)
            iss.append((t1 - t0) * 1e6)
        del y
    return statistics.median(ev), statistics.median(iss)


def rusage():
    resource.getrusage(resource.RUSAGE_THREAD)


def sched():
    sched_state()


def allocs():
    host_alloc_count()
    device_segment_count(dev)


def yield0():
    os.sched_yield()


def pyjunk():
    {str(i): i for i in range(200)}


def allpre():
    rusage()
    resource.getrusage(resource.RUSAGE_SELF)
    sched()
    allocs()
    time.process_time()
    time.thread_time()


def spin50():
    u = time.perf_counter() + 50e-6
    while time.perf_counter() < u:
        pass


src = torch.randint(0, 255, (1 << 20,), dtype=torch.uint8)
for name in ("pinned_reuse", "pageable"):
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
        row = {"strategy": name, "size": size, "reference": m.median * 1e6}
        for label, pre in [
            ("bare", None),
            ("rusage", rusage),
            ("sched", sched),
            ("allocs", allocs),
            ("yield", yield0),
            ("pyjunk", pyjunk),
            ("spin50", spin50),
            ("allpre", allpre),
        ]:
            row[label], row[label + "_issue"] = bare(fn, pre)
        for ev in ("light", "full"):
            t = Timer(dev, evidence=ev)
            evs, iss = [], []
            for i in range(N + 20):
                y, rec = t(fn)
                if i >= 20:
                    evs.append(rec["event_ms"] * 1e3)
                    iss.append(rec["issue_ms"] * 1e3)
                del y
            row["timer_" + ev], row["timer_" + ev + "_issue"] = statistics.median(evs), statistics.median(iss)
        st.cleanup()
        out.append(row)
        print(
            json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()}), flush=True
        )
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "p30.json"), "w"), indent=1)
