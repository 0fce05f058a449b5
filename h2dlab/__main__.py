"""``python -m h2dlab`` and the ``h2dlab`` command (``run``). The kit's imports take about
0.4 s; a Ctrl-C then ends the command as one later does, in one line with exit code 130,
not with the interpreter's traceback (hostile tester, session 29). A closed stdout or
stderr is read as /dev/null; a command whose result is JSON on stdout (``--json``, ``env``)
refuses a closed stdout in one line, exit 2."""

import os
import sys


def _closed_streams_to_devnull() -> None:
    """A command started with stdout or stderr closed (``>&-``) finds ``sys.stdout`` None,
    and every print or encoding check failed with a traceback (issue #35). What it would
    print goes nowhere instead, as with ``>/dev/null``; the command still does its work."""
    for name in ("stdin", "stdout", "stderr"):
        if getattr(sys, name) is None:
            stream = open(os.devnull, "r" if name == "stdin" else "w", encoding="utf-8")  # noqa: SIM115
            stream.h2dlab_closed = True  # a command whose output is its result refuses it (--json)
            setattr(sys, name, stream)


def run() -> None:
    """Import the command line, then run it (``h2dlab.cli.main.run``)."""
    _closed_streams_to_devnull()
    try:
        from h2dlab.cli.main import run as cli_run
    except KeyboardInterrupt:
        sys.stderr.write("h2dlab: interrupted\n")
        sys.stderr.flush()
        os._exit(130)
    cli_run()


if __name__ == "__main__":
    run()
