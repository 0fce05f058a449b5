# ruff: noqa: B023, F821, E402 - each lambda is called at once inside its loop; names are deleted
# at the loop's end to free GPU memory; sys.path is set before the kit is imported.
"""Probe #32: why does pinned_once's step grow by less than its 1.2 ms copy? Rounds of
step / resident / resident-after-an-idle-gap, with NVML SM clock and power sampled."""

import json
import os
import statistics
import sys
import threading
import time

import torch

sys.path[:0] = [os.path.join(os.getcwd(), "data/traces"), os.getcwd()]
import pynvml
import workloads

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
dev = torch.device("cuda", 0)
items = {w.name: w for w in workloads.build(dev)}
label = ["idle"]
samples = []
stop = [False]


def sample():
    while not stop[0]:
        try:
            samples.append(
                (
                    label[0],
                    pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                    pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                )
            )
        except Exception:
            pass
        time.sleep(0.002)


th = threading.Thread(target=sample, daemon=True)
th.start()


def timed(fn, n=30):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e3


def gap(fn, s=1.2e-3):
    def g():
        u = time.perf_counter() + s
        while time.perf_counter() < u:
            pass
        fn()

    return g


res = {}
for name in ("batch_pinned_once", "batch_pageable", "small_packed"):
    wl = items[name]
    variants = {"step": wl.step, "resident": wl.resident, "resident_gap1.2ms": gap(wl.resident)}
    for _ in range(3):
        for f in variants.values():
            f()
    got = {k: [] for k in variants}
    for r in range(8):
        order = list(variants) if r % 2 == 0 else list(variants)[::-1]
        for k in order:
            label[0] = f"{name}:{k}"
            got[k].append(timed(variants[k]))
    label[0] = "idle"
    res[name] = {
        k: {"median_ms": statistics.median(v), "rounds": [round(x, 4) for x in v]} for k, v in got.items()
    }
    for k in variants:
        s = [x for x in samples if x[0] == f"{name}:{k}"]
        res[name][k]["sm_mhz_median"] = statistics.median([x[1] for x in s]) if s else None
        res[name][k]["power_w_median"] = statistics.median([x[2] for x in s]) if s else None
    print(
        name,
        json.dumps(
            {
                k: {
                    kk: (round(vv, 3) if isinstance(vv, float) else vv)
                    for kk, vv in v.items()
                    if kk != "rounds"
                }
                for k, v in res[name].items()
            }
        ),
        flush=True,
    )
stop[0] = True
print(
    "power limit W",
    pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
    "max SM MHz",
    pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "p32.json"), "w"), indent=1)
