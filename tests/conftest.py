import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(autouse=True)
def _seed_and_close():
    np.random.seed(0)
    yield
    if "matplotlib.pyplot" in sys.modules:
        import matplotlib.pyplot as plt

        plt.close("all")


def run_cli(*args, timeout=300, env=None, cwd=None):
    """Run the h2dlab command in a subprocess; returns CompletedProcess."""
    e = dict(os.environ)
    e.pop("H2DLAB_DEBUG", None)
    if env:
        e.update(env)
    return subprocess.run(
        [sys.executable, "-m", "h2dlab.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=e,
        cwd=cwd or ROOT,
    )


@pytest.fixture
def cli():
    return run_cli


def refused_in_one_line(argv, needles, capsys, folder):
    """Run ``h2dlab argv`` in this process and check the refusal of a user mistake: exit
    code 2, ONE line on stderr naming every needle (case-insensitive), no traceback, and
    nothing added to or removed from ``folder``. Returns that line."""
    from h2dlab import cli

    before = sorted(p.name for p in folder.iterdir())
    try:
        rc = cli.main(argv)
    except SystemExit as exc:  # argparse's own refusals
        rc = exc.code
    out, err = capsys.readouterr()
    assert rc == 2, (rc, err)
    assert "Traceback" not in err + out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for n in needles:
        assert n.lower() in lines[0].lower(), (n, lines[0])
    assert sorted(p.name for p in folder.iterdir()) == before
    return lines[0]


@pytest.fixture(scope="session")
def rendered(tmp_path_factory):
    """Execute the reported notebooks in replay mode and render them, once per session."""
    from h2dlab import report

    out = tmp_path_factory.mktemp("reports")
    old = os.environ.get("H2DLAB_MODE")
    try:
        rc = report.build(outdir=out, mode="replay")
    finally:
        if old is None:
            os.environ.pop("H2DLAB_MODE", None)
        else:
            os.environ["H2DLAB_MODE"] = old
    return rc, out


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium driven by Playwright (never Playwright's own download)."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Chromium is not installed (apt-get install chromium); .ci/run installs it")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()
