"""What the per-copy evidence costs: h2dlab's Timer around an empty callable (full and light
evidence), each evidence reader alone, the row write, and the host time between two timed
copies of a real ``measure`` loop, beside a bare host-clock pair and PyTorch's own smallest
copy (``Tensor.copy_`` of 1 KiB on the CPU), measured in one run.

Each reader's figure is the median, over ``--blocks`` blocks, of the mean time per call in a
block of ``--calls`` calls (after a warm-up; a tenth as many calls for the readers that walk
every thread or ask NVML for processes). ``loop_gap_<evidence>_ms`` is the median host time
from the end of one timed copy to the start of the next (``causes_wake.idle_gap_ms``) in a
``measure`` run of ``--loop-reps`` 1 KiB copies, reps back to back (pinned_reuse on a GPU,
pageable on the CPU); ``loop_gap_interleaved_ms`` the same, light evidence, in an interleaved
run (``--order interleaved``: each round visits every cell once) of two strategies at 1 KiB,
64 KiB and 1 MiB (pinned_reuse and pageable on a GPU, pageable and d2h_pageable on the CPU),
about as many timed copies. Readers that need CUDA or NVML are ``null`` where absent.

Targets: the Timer with ``measure``'s default (light) evidence adds at most 100 us per copy
(the full evidence is measured, not bounded: it is opt-in), the scheduler read costs at most 30 us
(loose bounds, for a busy shared 2-core machine) and the light loop leaves at most 0.2 ms
between two timed copies, reps back to back and interleaved (issue #30; DESIGN.md "measure
like the reference"). Exit 1 when a target fails.

    python3 benchmarks/bench_evidence.py [--blocks 7] [--calls 2000] [--device cuda] [--json OUT]

(about 30 s on the H200 host with --device cuda; about 15 s on a 2-core CPU machine.)
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from bench_analysis import settle  # noqa: E402

from h2dlab.measure import timing  # noqa: E402
from h2dlab.measure.threadstat import others_cpu_ns, others_wait_ns, sched_state  # noqa: E402
from h2dlab.measure.timing import Timer  # noqa: E402

__all__ = ["TARGETS", "loop_gap_ms", "main", "measure", "per_call_us", "readers", "verdicts"]

#: Upper bounds: microseconds per call, and the loop's milliseconds between two copies.
TARGETS = {
    "timer_light_us": 100.0,
    "sched_state_us": 30.0,
    "loop_gap_light_ms": 0.2,
    "loop_gap_interleaved_ms": 0.2,
}
#: Readers slow enough to time with a tenth of the calls.
SLOW = ("others_cpu_ns_us", "others_wait_ns_us", "gpu_other_processes_us", "row_write_pandas_us")


def per_call_us(fn: Callable[[], object], *, blocks: int, calls: int) -> float:
    """Median over ``blocks`` blocks of the mean wall time per call of ``fn``, in us."""
    for _ in range(max(calls // 10, 1)):
        fn()
    per = []
    for _ in range(blocks):
        a = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - a) / calls * 1e6)
    return float(np.median(per))


def _row_writer(folder: Path):
    """A RowWriter on a scratch table, and a row as the loop writes it (from a real Timer)."""
    from h2dlab.measure.recorder import RowWriter

    _, rec = Timer(torch.device("cpu"))(lambda: None)
    row = {"run_id": "bench", "order": 1, "strategy": "pinned_reuse", "size_bytes": 1024, "shape": "(1024,)",
           "dtype": "uint8", "rep": 3, "warmup": False, "t_s": 1.25, "error": "", "direction": "h2d",
           "n_tensors": 1, "empty_cache": False, **rec}  # fmt: skip
    return RowWriter(folder / "rows.csv"), row


def readers(dev: torch.device, folder: Path) -> dict[str, Callable[[], object] | None]:
    """Each evidence reader and the row write as a no-argument call; None where this
    machine lacks what it reads (CUDA, NVML)."""
    import resource

    writer, row = _row_writer(folder)
    cols = writer.columns
    out: dict[str, Callable[[], object] | None] = {
        "getrusage_us": lambda: resource.getrusage(resource.RUSAGE_SELF),
        "others_cpu_ns_us": others_cpu_ns,
        "others_wait_ns_us": others_wait_ns,
        "row_write_us": lambda: writer.write(row),
        # what the loop did per row before schema 6
        "row_write_pandas_us": lambda: pd.DataFrame([{c: row.get(c) for c in cols}]).to_csv(
            io.StringIO(), index=False, header=False
        ),
    }
    live = dev.type == "cuda" and torch.cuda.is_initialized()
    nvml = live and timing._nvml(dev) is not None
    out.update(
        {
            "host_alloc_count_us": timing.host_alloc_count if live else None,
            "device_segment_count_us": (lambda: timing.device_segment_count(dev)) if live else None,
            "host_memory_stats_flat_us": torch.cuda.host_memory_stats if live else None,
            "memory_stats_flat_us": (lambda: torch.cuda.memory_stats(dev)) if live else None,
            "sm_clock_mhz_us": (lambda: timing.sm_clock_mhz(dev)) if nvml else None,
            "gpu_other_processes_us": (lambda: timing.gpu_other_processes(dev)) if nvml else None,
        }
    )
    return out


def loop_gap_ms(dev: torch.device, evidence: str, reps: int, order: str = "shuffled") -> float:
    """Median host time (ms) between two timed copies of a ``measure`` run on ``dev``: 1 KiB
    copies back to back, or (``order="interleaved"``) two strategies at three sizes in rounds,
    ``reps`` timed copies in all (at least one a cell)."""
    from h2dlab.explain.causes_wake import idle_gap_ms
    from h2dlab.measure.harness import sweep
    from h2dlab.measure.spec import SweepSpec

    cuda = dev.type == "cuda"
    if order == "interleaved":
        names = ("pinned_reuse", "pageable") if cuda else ("pageable", "d2h_pageable")
        sizes, reps = (1024, 65536, 2**20), max(reps // 6, 1)
    else:
        names, sizes = ("pinned_reuse" if cuda else "pageable",), (1024,)
    spec = SweepSpec(
        names, sizes, device=str(dev), reps=reps, warmup=2, evidence=evidence, order=order, seed=1
    )
    with tempfile.TemporaryDirectory() as folder:  # rows written as a recording writes them
        df = sweep(spec, out=Path(folder) / "gap.csv", progress=False)
    gaps = idle_gap_ms(df)[~df["warmup"].astype(bool)]
    return float(np.nanmedian(gaps.to_numpy(dtype=float)))


def measure(
    *, blocks: int = 7, calls: int = 2000, device: str = "cpu", loop_reps: int = 300
) -> dict[str, float | None]:
    """The costs (us per call), the Timer's cost over PyTorch's 1 KiB copy, and the loop's gaps."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.zeros(1, device=dev)  # CUDA started, as in a measuring run
    empty = lambda: None  # noqa: E731
    clock = time.perf_counter

    def bare() -> None:
        t0 = clock()
        empty()
        clock() - t0

    full, light = Timer(dev), Timer(dev, evidence="light")
    src, dst = torch.ones(256), torch.empty(256)  # 1 KiB of float32
    out: dict[str, float | None] = {
        "bare_clock_us": per_call_us(bare, blocks=blocks, calls=calls),
        "timer_us": per_call_us(lambda: full(empty), blocks=blocks, calls=calls),
        "timer_light_us": per_call_us(lambda: light(empty), blocks=blocks, calls=calls),
        "sched_state_us": per_call_us(sched_state, blocks=blocks, calls=calls),
        "torch_copy_1KiB_us": per_call_us(lambda: dst.copy_(src), blocks=blocks, calls=calls),
    }
    out["timer_over_torch_copy"] = out["timer_us"] / out["torch_copy_1KiB_us"]
    with tempfile.TemporaryDirectory() as folder:
        for key, fn in readers(dev, Path(folder)).items():
            n = max(calls // 10, 5) if key in SLOW else calls
            out[key] = None if fn is None else per_call_us(fn, blocks=blocks, calls=n)
    for evidence in ("light", "full"):
        out[f"loop_gap_{evidence}_ms"] = loop_gap_ms(dev, evidence, loop_reps)
    out["loop_gap_interleaved_ms"] = loop_gap_ms(dev, "light", loop_reps, order="interleaved")
    return out


def verdicts(res: dict[str, float | None]) -> list[tuple[str, bool]]:
    """One line per target: its text and whether it holds."""
    lines = []
    for key, bound in TARGETS.items():
        unit = "ms" if key.endswith("_ms") else "us"
        lines.append((f"{key} = {res[key]:.{2 if unit == 'ms' else 1}f} {unit} (target <= {bound:g} {unit})",
                      res[key] <= bound))  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=7)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--loop-reps", type=int, default=300, help="timed copies of the measure loop [300]")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    if args.blocks < 1 or args.calls < 1 or args.loop_reps < 3:
        ap.error("--blocks and --calls must be at least 1, --loop-reps at least 3")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: this machine has no CUDA GPU")
    res = measure(blocks=args.blocks, calls=args.calls, device=args.device, loop_reps=args.loop_reps)
    print(
        f"per call: bare host-clock pair {res['bare_clock_us']:.2f} us; h2dlab Timer with full evidence "
        f"{res['timer_us']:.2f} us, light {res['timer_light_us']:.2f} us; scheduler read "
        f"{res['sched_state_us']:.2f} us; PyTorch's 1 KiB copy_ {res['torch_copy_1KiB_us']:.2f} us "
        f"(Timer / copy_ = {res['timer_over_torch_copy']:.1f}x)"
    )
    for key, v in res.items():
        if key.endswith("_us") and key not in ("bare_clock_us", "timer_us", "timer_light_us"):
            print(f"  {key[:-3]:28s} " + ("not here (needs CUDA/NVML)" if v is None else f"{v:10.2f} us"))
    print(
        f"between two timed copies of measure on {args.device}: light evidence "
        f"{res['loop_gap_light_ms']:.3f} ms, full {res['loop_gap_full_ms']:.3f} ms (median); "
        f"interleaved, light evidence {res['loop_gap_interleaved_ms']:.3f} ms"
    )
    return settle(verdicts(res), res, args.json)


if __name__ == "__main__":
    sys.exit(main())
