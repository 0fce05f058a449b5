"""hostile6: a trace's env.json is a data file anyone can plant beside a trace (``env.json``
in its folder is read too). One of brackets nested 200,000 deep (400 kB, under the 1 MiB
limit) made ``json.loads`` raise RecursionError, which ``doctor.trace.env_beside`` did not
catch: ``h2dlab doctor TRACE`` stopped with a traceback. Such an env.json vouches for
nothing and is not read, as one that is not JSON."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "data" / "traces" / "batch_pageable.json.gz"
DEEP = "[" * 200_000 + "]" * 200_000


def test_a_trace_env_nested_too_deeply_is_not_read(tmp_path: Path) -> None:
    from h2dlab.doctor.trace import env_beside

    t = tmp_path / TRACE.name
    shutil.copy(TRACE, t)
    (tmp_path / "env.json").write_text(DEEP)
    assert env_beside(t) == {}


def test_doctor_of_a_trace_beside_a_deeply_nested_env_json_answers(tmp_path: Path, capsys) -> None:
    from h2dlab.cli import main as cli

    t = tmp_path / TRACE.name
    shutil.copy(TRACE, t)
    (tmp_path / "env.json").write_text(DEEP)
    assert cli.main(["doctor", str(t)]) == 0
    assert "Traceback" not in capsys.readouterr().err
