"""hostile6: an env.json is data: its ``spec`` may be anything JSON holds. hostile5's fix
(``cli.checks._other_command``, which names the command of the run already at ``--out``)
read ``env["spec"].get("kind")``: where ``spec`` was a string, a list or a number, every
``measure`` or ``batch`` whose ``--out`` was that table stopped with an AttributeError
traceback instead of the one-line "exists" refusal (exit 2)."""

from __future__ import annotations

import json

import pytest

from h2dlab.cli import main as cli
from h2dlab.recording import datasets

MEASURE = ["measure", "--device", "cpu", "--strategies", "pageable", "--sizes", "1KiB", "--reps", "2"]
MEASURE += ["--warmup", "0", "--no-progress"]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    out = tmp_path_factory.mktemp("t") / "t.csv"
    assert cli.main([*MEASURE, "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("spec", ["sweep", [1, 2], 1, True, {"kind": ["sweep"]}])
@pytest.mark.parametrize("cmd", ["measure", "batch"])
def test_a_table_whose_env_spec_is_not_an_object_is_refused_in_one_line(table, spec, cmd, capsys):
    env_file = datasets.env_path(table)
    env = json.loads(env_file.read_text())
    env["spec"] = spec
    env_file.write_text(json.dumps(env))
    capsys.readouterr()
    args = MEASURE if cmd == "measure" else ["batch", "--device", "cpu", "--no-progress"]
    assert cli.main([*args, "--out", str(table)]) == 2
    err = capsys.readouterr().err
    assert "exists" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("spec", ["sweep", [1, 2], 5, True])
@pytest.mark.parametrize("cmd", ["measure", "measure --reference", "batch"])
def test_resume_of_a_table_whose_env_spec_is_not_an_object_is_refused_in_one_line(table, spec, cmd, capsys):
    """``--resume`` compared that spec with this run's (``recorder.check_resume``): an
    AttributeError or TypeError traceback."""
    env_file = datasets.env_path(table)
    env = json.loads(env_file.read_text())
    env["spec"] = spec
    env_file.write_text(json.dumps(env))
    capsys.readouterr()
    if cmd == "batch":
        args = ["batch", "--device", "cpu", "--no-progress"]
    else:
        args = [*MEASURE, *cmd.split()[1:]]
    assert cli.main([*args, "--out", str(table), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "spec" in err and len(err.strip().splitlines()) == 1, err
    assert "reference" not in (datasets.read_env(table) or {})
