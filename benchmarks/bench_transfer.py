"""Host-to-device bandwidth of h2dlab.transfer.to_device against PyTorch's own ways,
all measured in one run on one machine.

    python benchmarks/bench_transfer.py --out benchmarks/results/h200.json

Methods (median GB/s of the synchronised host clock around each call, one call per
timing, after warm-up):

    to_device        h2dlab.transfer.to_device(x)              (pageable source)
    to               x.to("cuda")                               (PyTorch's own way)
    pin_then_to      x.pin_memory().to("cuda")                  (pinned block cached after the first)
    pin_then_to_reg  the same under PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host_register:True,
                     pinned_num_register_threads:8              (own subprocess)
    tensordict       TensorDict(x=x).to("cuda", non_blocking_pin=True, num_threads=8)
    pinned_reuse     a pinned buffer copied into a preallocated device buffer: the PCIe ceiling

and, at 1 GiB and 4 GiB, the host's own ceiling for any staged path: a multithreaded copy
from pageable into pinned memory on all cores. Ratios are against ``to`` at the same size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from h2dlab import transfer  # noqa: E402
from h2dlab.env import collect_env  # noqa: E402
from h2dlab.measure import random_source  # noqa: E402

KiB, MiB, GiB = 1024, 1024**2, 1024**3
REG_CONF = "pinned_use_cuda_host_register:True,pinned_num_register_threads:8"


def _source(nbytes: int) -> torch.Tensor:
    return random_source(nbytes, nbytes % 9973)


def _time(fn, reps: int, warmup: int) -> list[float]:
    """Seconds per call, each call timed on its own with synchronisation around it."""
    out = []
    for i in range(warmup + reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y = fn()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        del y
        if i >= warmup:
            out.append(t1 - t0)
    return out


def _methods(names: list[str]):
    m = {}
    if "to_device" in names:
        m["to_device"] = lambda x: lambda: transfer.to_device(x, "cuda")
    if "to" in names:
        m["to"] = lambda x: lambda: x.to("cuda")
    if "pin_then_to" in names:
        m["pin_then_to"] = lambda x: lambda: x.pin_memory().to("cuda", non_blocking=True)
    if "tensordict" in names:
        try:
            from tensordict import TensorDict

            def td(x):
                d = TensorDict({"x": x}, batch_size=[])
                return lambda: d.to("cuda", non_blocking_pin=True, num_threads=8)

            m["tensordict"] = td
        except Exception as exc:  # noqa: BLE001 - reported, not hidden
            print(f"tensordict unavailable: {exc}", file=sys.stderr)
    if "pinned_reuse" in names:

        def reuse(x):
            p = torch.empty_like(x, pin_memory=True)
            p.copy_(x)
            d = torch.empty_like(x, device="cuda")
            return lambda: d.copy_(p, non_blocking=True)

        m["pinned_reuse"] = reuse
    return m


def host_copy_ceiling(nbytes: int, threads: int, reps: int = 5) -> float:
    """GB/s of a multithreaded memcpy from pageable into pinned memory (all cores)."""
    src = _source(nbytes).numpy()
    dst_t = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dst = dst_t.numpy()
    step = -(-nbytes // threads)
    pool = ThreadPoolExecutor(threads)
    times = []
    for i in range(reps + 1):
        t0 = time.perf_counter()
        list(pool.map(lambda o: np.copyto(dst[o : o + step], src[o : o + step]), range(0, nbytes, step)))
        t1 = time.perf_counter()
        if i:
            times.append(t1 - t0)
    pool.shutdown()
    del dst_t
    return nbytes / np.median(times) / 1e9


def measure(sizes, names, reps_small, reps_large, quiet=False):
    rows = []
    methods = _methods(names)
    for n in sizes:
        x = _source(n)
        reps = reps_small if n < 64 * MiB else reps_large
        for name, make in methods.items():
            fn = make(x)
            ts = _time(fn, reps, warmup=2 if n < GiB else 1)
            med = float(np.median(ts))
            rows.append(
                {
                    "method": name,
                    "size_bytes": n,
                    "gbps_median": n / med / 1e9,
                    "ms_median": med * 1e3,
                    "ms_min": min(ts) * 1e3,
                    "reps": len(ts),
                }
            )
            if not quiet:
                print(
                    f"  {name:16s} {n / MiB:10.3f} MiB {n / med / 1e9:7.2f} GB/s", file=sys.stderr, flush=True
                )
            del fn
        del x
        torch.cuda.empty_cache()
    return rows


def tuning(nbytes: int, reps: int = 5):
    """to_device at one size over threads x chunk sizes."""
    x = _source(nbytes)
    out = []
    for threads in (4, 8, 12, 16):
        for chunk in (4 * MiB, 8 * MiB, 16 * MiB, 32 * MiB):
            fn = partial(transfer.to_device, x, "cuda", num_threads=threads, chunk_bytes=chunk)
            ts = _time(fn, reps, warmup=1)
            out.append(
                {"threads": threads, "chunk_bytes": chunk, "gbps_median": nbytes / float(np.median(ts)) / 1e9}
            )
            transfer.free_ring()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/h200.json"))
    ap.add_argument("--min", default="1KiB")
    ap.add_argument("--max", default="4GiB")
    ap.add_argument("--methods", default="to_device,to,pin_then_to,tensordict,pinned_reuse")
    ap.add_argument("--reps-small", type=int, default=20)
    ap.add_argument("--reps-large", type=int, default=5)
    ap.add_argument("--no-tuning", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print(
            "bench_transfer: needs a CUDA GPU; the recorded H200 result is benchmarks/results/h200.json",
            file=sys.stderr,
        )
        return 2
    from h2dlab.measure import parse_size

    lo, hi = parse_size(a.min), parse_size(a.max)
    sizes = [2**k for k in range(int(np.log2(lo)), int(np.log2(hi)) + 1)]
    names = a.methods.split(",")
    torch.zeros(1, device="cuda")
    if a.child:
        json.dump(measure(sizes, names, a.reps_small, a.reps_large, quiet=True), sys.stdout)
        return 0

    rows = measure(sizes, names, a.reps_small, a.reps_large)
    # The same pin-then-copy with cudaHostRegister-based pinning: a process setting of its own.
    env_child = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=REG_CONF)
    child = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            "--min",
            a.min,
            "--max",
            a.max,
            "--methods",
            "pin_then_to",
            "--reps-small",
            str(a.reps_small),
            "--reps-large",
            str(a.reps_large),
        ],
        capture_output=True,
        text=True,
        env=env_child,
        check=False,
    )
    if child.returncode == 0:
        for r in json.loads(child.stdout):
            r["method"] = "pin_then_to_reg"
            rows.append(r)
    else:
        print(f"pin_then_to_reg failed: {child.stderr.strip()[-300:]}", file=sys.stderr)

    base = {r["size_bytes"]: r["gbps_median"] for r in rows if r["method"] == "to"}
    for r in rows:
        r["ratio_vs_to"] = r["gbps_median"] / base[r["size_bytes"]] if r["size_bytes"] in base else None

    cores = len(os.sched_getaffinity(0))
    ceilings = {
        f"host_copy_{s // GiB}GiB_gbps": host_copy_ceiling(s, cores) for s in (GiB, 4 * GiB) if s <= hi
    }
    peak = max(r["gbps_median"] for r in rows if r["method"] == "pinned_reuse")
    ceilings["pinned_reuse_peak_gbps"] = peak
    host = min(v for k, v in ceilings.items() if k.startswith("host_copy"))
    ceilings["wall_gbps"] = min(host, peak)

    # Registering 1 GiB in place.
    x = _source(GiB)
    reg = []
    for _ in range(5):
        t0 = time.perf_counter()
        transfer.host_register(x.data_ptr(), x.numel())
        reg.append(time.perf_counter() - t0)
        transfer.host_unregister(x.data_ptr())
    ceilings["host_register_1GiB_ms"] = float(np.median(reg) * 1e3)
    del x

    tune = [] if a.no_tuning else tuning(GiB)
    result = {
        "env": collect_env(argv=[sys.executable, *sys.argv]),
        "rows": rows,
        "ceilings": ceilings,
        "tuning_1GiB": tune,
        "to_device_defaults": {
            "threads": transfer.default_threads(),
            "chunk_bytes": transfer.DEFAULT_CHUNK_BYTES,
            "min_bytes": transfer.DEFAULT_MIN_BYTES,
        },
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1, default=str) + "\n")

    # The table: GB/s per method, ratio to x.to("cuda").
    methods = list(dict.fromkeys(r["method"] for r in rows))
    print(f"{'size':>10s} " + " ".join(f"{m:>16s}" for m in methods))
    for n in sizes:
        cells = []
        for m in methods:
            r = next((r for r in rows if r["method"] == m and r["size_bytes"] == n), None)
            cells.append(f"{r['gbps_median']:6.2f} ({r['ratio_vs_to']:5.2f}x)" if r else " " * 16)
        print(f"{n / MiB:9.3f}M " + " ".join(f"{c:>16s}" for c in cells))
    td = {r["size_bytes"]: r["gbps_median"] for r in rows if r["method"] == "to_device"}
    for k, v in ceilings.items():
        print(f"{k}: {v:.2f}")
    for n in (GiB, 4 * GiB):
        if n in td:
            print(
                f"to_device at {n // GiB} GiB: {td[n]:.1f} GB/s = {td[n] / ceilings['wall_gbps']:.0%} of the "
                f"lower ceiling ({ceilings['wall_gbps']:.1f} GB/s)"
            )
    if tune:
        best = max(tune, key=lambda t: t["gbps_median"])
        print(
            f"tuning at 1 GiB: best {best['gbps_median']:.1f} GB/s with {best['threads']} threads, "
            f"{best['chunk_bytes'] // MiB} MiB chunks"
        )
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
