"""The ``h2dlab workload`` subcommand (registered by ``h2dlab.cli.main``): the recipes inside a
training-like step, beside the same step with the batch already on the GPU."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from h2dlab.cli.common import names, whole_arg

__all__ = ["add_parser", "run", "shape_arg", "spec"]


def shape_arg(text: str) -> tuple[int, ...]:
    """``64x3x224x224`` as a tuple of whole numbers (argparse type)."""
    from h2dlab.units import parse_int

    try:
        dims = tuple(parse_int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape such as 64x3x224x224") from None
    if not dims or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every dimension must be at least 1")
    return dims


def _ms(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of milliseconds") from None
    if not 0 < v <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r}: give milliseconds above 0 and at most 1000")
    return v


def add_parser(subparsers: Any) -> None:
    """Add ``workload`` to the ``h2dlab`` command's subparsers."""
    w = subparsers.add_parser(
        "workload", help="each recipe inside a training-like step, beside the batch already on the GPU"
    )
    w.add_argument(
        "--ways", default=None, help="comma list of ways (default: all; see h2dlab.measure.workload.WAYS)"
    )
    w.add_argument("--batch", type=shape_arg, default=None, help="float32 batch shape [64x3x224x224]")
    w.add_argument("--steps", type=whole_arg(1), default=30, help="timed steps per way and pass [30]")
    w.add_argument("--warmup", type=whole_arg(0), default=12, help="labelled warm-up steps per block [12]")
    w.add_argument("--passes", type=whole_arg(1), default=2, help="passes over the ways, order shuffled [2]")
    w.add_argument("--compute-ms", type=_ms, default=4.5, help="the step's compute, calibrated [4.5]")
    w.add_argument("--matmuls", type=whole_arg(0), default=0, help="products per step; 0: calibrate [0]")
    w.add_argument("--workers", type=whole_arg(0), default=4, help="the DataLoader ways' num_workers [4]")
    w.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (plain copies) [cuda]")
    w.add_argument("--seed", type=whole_arg(None), default=0, help="seeds the data and the order [0]")
    w.add_argument("--out", required=True, help="output table: .csv, .csv.gz, .parquet or .xlsx")
    w.add_argument("--force", action="store_true", help="replace an existing --out")
    w.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def spec(a: argparse.Namespace):
    """The :class:`~h2dlab.measure.workload.WorkloadSpec` the options describe (``UsageError`` if invalid)."""
    from h2dlab.measure.workload import BATCH_SHAPE, WorkloadSpec

    return WorkloadSpec(
        ways=names(a.ways, "--ways"),
        shape=tuple(a.batch or BATCH_SHAPE),
        steps=a.steps,
        warmup=a.warmup,
        passes=a.passes,
        compute_ms=a.compute_ms,
        matmuls=a.matmuls,
        workers=a.workers,
        device=a.device,
        seed=a.seed,
    )


def run(a: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Run ``workload``; 0 when done, 130 when interrupted (rows kept)."""
    from h2dlab.cli.checks import check_out, check_target
    from h2dlab.measure.workload import workload
    from h2dlab.recording import datasets

    s = spec(a)
    out = check_target(check_out(a.out), force=a.force, resumable=False)
    df = workload(s, out=out, progress=not a.no_progress, argv=["h2dlab", *(argv or [])], force=a.force)
    if df.attrs.get("stopped"):
        again = shlex.join(["h2dlab", *[x for x in argv or [] if x != "--force"], "--force"])
        print(
            f"h2dlab: interrupted: {len(df)} rows kept in {out}; a workload run starts over: {again}",
            file=sys.stderr,
        )
        return 130
    errors = int((df["error"] != "").sum()) if len(df) else 0
    print(
        f"wrote {out} ({len(df)} rows, {errors} with an error) and {datasets.env_path(out).name}",
        file=sys.stderr,
    )
    if errors:
        print(f"note: e.g. {df.loc[df['error'] != '', 'error'].iloc[0]}", file=sys.stderr)
    return 0
