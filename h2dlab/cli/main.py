"""The ``h2dlab`` command: env | datasets | strategies | measure | forum | overlap |
explain | compare | report | duplex | batch | record | doctor (``python -m h2dlab`` runs it too).

Each measuring command builds one run spec from its options and hands it on. Exit codes
(:data:`EXIT_CODES`, also printed by ``--help``): 0 done; 1 this machine or the run failed
(``Unavailable``: no CUDA; an ``OSError`` such as a full disk; a CUDA fault; a failed
notebook), in one line, and every bug with its traceback; 2 the command line or its input is
wrong (``UsageError``, a GPU index it lacks too), in one line; 130 interrupted, rows kept
(H2DLAB_DEBUG=1: a traceback for the one-line errors too).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import h2dlab.cli.survey as survey_command
import h2dlab.cli.workload as cli_workload
from h2dlab import __version__
from h2dlab.cli import common as cli_common
from h2dlab.cli import compare as cli_compare
from h2dlab.cli import doctor as cli_doctor
from h2dlab.cli import loop as cli_loop
from h2dlab.cli import measuring as cli_measuring
from h2dlab.cli import record as cli_record
from h2dlab.cli import results as cli_results
from h2dlab.cli import strategies as cli_strategies
from h2dlab.cli.checks import check_folder, check_out, check_plan, check_target, not_the_source
from h2dlab.cli.common import EXIT_CODES, EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, failure, finish_measure
from h2dlab.cli.common import Parser as _Parser
from h2dlab.cli.common import names as names_list
from h2dlab.cli.common import sizes_arg as _sizes
from h2dlab.cli.common import whole_arg as _whole
from h2dlab.errors import AlreadyDone, Unavailable, UsageError
from h2dlab.measure.spec import FORUM_ORDERS, ORDERS, ForumSpec, OverlapSpec, SweepSpec

__all__ = [
    "EXIT_CODES",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "build_parser",
    "check_out",
    "main",
    "spec_from_args",
    "run",
]

#: ``recording.session.MODES``, repeated so that building the parser imports no pandas
#: (``--help`` and ``--version`` stay instant; tests/cli/test_cli_light.py checks the two agree).
REPORT_MODES = ("auto", "replay", "live")
#: The commands whose --json prints one object at the end (what they print on the way goes to stderr).
JSON_AT_END = ("measure", "batch", "duplex", "record", "report")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand (choices from the package's constants)."""
    p = _Parser(prog="h2dlab", description="Measure and explain host-to-device copies in PyTorch.")
    p.add_argument("--version", action="version", version=f"h2dlab {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser, metavar="COMMAND")

    sub.add_parser("env", help="print this machine's fingerprint as JSON")
    d = sub.add_parser("datasets", help="list the recorded datasets")
    d.add_argument("--json", action="store_true", help="a JSON object: name -> description")
    cli_strategies.add_parser(sub)

    m = sub.add_parser("measure", help="time copies per strategy and size; one row per copy")
    m.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (host copies only) [cuda]")
    m.add_argument(
        "--sizes",
        type=_sizes,
        default=None,
        help="e.g. 1KiB,64MiB,1GiB or 1KiB..1GiB (powers of two) or forum "
        "[1KiB..64MiB; with --gpus 1MiB..1GiB]",
    )
    m.add_argument("--strategies", default=None, help="comma list (default: the device's h2d ones)")
    m.add_argument("--reps", type=_whole(1), default=10, help="timed repetitions per size [10]")
    m.add_argument(
        "--reps-large", type=_whole(1), default=None, help="timed repetitions at >= 1 GiB [--reps]"
    )
    m.add_argument("--warmup", type=_whole(0), default=2, help="labelled warm-up copies per size [2]")
    m.add_argument(
        "--order",
        choices=ORDERS,
        default=ORDERS[0],
        help="shuffled cells (reps back to back), ascending, or interleaved reps in shuffled rounds",
    )
    m.add_argument(
        "--seed", type=_whole(None), default=0, help="seeds the shuffled order and the copied bytes [0]"
    )
    m.add_argument("--empty-cache", action="store_true", help="torch.cuda.empty_cache() before every copy")
    m.add_argument(
        "--empty-host-cache", action="store_true", help="free PyTorch's cached pinned blocks before each size"
    )
    m.add_argument("--dtype", default="uint8", help="element type of the copied tensor [uint8]")
    cli_loop.add_options(m)  # --pause, --evidence, --reference
    m.add_argument("--out", required=True, help="output table: .csv, .csv.gz, .parquet or .xlsx")
    m.add_argument("--resume", action="store_true", help="continue the interrupted run in --out")
    m.add_argument(
        "--force", action="store_true", help="replace an existing --out (or an unfinished run's rows)"
    )
    m.add_argument(
        "--max-hours",
        type=cli_common.number_arg,
        default=24.0,
        help="refuse a plan estimated (at 1 GB/s) to take longer than this [24]",
    )
    m.add_argument(
        "--gpus",
        default=None,
        help="copy on several GPUs at once, one process each: all, 0,1, N, or 1..N to sweep the count",
    )
    m.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    m.add_argument("--json", action="store_true", help=cli_measuring.JSON_HELP)

    f = sub.add_parser(
        "forum", help="the forum's experiment, re-implemented (needs CUDA; run in a fresh process)"
    )
    f.add_argument("--out", required=True, help="output table: .csv, .csv.gz, .parquet or .xlsx")
    f.add_argument(
        "--order",
        choices=FORUM_ORDERS,
        default=FORUM_ORDERS[0],
        help=f"the forum's sizes in its own order, or shuffled [{FORUM_ORDERS[0]}]",
    )
    f.add_argument("--seed", type=_whole(None), default=0, help="seeds the shuffled order [0]")
    f.add_argument("--device", default="cuda", help="cuda or cuda:N [cuda]")
    f.add_argument("--seqs", default=None, help=argparse.SUPPRESS)  # a subset, for tests
    f.add_argument("--resume", action="store_true", help="continue the interrupted run in --out")
    f.add_argument(
        "--force", action="store_true", help="replace an existing --out (or an unfinished run's rows)"
    )
    f.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    o = sub.add_parser(
        "overlap", help="timelines of a copy beside compute (pinned vs pageable, one vs two streams)"
    )
    o.add_argument("--size", type=_sizes, default=[256 * 1024**2], help="one size [256MiB]")
    o.add_argument("--reps", type=_whole(1), default=5, help="repetitions of each scenario [5]")
    o.add_argument("--device", default="cuda", help="cuda or cuda:N (needs CUDA) [cuda]")
    o.add_argument("--out", required=True, help="a .csv or .csv.gz timeline, with its .env.json")
    o.add_argument("--force", action="store_true", help="replace an existing --out")

    e = sub.add_parser("explain", help="fit the latency model and explain flagged copies")
    e.add_argument("source", help="a dataset, a table, DATASET:RUN or RECORDING:KIND[:RUN] (h200:sweep)")
    e.add_argument("--out", default=None, help="write the annotated table here (and its .env.json)")
    e.add_argument("--force", action="store_true", help="replace an existing --out")
    e.add_argument("--all", action="store_true", help="print every flagged row, not the first 40")
    e.add_argument("--json", action="store_true", help="print the fit and flagged rows as JSON (see README)")

    r = sub.add_parser("report", help="execute the notebooks and render reports/*.html and a workbook")
    r.add_argument(
        "--mode", choices=REPORT_MODES, default=None, help="override H2DLAB_MODE for the notebooks"
    )
    r.add_argument("--outdir", default="reports", help="where the HTML pages and the workbook go [reports]")
    r.add_argument(
        "--inplace", action="store_true", help="also refresh the outputs stored in notebooks/*.ipynb"
    )
    r.add_argument("--only", default=None, help="comma list of notebook names to run")
    r.add_argument("--data", default=None, help="the recording to report: h200 or a folder [h200]")
    r.add_argument(
        "--json", action="store_true", help="one JSON object on stdout: the files written, the timing"
    )
    cli_workload.add_parser(sub)
    cli_measuring.add_parser(sub)  # duplex, batch
    cli_record.add_parser(sub)
    survey_command.add_parser(sub)
    cli_compare.add_parser(sub)
    cli_doctor.add_parser(sub)
    return p


def spec_from_args(a: argparse.Namespace) -> SweepSpec | ForumSpec | OverlapSpec:
    """The one run spec a measuring command's options describe (``UsageError`` if invalid)."""
    if a.cmd == "measure":
        from h2dlab.measure.concurrent import DEFAULT_SIZES as GPUS_SIZES
        from h2dlab.measure.spec import DEFAULT_SIZES

        names = names_list(a.strategies, "--strategies")
        sizes = a.sizes or (GPUS_SIZES if a.gpus is not None else DEFAULT_SIZES)
        spec = SweepSpec(
            strategies=names,
            sizes=tuple(sizes),
            device=a.device,
            reps=a.reps,
            warmup=a.warmup,
            reps_large=a.reps_large,
            order=a.order,
            seed=a.seed,
            empty_cache=a.empty_cache,
            empty_host_cache_each_size=a.empty_host_cache,
            dtype=a.dtype,
            pause_ms=a.pause,
            evidence=a.evidence,
        )
        cli_strategies.check_runnable(spec.strategies, spec.device)
        return spec
    if a.cmd == "forum":
        from h2dlab.units import parse_int

        seqs = None
        if a.seqs:
            try:
                seqs = tuple(parse_int(v) for v in a.seqs.split(","))
            except ValueError:
                raise UsageError(f"--seqs takes whole numbers, e.g. 1,6,11; got {a.seqs!r}") from None
        return ForumSpec(order=a.order, seed=a.seed, device=a.device, seqs=seqs)
    if a.cmd == "overlap":
        if len(a.size) != 1:
            raise UsageError(f"--size takes one size, got {len(a.size)}")
        return OverlapSpec(size_bytes=a.size[0], reps=a.reps, device=a.device)
    raise ValueError(f"{a.cmd} measures nothing")


def _cmd_measure(a, argv) -> int:
    if a.gpus is not None and a.resume:
        raise UsageError("--resume does not apply to --gpus: a run on several GPUs is run again")
    cli_loop.check(a)
    spec = spec_from_args(a)
    check_plan(spec, gpus=a.gpus, max_hours=a.max_hours)
    out = check_target(check_out(a.out), resume=a.resume, force=a.force, kind="sweep")
    from h2dlab.cli.checks import check_fits  # an .xlsx holds 1,048,575 rows: said before measuring

    check_fits(spec.planned_rows(), out)
    cmdline = ["h2dlab", *argv]
    if a.gpus is not None:
        from h2dlab.measure.concurrent import concurrent

        df = concurrent(spec, gpus=a.gpus, out=out, argv=cmdline, progress=not a.no_progress)
        return cli_results.finish(
            df, out, "measure", a.json, lambda: finish_measure(df, out, argv, resumable=False)
        )
    from h2dlab.measure.harness import sweep

    try:
        df = sweep(spec, out=out, resume=a.resume, force=a.force, progress=not a.no_progress, argv=cmdline)
        halted = cli_loop.after_sweep(a, df, out, spec)  # a line where the reference check was not taken
    except AlreadyDone:  # a finished table: with --reference, its check may still be missing
        taken = cli_loop.take_missing_reference(a, out, spec)
        if taken is None:
            raise
        df, halted = taken
    if halted:
        done = lambda: cli_loop.reference_not_taken(halted, lambda: finish_measure(df, out, argv))  # noqa: E731
        return cli_results.finish(df, out, "measure", a.json, done, reference_taken=False)
    return cli_results.finish(df, out, "measure", a.json, lambda: finish_measure(df, out, argv))


def _cmd_forum(a, argv) -> int:
    from h2dlab.measure.forum import forum

    spec = spec_from_args(a)
    out = check_target(check_out(a.out), resume=a.resume, force=a.force, kind="forum")
    df = forum(
        spec, out=out, resume=a.resume, force=a.force, progress=not a.no_progress, argv=["h2dlab", *argv]
    )
    return finish_measure(df, out, argv)


def _cmd_overlap(a, argv) -> int:
    from h2dlab.measure.overlap import TIMELINE_SUFFIXES, overlap, save_timeline

    spec = spec_from_args(a)
    out = check_target(check_out(a.out, TIMELINE_SUFFIXES), force=a.force, resumable=False)
    df = overlap(spec, argv=["h2dlab", *argv])
    save_timeline(df, out)
    worst = df.assign(d=df.end_ms.clip(lower=0)).groupby("scenario")["d"].max()
    for scen, total in worst.items():
        print(f"{scen:18s} last op ends at {total:8.2f} ms (worst of {spec.reps} reps)")
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _cmd_explain(a, argv) -> int:
    from h2dlab.cli.explain import explain

    out = check_out(a.out) if a.out is not None else None
    if out is not None:
        not_the_source(a.source, out)
        check_target(out, force=a.force, resumable=False)
    return explain(a.source, out=out, show_all=a.all, argv=["h2dlab", *argv], as_json=a.json)


def _cmd_report(a, argv) -> int:
    from h2dlab.show import report

    only = None if a.only is None else list(names_list(a.only, "--only"))
    if only == []:
        raise UsageError(f"--only names no notebook: choose from {', '.join(report.NOTEBOOKS)}")
    unknown = [n for n in only or [] if n not in report.NOTEBOOKS]
    if unknown:
        raise UsageError(f"unknown notebook {unknown[0]!r}: choose from {', '.join(report.NOTEBOOKS)}")
    for flag, value in (("--outdir", a.outdir), ("--data", a.data)):
        if value is not None and not value.strip():
            raise UsageError(f"{flag} is empty: give a folder, or leave {flag} out")
    if a.mode == "live":  # the library's line names H2DLAB_MODE, which --mode overrides
        import torch

        if not torch.cuda.is_available():
            raise Unavailable(
                "--mode live: live mode needs CUDA and this machine has none: "
                "give --mode replay (or leave --mode out) to render the recorded data"
            )
    check_folder(a.outdir, "--outdir")  # a file, or a place no folder can be made: before any notebook
    from h2dlab.cli.checks import not_a_data_folder

    not_a_data_folder(a.outdir)  # its workbook made the dataset or kind unreadable
    started = time.time()
    code = report.build(outdir=a.outdir, mode=a.mode, notebooks=only, inplace=a.inplace, data=a.data)
    if a.json:
        cli_results.emit(cli_results.report_summary(a.outdir, code, started))
    return code


def _cmd_env(a, argv) -> int:
    from h2dlab.recording.env import collect_env

    print(json.dumps(collect_env(argv=["h2dlab", *argv]), indent=2, default=str))
    return 0


def _cmd_record(a, argv) -> int:
    from h2dlab.recording.run import options_of

    return cli_record.run(a, argv, options=options_of(build_parser()))


def _cmd_datasets(a, argv) -> int:
    from h2dlab.recording.datasets import names

    if a.json:
        print(json.dumps(names(), indent=2))
        return 0
    print("\n".join(f"{name:16s} {desc}" for name, desc in names().items()))
    from h2dlab.recording.session import BUNDLED, Recorded  # the names compare and explain also take

    kinds = ", ".join(Recorded(BUNDLED).kinds())
    print(f"{BUNDLED + ':KIND':16s} a kind of the bundled recording, as the notebooks read it: {kinds}")
    return 0


COMMANDS = {
    "env": _cmd_env,
    "datasets": _cmd_datasets,
    "measure": _cmd_measure,
    "forum": _cmd_forum,
    "overlap": _cmd_overlap,
    "explain": _cmd_explain,
    "report": _cmd_report,
    "workload": cli_workload.run,
    "record": _cmd_record,
    "strategies": cli_strategies.run,
    "compare": cli_compare.run,
    "survey": survey_command.run,
}
COMMANDS.update(dict.fromkeys(cli_measuring.COMMANDS, cli_measuring.run), doctor=cli_doctor.run)


def main(argv: list[str] | None = None) -> int:
    """Run the command; return its exit code (:data:`EXIT_CODES`: 0 done, 1 failed, 2 misused, 130 stopped)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cli_common.one_line_warnings()
    cli_common.printable_streams()
    with cli_common.terminal_safe_streams():  # a file's name or text never drives the terminal
        return _main(argv)


def _main(argv: list[str]) -> int:
    try:  # parsing imports pandas: a Ctrl-C (or SIGTERM) there is an interruption too, not a traceback
        with cli_common.terminate_interrupts():
            parser = build_parser()
            args, extra = parser.parse_known_args(argv)
            cli_common.expand_home(args)  # --out=~/r.csv: the shell left the ~
            if extra:  # refused by the subcommand's parser, so the line names its --help
                subs = next(x for x in parser._actions if isinstance(x, argparse._SubParsersAction))
                subs.choices[args.cmd].error(f"unrecognized arguments: {' '.join(extra)}")
            cli_common.refuse_json_to_closed_stdout(args.cmd, bool(getattr(args, "json", False)))
            with cli_results.json_stdout(args.cmd in JSON_AT_END and getattr(args, "json", False)):
                return COMMANDS[args.cmd](args, argv)
    except BrokenPipeError:  # e.g. `h2dlab explain ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt as exc:  # a measurement's own says where its rows are
        print(f"h2dlab: interrupted: {exc}" if str(exc) else "h2dlab: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        return failure(exc)  # one line and exit 1 or 2; a bug is raised again, with its traceback


def _exit(code: int) -> None:
    """Exit with ``code``; after an interruption (130) without the interpreter's wind-down."""
    if code == EXIT_INTERRUPTED:
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def run() -> None:  # the `h2dlab` command and `python -m h2dlab`, through h2dlab.__main__
    _exit(main())


if __name__ == "__main__":  # python -m h2dlab (tests, and live mode's recording)
    run()
