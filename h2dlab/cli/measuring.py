"""The ``h2dlab duplex`` and ``h2dlab batch`` subcommands (registered by ``h2dlab.cli.main``).

Device-to-host sweeps need no command of their own: name the ``d2h_`` strategies, e.g.
``h2dlab measure --strategies d2h_pageable,d2h_pinned_reuse,d2h_non_blocking,d2h_staged``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from h2dlab.cli.common import abbreviates, names, sizes_arg, whole_arg

__all__ = ["COMMANDS", "LAYOUTS", "add_parser", "batch_spec", "duplex_spec", "run"]

#: The subcommands this module adds.
COMMANDS = ("duplex", "batch")
#: ``batch_methods.LAYOUTS``, repeated here so that building the parser imports no torch
#: (every h2dlab command builds it; tests/cli/test_cli_ux.py checks that the two agree).
LAYOUTS = ("equal", "mixed")
JSON_HELP = "one JSON object on stdout at the end: the files written and each cell's result (README)"


def _counts(text: str) -> list[int]:
    from h2dlab.units import parse_int

    parts = [v.strip() for v in text.split(",")]
    if "" in parts and any(parts):  # `1,,2` or `,1`: a slip, refused as --sizes and --totals refuse it
        raise argparse.ArgumentTypeError(
            f"{text!r} has an empty entry: write whole numbers separated by single commas"
        )
    try:
        vals = [parse_int(v) for v in parts if v]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma list of whole numbers, e.g. 1,16,64"
        ) from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers of at least 1, e.g. 1,16,64")
    return vals


def add_parser(subparsers: Any) -> None:
    """Add ``duplex`` and ``batch`` to the ``h2dlab`` command's subparsers."""
    d = subparsers.add_parser(
        "duplex", help="host-to-device and device-to-host at once on two streams, beside each alone"
    )
    d.add_argument(
        "--sizes", type=sizes_arg, default=None, help="bytes per direction [1MiB,16MiB,64MiB,256MiB,1GiB]"
    )
    d.add_argument("--reps", type=whole_arg(1), default=10, help="timed rounds per size [10]")
    d.add_argument("--warmup", type=whole_arg(0), default=2, help="labelled warm-up rounds per size [2]")
    d.add_argument("--device", default="cuda", help="cuda or cuda:N [cuda]")
    d.add_argument("--seed", type=whole_arg(None), default=0, help="seeds the order and the copied bytes [0]")
    d.add_argument("--out", required=True, help="output table: .csv, .csv.gz, .parquet or .xlsx")
    d.add_argument(
        "--force", action="store_true", help="replace an existing --out (or an unfinished run's rows)"
    )
    d.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    d.add_argument("--json", action="store_true", help=JSON_HELP)

    b = subparsers.add_parser("batch", help="a batch of many tensors to the GPU, by each way of moving it")
    b.add_argument("--counts", type=_counts, default=None, help="tensors per batch [1,16,64,256,1024]")
    b.add_argument("--totals", type=sizes_arg, default=None, help="bytes per batch [1MiB,16MiB,256MiB,1GiB]")
    b.add_argument(
        "--layout", choices=LAYOUTS, default=LAYOUTS[0], help="equal or mixed tensor sizes [equal]"
    )
    b.add_argument(
        "--methods", default=None, help="comma list (default: all; unavailable ones are error rows)"
    )
    b.add_argument("--reps", type=whole_arg(1), default=10, help="timed rounds per batch shape [10]")
    b.add_argument(
        "--reps-large", type=whole_arg(1), default=5, help="timed rounds from 256 MiB per batch [5]"
    )
    b.add_argument("--warmup", type=whole_arg(0), default=1, help="labelled warm-up rounds [1]")
    b.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (host copies only) [cuda]")
    b.add_argument("--seed", type=whole_arg(None), default=0, help="seeds the order and the copied bytes [0]")
    b.add_argument("--out", required=True, help="output table: .csv, .csv.gz, .parquet or .xlsx")
    b.add_argument("--resume", action="store_true", help="continue the interrupted run in --out")
    b.add_argument(
        "--force", action="store_true", help="replace an existing --out (or an unfinished run's rows)"
    )
    b.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    b.add_argument("--json", action="store_true", help=JSON_HELP)


def duplex_spec(a: argparse.Namespace):
    """The :class:`~h2dlab.measure.duplex.DuplexSpec` the ``duplex`` options describe."""
    from h2dlab.measure.duplex import DEFAULT_SIZES, DuplexSpec

    return DuplexSpec(tuple(a.sizes or DEFAULT_SIZES), a.reps, a.warmup, a.device, a.seed)


def batch_spec(a: argparse.Namespace):
    """The :class:`~h2dlab.measure.batch.BatchSpec` the ``batch`` options describe."""
    from h2dlab.measure.batch import DEFAULT_COUNTS, DEFAULT_TOTALS, BatchSpec

    methods = names(a.methods, "--methods")
    return BatchSpec(
        counts=tuple(a.counts or DEFAULT_COUNTS),
        totals=tuple(a.totals or DEFAULT_TOTALS),
        layout=a.layout,
        methods=methods,
        reps=a.reps,
        warmup=a.warmup,
        reps_large=a.reps_large,
        device=a.device,
        seed=a.seed,
    )


def run(a: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Run ``duplex`` or ``batch``: the result table (or ``--json``), then the rows written;
    0 when done, 130 when interrupted (rows kept)."""
    from h2dlab.cli.checks import check_out, check_target

    argv = list(argv or [])
    resume = bool(getattr(a, "resume", False))
    if a.cmd == "duplex":
        from h2dlab.measure.duplex import duplex

        spec, fn, more = duplex_spec(a), duplex, {}
    elif a.cmd == "batch":
        from h2dlab.measure.batch import batch

        spec, fn, more = batch_spec(a), batch, {"resume": resume}
    else:
        raise ValueError(f"{a.cmd} is not one of {', '.join(COMMANDS)}")
    out = check_target(
        check_out(a.out),
        resume=resume,
        force=a.force,
        resumable=a.cmd == "batch",
        kind=spec.to_dict().get("kind"),
    )
    df = fn(spec, out=out, progress=not a.no_progress, argv=["h2dlab", *argv], force=a.force, **more)
    from h2dlab.cli.results import finish

    return finish(df, out, a.cmd, bool(getattr(a, "json", False)), lambda: _done(a, df, out, argv))


def _done(a: argparse.Namespace, df: Any, out: Any, argv: list[str]) -> int:
    """The lines on stderr at the end (rows written, or kept and how to go on); the exit code."""
    import shlex

    from h2dlab.recording import datasets

    errors = int((df["error"] != "").sum()) if len(df) else 0
    if df.attrs.get("stopped"):
        again = [x for x in ["h2dlab", *argv] if not abbreviates(x, "--resume", "--force")]
        how = "resume with: " if a.cmd == "batch" else "a duplex run starts over: measure it again with "
        flag = "--resume" if a.cmd == "batch" else "--force"
        print(
            f"h2dlab: interrupted: {len(df)} rows kept in {out}; {how}{shlex.join([*again, flag])}",
            file=sys.stderr,
        )
        return 130
    print(
        f"wrote {out} ({len(df)} rows, {errors} with an error) and {datasets.env_path(out).name}",
        file=sys.stderr,
    )
    if errors:
        print(f"note: e.g. {df.loc[df['error'] != '', 'error'].iloc[0]}", file=sys.stderr)
    return 0
