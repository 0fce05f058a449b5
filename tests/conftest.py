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
        capture_output=True, text=True, timeout=timeout, env=e, cwd=cwd or ROOT,
    )


@pytest.fixture
def cli():
    return run_cli
