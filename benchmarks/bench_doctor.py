"""What ``h2dlab doctor`` costs on a large trace: a synthetic 500 MB Kineto-format trace
(named synthetic: the events are generated, no number in it is a measurement) read by the
doctor's streamed reader and analysed, beside ``json.load`` of the same file (what a reader
that loads the whole document does, as HTA and ``torch.profiler``'s own tools do), each in a
fresh process, with its wall time and peak memory (``ru_maxrss``).

    python benchmarks/bench_doctor.py [--mb 500] [--keep PATH]

Prints one line per reader (wall and CPU seconds: on a shared machine the CPU time is the
steadier figure) and the ratios (doctor / json.load). CPU only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_synthetic(path: Path, mb: float) -> int:
    """A synthetic trace of about ``mb`` MB: steps of cpu ops, launches, kernels and copies."""
    target = int(mb * 1e6)
    n = 0
    with open(path, "w") as f:
        f.write(
            '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "synthetic"}],\n"traceEvents": [\n'
        )
        step, corr, t = 0, 1, 0.0
        first = True
        while f.tell() < target:
            parts = [
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"ProfilerStep#{step}",
                    "pid": 1,
                    "tid": 1,
                    "ts": t,
                    "dur": 9000.0,
                    "args": {"External id": corr},
                },
            ]
            for k in range(40):  # 40 kernels per step, each launched by an op
                ts = t + 200 + k * 200
                parts += [
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": "aten::mm",
                        "pid": 1,
                        "tid": 1,
                        "ts": ts,
                        "dur": 8.0,
                        "args": {"External id": corr, "Record function id": 0, "Sequence number": 0},
                    },
                    {
                        "ph": "X",
                        "cat": "cuda_runtime",
                        "name": "cudaLaunchKernel",
                        "pid": 1,
                        "tid": 1,
                        "ts": ts + 1,
                        "dur": 5.0,
                        "args": {"cbid": 211, "correlation": corr},
                    },
                    {
                        "ph": "f",
                        "id": corr,
                        "pid": 0,
                        "tid": 7,
                        "ts": ts + 50,
                        "cat": "ac2g",
                        "name": "ac2g",
                        "bp": "e",
                    },
                    {
                        "ph": "X",
                        "cat": "kernel",
                        "name": "sm90_xmma_gemm_bf16bf16_bf16f32_synthetic",
                        "pid": 0,
                        "tid": 7,
                        "ts": ts + 50,
                        "dur": 150.0,
                        "args": {
                            "External id": corr,
                            "device": 0,
                            "stream": 7,
                            "correlation": corr,
                            "registers per thread": 168,
                            "shared memory": 0,
                            "blocks per SM": 1.2,
                            "grid": [132, 1, 1],
                            "block": [384, 1, 1],
                        },
                    },
                ]
                corr += 1
            for k in range(8):  # 8 pageable copies per step
                ts = t + 8300 + k * 80
                parts += [
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": "aten::to",
                        "pid": 1,
                        "tid": 1,
                        "ts": ts,
                        "dur": 70.0,
                        "args": {"External id": corr},
                    },
                    {
                        "ph": "X",
                        "cat": "cuda_runtime",
                        "name": "cudaMemcpyAsync",
                        "pid": 1,
                        "tid": 1,
                        "ts": ts + 5,
                        "dur": 60.0,
                        "args": {"cbid": 41, "correlation": corr},
                    },
                    {
                        "ph": "X",
                        "cat": "gpu_memcpy",
                        "name": "Memcpy HtoD (Pageable -> Device)",
                        "pid": 0,
                        "tid": 7,
                        "ts": ts + 10,
                        "dur": 50.0,
                        "args": {
                            "device": 0,
                            "context": 1,
                            "stream": 7,
                            "correlation": corr,
                            "bytes": 1 << 20,
                            "memory bandwidth (GB/s)": 20.9,
                        },
                    },
                ]
                corr += 1
            text = ",\n".join(json.dumps(e) for e in parts)
            f.write(text if first else ",\n" + text)
            first = False
            n += len(parts)
            step += 1
            t += 10000.0
        f.write('\n],\n"traceName": "synthetic"}\n')
    return n


_CHILD = {
    "doctor": (
        "from h2dlab.doctor.trace import read_trace; from h2dlab.doctor.sites import analyse; "
        "a = analyse(read_trace(P)); print(len(a.copies), a.steps)"
    ),
    "json.load": "import json; d = json.load(open(P)); print(len(d['traceEvents']))",
}


def run(path: Path, which: str) -> tuple[float, float, float, str]:
    code = (
        "import resource, sys, time; P = sys.argv[1]; t0 = time.perf_counter(); "
        + _CHILD[which]
        + "; r = resource.getrusage(resource.RUSAGE_SELF)"
        + "; print(time.perf_counter() - t0, r.ru_maxrss / 1024, r.ru_utime + r.ru_stime)"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env, check=True
    )
    lines = out.stdout.strip().splitlines()
    s, mib, cpu = lines[-1].split()
    return float(s), float(mib), float(cpu), lines[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=500.0, help="size of the synthetic trace in MB [500]")
    ap.add_argument("--keep", default=None, help="write the trace here and keep it")
    a = ap.parse_args()
    tmp = None
    if a.keep:
        path = Path(a.keep)
    else:
        tmp = tempfile.TemporaryDirectory()
        path = Path(tmp.name) / "synthetic-trace.json"
    t0 = time.perf_counter()
    n = write_synthetic(path, a.mb)
    size = path.stat().st_size
    print(f"synthetic trace: {size / 1e6:.0f} MB, {n} events, written in {time.perf_counter() - t0:.1f} s")
    res = {w: run(path, w) for w in ("doctor", "json.load")}
    for w, (s, mib, cpu, what) in res.items():
        print(f"{w:10s} {s:7.1f} s wall  {cpu:7.1f} s CPU  peak {mib:8.0f} MiB  ({what})")
    d, j = res["doctor"], res["json.load"]
    print(
        f"doctor / json.load: wall {d[0] / j[0]:.2f}x, CPU {d[2] / j[2]:.2f}x, peak memory {d[1] / j[1]:.2f}x "
        "(the doctor's figures include importing pandas and analysing the trace)"
    )
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
