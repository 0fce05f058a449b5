"""hostile5: a trace's env.json is a data file anyone can plant beside a trace. A lone
surrogate written as the JSON escape ``"\\ud800"`` is valid JSON; ``tableio.read_env`` and
the recording readers turn it into text (``escape.json_text``), ``doctor.trace.env_beside``
did not, and the doctor's figure stopped with matplotlib's TypeError."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "data" / "traces" / "batch_pageable.json.gz"


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    t = tmp_path / TRACE.name
    shutil.copy(TRACE, t)
    (tmp_path / "env.json").write_text('{"gpu_name": "\\ud800 GPU", "date": "\\udc00"}')
    return t


def test_trace_env_with_a_lone_surrogate_is_text(planted: Path) -> None:
    from h2dlab.doctor.trace import env_beside

    env = env_beside(planted)
    assert env["gpu_name"] == "\\ud800 GPU"  # the code, visible, as escape.json_text writes it
    assert env["date"] == "\\udc00"
    env["gpu_name"].encode("utf-8")  # no lone surrogate is left


def test_doctor_figure_draws_a_trace_whose_env_holds_a_lone_surrogate(planted: Path, tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from h2dlab.doctor import diagnose
    from h2dlab.doctor.plot import lanes, source

    dx = diagnose(planted)
    assert "\\ud800 GPU" in source(dx)
    ax = lanes(dx)
    ax.figure.savefig(tmp_path / "lanes.png")  # was: TypeError from FT2Font.set_text
    assert (tmp_path / "lanes.png").stat().st_size > 0
