"""What every part of the ``h2dlab`` command shares: the exit codes, the parser class
and the option types (so that subcommands in other modules parse alike)."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import re
import shlex
import sys
from pathlib import Path

from h2dlab.errors import AlreadyDone, Unavailable, UsageError
from h2dlab.interrupts import terminate_raises
from h2dlab.recording.places import PACKAGE_DIR

__all__ = [
    "EXIT_CODES",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "PATH_OPTIONS",
    "Parser",
    "TerminalSafe",
    "debugging",
    "expand_home",
    "failure",
    "names",
    "number_arg",
    "one_line_warnings",
    "printable_streams",
    "refuse_json_to_closed_stdout",
    "stream_closed",
    "abbreviates",
    "pause_arg",
    "sizes_arg",
    "terminal_safe_streams",
    "terminate_interrupts",
    "whole_arg",
]

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_CODES = """exit codes:
  0    done (also --resume of a finished table: it says so and leaves the table as it is)
  1    this machine or the run failed: no CUDA, a full disk, a CUDA fault, a failed
       notebook (one line; a bug in h2dlab also exits 1, with its traceback)
  2    the command line or its input is wrong: an unknown option or dataset, a bad value,
       a GPU this machine lacks, a missing or unreadable table (one line)
  130  interrupted (Ctrl-C or SIGTERM); a measurement keeps its rows: rerun with --resume
GPU: forum, overlap, duplex, batch, record, measure --gpus and measure on cuda need a CUDA GPU
(measure, batch and record take --device cpu for host copies); env, datasets, strategies, explain,
compare and report (replay) run anywhere. H2DLAB_DEBUG=1 shows tracebacks."""


#: The parsed options (dest names) that name a file or folder.
PATH_OPTIONS = ("out", "resume", "data", "outdir", "source", "runs")


def expand_home(args: argparse.Namespace) -> None:
    """Read a leading ``~`` in every path option as the home folder, in place: the shell
    leaves ``--out=~/r.csv`` as it is, which named (and ``record`` created) a folder ``~``."""

    def home(v):  # a NUL byte stays for the check that names it (getpwnam raised ValueError)
        return os.path.expanduser(v) if isinstance(v, str) and "\x00" not in v else v

    for name in PATH_OPTIONS:
        value = getattr(args, name, None)
        if isinstance(value, list):
            setattr(args, name, [home(v) for v in value])
        elif isinstance(value, str):  # not measure's --resume, a flag
            setattr(args, name, home(value))


def debugging() -> bool:
    """Whether ``H2DLAB_DEBUG`` asks for tracebacks: set, and not empty, ``0``, ``false`` or ``no``."""
    return os.environ.get("H2DLAB_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off")


def sizes_arg(text: str) -> list[int]:
    """argparse type: sizes such as ``1KiB,64MiB`` or ``1KiB..1GiB`` (``units.parse_sizes``)."""
    from h2dlab.units import parse_sizes

    try:
        return parse_sizes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def names(text: str | None, option: str) -> tuple[str, ...] | None:
    """The names of a comma list option (``--strategies a,b``), or None when not given;
    ``()`` when it names nothing (each command then says what it expected).

    Raises
    ------
    UsageError
        An empty entry beside names (``a,,b``, ``a,``): a slip the command would otherwise
        pass over in silence.
    """
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        return ()
    if "" in parts:
        raise UsageError(f"{option} {text!r} has an empty entry: write names separated by single commas")
    return tuple(parts)


_NUMBER = re.compile(r"\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*|\s*inf\s*", re.IGNORECASE)


def number_arg(text: str) -> float:
    """argparse type: a number in ASCII digits (``2.5``, ``1e3``, ``inf``); ``float()`` also
    took other scripts' digits and underscores (``'٣'``, ``'1_0'``), which sizes refuse."""
    if not _NUMBER.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: write digits 0-9, e.g. 24 or 0.5")
    return float(text)


def pause_arg(text: str) -> float:
    """argparse type: a pause in milliseconds, a number from 0 to ``spec.MAX_PAUSE_MS``."""
    from h2dlab.measure.spec import MAX_PAUSE_MS

    v = number_arg(text)
    if not 0 <= v <= MAX_PAUSE_MS:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range: give 0 to {MAX_PAUSE_MS} milliseconds")
    return v


def whole_arg(least: int | None):
    """argparse type: a whole number (ASCII digits, ``units.parse_int``) of at least
    ``least`` (``None``: any)."""
    from h2dlab.units import parse_int

    def parse(text: str) -> int:
        try:
            v = parse_int(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).replace("value ", "", 1)) from None
        if least is not None and v < least:
            raise argparse.ArgumentTypeError(
                f"must be at least 1, got {v}" if least == 1 else f"must be {least} or more, got {v}"
            )
        return v

    return parse


class Parser(argparse.ArgumentParser):
    """Every (sub)command's parser: its ``--help`` ends with the exit codes; a usage
    error is one line and exit code 2, without the usage dump."""

    def __init__(self, *args, **kwargs) -> None:  # every (sub)command's --help ends with the exit codes
        kwargs.setdefault("epilog", EXIT_CODES)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        # '--sizes -1MiB' is a (bad) value, not an unknown option: "expected one argument" misled
        self._negative_number_matcher = re.compile(r"^-\.?\d")

    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        self.exit(EXIT_USAGE, f"h2dlab: error: {message} (see {self.prog} --help)\n")


def one_line_warnings() -> None:
    """Show h2dlab's own warnings in one line each (``h2dlab: warning: ...``, without the
    source line Python quotes), each text once per run; other packages' as Python does."""
    import warnings

    default, seen = warnings.showwarning, set()
    default = getattr(default, "shown_by_default", default)  # installed by an earlier call: replaced
    pkg = str(PACKAGE_DIR)

    def show(message, category, filename, lineno, file=None, line=None):
        if not str(filename).startswith(pkg):
            return default(message, category, filename, lineno, file, line)
        if str(message) not in seen:  # the same warning at every env.json written: once
            seen.add(str(message))
            print(f"h2dlab: warning: {message}", file=sys.stderr)

    show.shown_by_default = default
    warnings.showwarning = show


def _one_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _is_cuda_fault(exc: BaseException) -> bool:
    timing = sys.modules.get("h2dlab.measure.timing")  # only a run that imported it can have faulted
    return timing is not None and isinstance(exc, timing.CudaFault)


def failure(exc: Exception) -> int:
    """The exit code for ``exc`` after printing it in one line on stderr: 1 when this
    machine or the run failed (``Unavailable``, an ``OSError``, a CUDA fault), 2 for a
    ``UsageError`` (and a file name too long for this system: a name the user gave), 0 for
    ``AlreadyDone`` (said in one line, nothing changed). Anything else is a bug and is raised again (Python prints its
    traceback and exits 1); so is everything when ``H2DLAB_DEBUG`` is on (:func:`debugging`)."""
    if isinstance(exc, AlreadyDone):  # `--resume` of a finished table: said, nothing changed
        print(f"h2dlab: {_one_line(exc)}", file=sys.stderr)
        return 0
    if debugging():
        raise exc
    if isinstance(exc, Unavailable) or _is_cuda_fault(exc):
        code, text = EXIT_FAILURE, _one_line(exc)
    elif isinstance(exc, UsageError):
        code, text = EXIT_USAGE, _one_line(exc)
    elif isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:  # a name given: a usage mistake
        code, text = EXIT_USAGE, f"{exc.strerror}: {exc.filename}: give a shorter name"
    elif isinstance(exc, OSError):  # a full disk, a vanished or forbidden file
        where = f"{exc.strerror}: {exc.filename}" if exc.strerror and exc.filename else _one_line(exc)
        code, text = EXIT_FAILURE, f"{where} (H2DLAB_DEBUG=1 shows where)"
    else:
        raise exc
    print(f"h2dlab: error: {text}", file=sys.stderr)
    return code


def stream_closed(stream) -> bool:
    """Whether ``stream`` (``sys.stdout``) was closed when the command started (``>&-``:
    None, or the /dev/null that ``h2dlab.__main__`` put in its place)."""
    return stream is None or bool(getattr(stream, "h2dlab_closed", False))


def refuse_json_to_closed_stdout(cmd: str, as_json: bool) -> None:
    """Refuse, before any work, a command whose result is JSON on stdout (``--json``, and
    ``env``) when stdout is closed: it exited 0 having written nothing (issue 35). A
    ``UsageError``: one line on stderr (where stderr is open too), exit 2."""
    if (as_json or cmd == "env") and stream_closed(sys.stdout):
        what = "--json writes its result" if as_json else f"{cmd} writes its JSON"
        raise UsageError(
            f"{what} to stdout, which is closed (>&-), so nothing would be written: "
            "send stdout to a file or a pipe (e.g. > result.json)"
        )


class TerminalSafe:
    """A text stream that writes everything through :func:`h2dlab.escape.terminal_text`
    (line breaks kept; the kit prints no tab, so one from a file name is shown as ``\\u0009``):
    what the command prints about a file (its name, its text) cannot drive the terminal.
    ``unfiltered`` is the stream itself, for a progress bar, whose carriage returns are the kit's own."""

    def __init__(self, stream) -> None:
        self.unfiltered = stream

    def write(self, text: str) -> int:
        from h2dlab.escape import terminal_text

        self.unfiltered.write(terminal_text(text, keep="\n"))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):  # flush, fileno, isatty, encoding, reconfigure ...
        return getattr(self.unfiltered, name)


@contextlib.contextmanager
def terminal_safe_streams():
    """Within the block, ``sys.stdout`` and ``sys.stderr`` write through :class:`TerminalSafe`
    (the ones before are put back after)."""
    before = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (
        s if s is None or isinstance(s, TerminalSafe) else TerminalSafe(s) for s in before
    )
    try:
        yield
    finally:
        sys.stdout, sys.stderr = before


def abbreviates(arg: str, *flags: str) -> bool:
    """Whether ``arg`` is one of ``flags`` or a prefix argparse takes for it (``--forc``)."""
    return arg.startswith("--") and len(arg) > 3 and any(f.startswith(arg) for f in flags)


def printable_streams() -> None:
    """Where stdout or stderr cannot encode what h2dlab prints (µs, –, ×: an ASCII locale,
    ``PYTHONIOENCODING=ascii``), write those as ``u``, ``-``, ``x`` and anything else as ``?``,
    rather than fail with a traceback halfway through a table (hostile tester, session 29)."""
    import codecs

    def ascii_ish(err: UnicodeError) -> tuple[str, int]:
        bad = err.object[err.start : err.end]  # type: ignore[attr-defined]
        return "".join(_ASCII.get(c, "?") for c in bad), err.end  # type: ignore[attr-defined]

    codecs.register_error("h2dlab-ascii", ascii_ish)
    for stream in (sys.stdout, sys.stderr):
        try:
            "µ–×".encode(stream.encoding or "ascii")
        except (UnicodeEncodeError, LookupError):
            with contextlib.suppress(AttributeError, ValueError):
                stream.reconfigure(errors="h2dlab-ascii")


_ASCII = {"µ": "u", "–": "-", "—": "-", "×": "x", "≥": ">=", "≤": "<=", "·": "."}


def finish_measure(df, out: Path, argv: list[str], resumable: bool = True) -> int:
    """What a measuring command prints when it ends (rows kept and how to resume, or rows
    written and errors); returns its exit code: 0, or 130 when the run was stopped."""
    from h2dlab.recording import datasets

    planned = df.attrs.get("planned_rows", len(df))
    errors = int((df["error"] != "").sum()) if len(df) else 0
    if df.attrs.get("stopped"):
        if resumable:
            # --force with --resume is refused: the line must run as printed
            again = [x for x in argv if not abbreviates(x, "--resume", "--force")]
            how = f"resume with: {shlex.join(['h2dlab', *again, '--resume'])}"
        else:
            how = "a run on several GPUs cannot be resumed: run it again"
        print(f"h2dlab: interrupted: {len(df)} of {planned} rows kept in {out}; {how}", file=sys.stderr)
        return EXIT_INTERRUPTED
    timed = int((~df["warmup"]).sum()) if len(df) else 0
    print(
        f"wrote {out} ({len(df)} rows: {timed} timed, {len(df) - timed} warm-up, {errors} with an error) "
        f"and {datasets.env_path(out).name}",
        file=sys.stderr,
    )
    if "world" in df.columns:
        per = df.groupby(["world", "gpu"]).size()
        parts = [
            f"{w} at once: " + ", ".join(f"#{g} {n}" for (_, g), n in per[w:w].items())
            for w in per.index.levels[0]
        ]
        print(f"rows per process, by how many copied at once: {'; '.join(parts)}", file=sys.stderr)
    if errors:
        first = df.loc[df["error"] != "", "error"].iloc[0]
        print(f"note: {errors} row(s) record an error, e.g. {first}", file=sys.stderr)
    return 0


#: Within its block, SIGTERM raises ``KeyboardInterrupt`` as Ctrl-C does, so every command
#: ends with 'h2dlab: interrupted' and exit code 130 (it killed explain and compare with 143,
#: saying nothing). A handler already installed (a caller's) is kept; a measurement's own
#: ``StopFlag`` takes SIGTERM over within its run and gives it back after. The same block
#: ``tableio.atomic_write`` runs in.
terminate_interrupts = terminate_raises
