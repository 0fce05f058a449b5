"""The ``h2dlab`` command: env | datasets | measure | forum | explain | report.

User mistakes end in one line on stderr and a non-zero exit, never a traceback
(set H2DLAB_DEBUG=1 to see one).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A user mistake: printed as one line, exit code 2."""


def _sizes(text: str) -> list[int]:
    from h2dlab.measure import parse_sizes

    try:
        return parse_sizes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def _nonneg(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {v}")
    return v


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        self.exit(EXIT_USAGE, f"h2dlab: error: {message} (see h2dlab {self.prog.split()[-1]} --help)\n")


def _check_out(path: str) -> Path:
    from h2dlab.datasets import SUFFIXES, suffix_of

    out = Path(path)
    if suffix_of(out) not in SUFFIXES:
        raise CliError(f"cannot write {out.name!r}: give --out a name ending in {', '.join(SUFFIXES)}")
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise CliError(f"the folder {str(folder)!r} of --out does not exist: create it first")
    try:  # really try: os.access says yes to root even where writes fail
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError:
        raise CliError(f"the folder {str(folder)!r} of --out is not writable: choose another") from None
    return out


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="h2dlab", description="Measure and explain host-to-device copies in PyTorch.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    sub.add_parser("env", help="print this machine's fingerprint as JSON")
    sub.add_parser("datasets", help="list the recorded datasets")

    m = sub.add_parser("measure", help="time copies per strategy and size; one row per copy")
    m.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (host copies only) [cuda]")
    m.add_argument(
        "--sizes",
        type=_sizes,
        default=None,
        help="e.g. 1KiB,64MiB,1GiB or 1KiB..1GiB (powers of two) or forum [1KiB..64MiB]",
    )
    m.add_argument("--strategies", default=None, help="comma list (default: all available on the device)")
    m.add_argument("--reps", type=_positive, default=10, help="timed repetitions per size [10]")
    m.add_argument(
        "--reps-large", type=_positive, default=None, help="timed repetitions at >= 1 GiB [--reps]"
    )
    m.add_argument("--warmup", type=_nonneg, default=2, help="labelled warm-up copies per size [2]")
    m.add_argument(
        "--order",
        choices=["shuffled", "ascending", "interleaved"],
        default="shuffled",
        help="shuffled cells (reps back to back), ascending, or interleaved reps in shuffled rounds",
    )
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--empty-cache", action="store_true", help="torch.cuda.empty_cache() before every copy")
    m.add_argument(
        "--empty-host-cache", action="store_true", help="free PyTorch's cached pinned blocks before each size"
    )
    m.add_argument("--dtype", default="uint8", help="element type of the copied tensor [uint8]")
    m.add_argument("--out", required=True, help="output table: .csv, .csv.gz, .parquet or .xlsx")
    m.add_argument("--resume", action="store_true", help="continue the interrupted run in --out")
    m.add_argument(
        "--gpus",
        default=None,
        help="copy on several GPUs at once, one process each: all, 0,1, N, or 1..N to sweep the count",
    )
    m.add_argument("--no-progress", action="store_true")

    f = sub.add_parser("forum", help="the forum's experiment, re-implemented (run in a fresh process)")
    f.add_argument("--out", required=True)
    f.add_argument("--order", choices=["ascending", "shuffled"], default="ascending")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--device", default="cuda")
    f.add_argument("--seqs", default=None, help=argparse.SUPPRESS)  # a subset, for tests
    f.add_argument("--resume", action="store_true")
    f.add_argument("--no-progress", action="store_true")

    o = sub.add_parser(
        "overlap", help="timelines of a copy beside compute (pinned vs pageable, one vs two streams)"
    )
    o.add_argument("--size", default="256MiB")
    o.add_argument("--reps", type=_positive, default=5)
    o.add_argument("--device", default="cuda")
    o.add_argument("--out", required=True, help="a .csv or .csv.gz timeline, with its .env.json")

    e = sub.add_parser("explain", help="fit the latency model and explain flagged copies")
    e.add_argument("source", help="a recorded dataset name or a table's path")
    e.add_argument("--out", default=None, help="write the annotated table here")
    e.add_argument("--all", action="store_true", help="print every flagged row, not the first 40")

    r = sub.add_parser("report", help="execute the notebooks and render reports/*.html and a workbook")
    r.add_argument(
        "--mode",
        choices=["auto", "replay", "live"],
        default=None,
        help="override H2DLAB_MODE for the notebooks",
    )
    r.add_argument("--outdir", default="reports")
    r.add_argument(
        "--inplace", action="store_true", help="also refresh the outputs stored in notebooks/*.ipynb"
    )
    r.add_argument("--only", default=None, help="comma list of notebook names to run")
    return p


def _strategy_list(text: str | None) -> list[str] | None:
    from h2dlab import strategies

    if text is None:
        return None
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in strategies.REGISTRY]
    if unknown or not names:
        raise CliError(
            f"unknown strategy {unknown[0] if unknown else text!r}: choose from {', '.join(strategies.names())}"
        )
    return names


def _dtype(text: str):
    import torch

    dt = getattr(torch, text, None)
    if not isinstance(dt, torch.dtype):
        raise CliError(f"unknown dtype {text!r}: use e.g. uint8, float16, bfloat16, float32")
    return dt


def _finish_measure(df, out: Path, argv: list[str]) -> int:
    from h2dlab import datasets

    planned = df.attrs.get("planned_rows", len(df))
    errors = int((df["error"] != "").sum()) if len(df) else 0
    if df.attrs.get("stopped"):
        cmd = shlex.join(["h2dlab", *argv])
        if "--resume" not in argv:
            cmd += " --resume"
        print(
            f"h2dlab: interrupted: {len(df)} of {planned} rows kept in {out}; resume with: {cmd}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    timed = int((~df["warmup"]).sum()) if len(df) else 0
    print(
        f"wrote {out} ({len(df)} rows: {timed} timed, {len(df) - timed} warm-up, {errors} with an error) "
        f"and {datasets.env_path(out).name}",
        file=sys.stderr,
    )
    if errors:
        first = df.loc[df["error"] != "", "error"].iloc[0]
        print(f"note: {errors} row(s) record an error, e.g. {first}", file=sys.stderr)
    return 0


def _cmd_measure(a, argv) -> int:
    from h2dlab import measure

    out = _check_out(a.out)
    if a.gpus is not None:
        sizes = a.sizes or [2**k for k in range(20, 31)]
        df = measure.concurrent(
            _strategy_list(a.strategies),
            sizes,
            gpus=a.gpus,
            device=a.device,
            out=out,
            argv=["h2dlab", *argv],
            progress=not a.no_progress,
            reps=a.reps,
            warmup=a.warmup,
            order=a.order,
            seed=a.seed,
            empty_cache=a.empty_cache,
            reps_large=a.reps_large,
            dtype=_dtype(a.dtype),
            resume=a.resume,
        )
        per = df.groupby(["world", "gpu"]).size()
        print(f"wrote {out} ({len(df)} rows; rows per (GPUs at once, GPU): {per.to_dict()})", file=sys.stderr)
        return 0
    df = measure.sweep(
        _strategy_list(a.strategies),
        a.sizes,
        device=a.device,
        reps=a.reps,
        warmup=a.warmup,
        order=a.order,
        seed=a.seed,
        empty_cache=a.empty_cache,
        empty_host_cache_each_size=a.empty_host_cache,
        reps_large=a.reps_large,
        dtype=_dtype(a.dtype),
        out=out,
        resume=a.resume,
        progress=not a.no_progress,
        argv=["h2dlab", *argv],
    )
    return _finish_measure(df, out, argv)


def _cmd_forum(a, argv) -> int:
    from h2dlab import measure

    out = _check_out(a.out)
    seqs = None
    if a.seqs:
        try:
            seqs = [int(v) for v in a.seqs.split(",")]
        except ValueError:
            raise CliError(f"--seqs takes whole numbers, e.g. 1,6,11; got {a.seqs!r}") from None
    df = measure.forum(
        out,
        order=a.order,
        seed=a.seed,
        device=a.device,
        resume=a.resume,
        seqs=seqs,
        progress=not a.no_progress,
        argv=["h2dlab", *argv],
    )
    return _finish_measure(df, out, argv)


def _cmd_overlap(a, argv) -> int:
    from h2dlab import datasets, measure

    out = _check_out(a.out)
    if not out.name.endswith((".csv", ".csv.gz")):
        raise CliError("overlap writes a .csv or .csv.gz timeline")
    df = measure.overlap(measure.parse_size(a.size), reps=a.reps, device=a.device, argv=["h2dlab", *argv])
    df.to_csv(out, index=False)
    datasets.write_env(df.attrs["env"], datasets.env_path(out))
    med = df.assign(d=df.end_ms.clip(lower=0)).groupby("scenario")["d"].max()
    for scen, total in med.items():
        print(f"{scen:18s} last op ends at {total:8.2f} ms (worst of {a.reps} reps)")
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _cmd_explain(a, argv) -> int:
    from h2dlab import report

    return report.explain_cli(a.source, out=a.out, show_all=a.all)


def _cmd_report(a, argv) -> int:
    from h2dlab import report

    only = [n.strip() for n in a.only.split(",")] if a.only else None
    if only:
        unknown = [n for n in only if n not in report.NOTEBOOKS]
        if unknown:
            raise CliError(f"unknown notebook {unknown[0]!r}: choose from {', '.join(report.NOTEBOOKS)}")
    return report.build(outdir=a.outdir, mode=a.mode, notebooks=only, inplace=a.inplace)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        if args.cmd == "env":
            from h2dlab.env import collect_env

            print(json.dumps(collect_env(argv=["h2dlab", *argv]), indent=2, default=str))
            return 0
        if args.cmd == "datasets":
            from h2dlab.datasets import names

            for name, desc in names().items():
                print(f"{name:16s} {desc}")
            return 0
        return {
            "measure": _cmd_measure,
            "forum": _cmd_forum,
            "overlap": _cmd_overlap,
            "explain": _cmd_explain,
            "report": _cmd_report,
        }[args.cmd](args, argv)
    except BrokenPipeError:  # e.g. `h2dlab explain ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("h2dlab: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (CliError, ValueError, KeyError, MemoryError, RuntimeError, OSError) as exc:
        if os.environ.get("H2DLAB_DEBUG"):
            raise
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        first = (str(msg).strip().splitlines() or [type(exc).__name__])[0]
        print(f"h2dlab: error: {first}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
