"""``python -m h2dlab`` and the ``h2dlab`` command (``run``). The kit's imports take about
0.4 s; a Ctrl-C then ends the command as one later does, in one line with exit code 130,
not with the interpreter's traceback (hostile tester, session 29)."""

import os
import sys


def run() -> None:
    """Import the command line, then run it (``h2dlab.cli.run``)."""
    try:
        from h2dlab.cli import run as cli_run
    except KeyboardInterrupt:
        sys.stderr.write("h2dlab: interrupted\n")
        sys.stderr.flush()
        os._exit(130)
    cli_run()


if __name__ == "__main__":
    run()
