"""What the per-copy evidence costs: h2dlab's Timer around an empty callable, and the
scheduler read it makes twice per copy, against a bare host-clock pair and against
PyTorch's own smallest copy (``Tensor.copy_`` of 1 KiB on the CPU), measured in one run.

Each figure is the median, over ``--blocks`` blocks, of the mean time per call in a block of
``--calls`` calls (after a warm-up). Targets: the Timer adds at most 100 us per copy and the
scheduler read costs at most 30 us (loose bounds, for a busy shared 2-core machine). Exit 1
when a target fails.

    python3 benchmarks/bench_evidence.py [--blocks 7] [--calls 2000] [--json OUT]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from bench_analysis import settle  # noqa: E402

from h2dlab.threadstat import sched_state  # noqa: E402
from h2dlab.timing import Timer  # noqa: E402

__all__ = ["TARGETS", "main", "measure", "per_call_us", "verdicts"]

#: Upper bounds in microseconds per call.
TARGETS = {"timer_us": 100.0, "sched_state_us": 30.0}


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


def measure(*, blocks: int = 7, calls: int = 2000) -> dict[str, float]:
    """The four costs (us per call) and the Timer's cost over PyTorch's 1 KiB copy."""
    empty = lambda: None  # noqa: E731
    clock = time.perf_counter

    def bare() -> None:
        t0 = clock()
        empty()
        clock() - t0

    timer = Timer(torch.device("cpu"))
    src, dst = torch.ones(256), torch.empty(256)  # 1 KiB of float32
    out = {
        "bare_clock_us": per_call_us(bare, blocks=blocks, calls=calls),
        "timer_us": per_call_us(lambda: timer(empty), blocks=blocks, calls=calls),
        "sched_state_us": per_call_us(sched_state, blocks=blocks, calls=calls),
        "torch_copy_1KiB_us": per_call_us(lambda: dst.copy_(src), blocks=blocks, calls=calls),
    }
    out["timer_over_torch_copy"] = out["timer_us"] / out["torch_copy_1KiB_us"]
    return out


def verdicts(res: dict[str, float]) -> list[tuple[str, bool]]:
    """One line per target: its text and whether it holds."""
    return [
        (f"{key} = {res[key]:.1f} us (target <= {bound:g} us)", res[key] <= bound)
        for key, bound in TARGETS.items()
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=7)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    if args.blocks < 1 or args.calls < 1:
        ap.error("--blocks and --calls must be at least 1")
    res = measure(blocks=args.blocks, calls=args.calls)
    print(
        f"per call: bare host-clock pair {res['bare_clock_us']:.2f} us; h2dlab Timer with evidence "
        f"{res['timer_us']:.2f} us; scheduler read {res['sched_state_us']:.2f} us; PyTorch's 1 KiB "
        f"copy_ {res['torch_copy_1KiB_us']:.2f} us (Timer / copy_ = {res['timer_over_torch_copy']:.1f}x)"
    )
    return settle(verdicts(res), res, args.json)


if __name__ == "__main__":
    sys.exit(main())
