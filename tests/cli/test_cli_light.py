"""``h2dlab --version`` and ``--help`` are instant (issue #35): they import neither pandas, numpy
nor torch (about 0.4 s before), read from ``python -X importtime`` of the real entry point."""

import os
import re
import subprocess
import sys

import pytest

from h2dlab import __version__
from tests.conftest import ROOT

HEAVY = ("pandas", "numpy", "torch")


def _run(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("H2DLAB_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "h2dlab", *args],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT,
    )  # fmt: skip


def _imported(stderr: str) -> set[str]:
    """The top-level packages ``-X importtime`` lists on stderr."""
    return {m.group(1).split(".")[0] for m in re.finditer(r"^import time:.*\|\s*(\S+)\s*$", stderr, re.M)}


@pytest.mark.slow  # processes of their own
@pytest.mark.parametrize("args", [["--version"], ["--help"], ["measure", "--help"], ["compare", "--help"],
                                  ["record", "--help"], ["report", "--help"], ["survey", "--help"]])  # fmt: skip
def test_version_and_help_import_no_pandas_numpy_or_torch(args):
    r = _run(*args)
    assert r.returncode == 0, r.stderr[-2000:]
    imported = _imported(r.stderr)
    assert "h2dlab" in imported  # the listing was read
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


@pytest.mark.slow  # processes of their own
def test_version_and_help_say_what_they_said():
    r = _run("--version")
    assert r.stdout == f"h2dlab {__version__}\n"
    from h2dlab.cli.main import COMMANDS, build_parser

    r = _run("--help")
    assert r.stdout == build_parser().format_help()
    for name in COMMANDS:
        assert re.search(rf"^\s+{name}\s", r.stdout, re.M), name
    assert "exit codes:" in r.stdout and "130" in r.stdout


def test_the_report_modes_the_parser_offers_are_the_sessions():
    from h2dlab.cli.main import REPORT_MODES
    from h2dlab.recording.session import MODES

    assert tuple(REPORT_MODES) == tuple(MODES)
