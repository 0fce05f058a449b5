"""Hostile command-line cases that tests/test_bad_input.py did not cover (helper "attack"):
each one gave a traceback, a wrong exit code, a misleading line, or a plan that cannot run.
The command: exit code 2 and ONE line on stderr, no traceback, nothing written."""

import re

import pytest

from h2dlab import cli, datasets
from h2dlab.strategies import REGISTRY


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A SYNTHETIC recording folder (a table one level down, as `h2dlab record` lays it
    out) and a SYNTHETIC table whose every timed copy failed."""
    good = datasets.load("forum_a100").head(30)
    (tmp_path / "rec" / "sweep").mkdir(parents=True)
    datasets.save(good, tmp_path / "rec" / "sweep" / "synthetic.csv")
    datasets.save(good.assign(error="synthetic failure"), tmp_path / "allfailed.csv")
    monkeypatch.chdir(tmp_path)
    return tmp_path


CASES = [
    # compare used to let load()'s ValueError escape: a traceback and exit 1
    (["compare", "h200_overlap"], ["timeline"]),
    (["compare", "h200_overlap:x"], ["timeline"]),
    (["compare", ""], ["empty dataset name"]),
    (["compare", " h200_sweep"], ["spaces around"]),
    (["compare", "."], ["current folder"]),
    (["compare", "h200_sweep", "h200_overlap"], ["timeline"]),
    # a recording folder given where a table or a kind's folder is wanted
    (["explain", "{d}/rec"], ["is a recording", "rec/sweep"]),
    (["compare", "{d}/rec"], ["is a recording", "rec/sweep"]),
    # no filter given, yet the line blamed --strategies/--sizes
    (["compare", "{d}/allfailed.csv"], ["no timed copy that succeeded"]),
    # an empty --only meant "everything" (report ran every notebook, record the whole plan)
    (["report", "--only", ""], ["names no notebook"]),
    (["report", "--only", " , "], ["names no notebook"]),
    (["record", "--device", "cpu", "--dry-run", "--only", ""], ["no experiment given"]),
    (["record", "--device", "cpu", "--only", ",", "--out", "{d}/new-rec"], ["no experiment given"]),
    # batch named a method '(none)'
    (["batch", "--device", "cpu", "--methods", "", "--out", "{d}/b.csv"], ["no batch method given"]),
]


@pytest.mark.parametrize("argv,needles", CASES, ids=[" ".join(c[0])[:50] for c in CASES])
def test_cli_refuses_in_one_line(place, capsys, argv, needles):
    argv = [a.replace("{d}", str(place)) for a in argv]
    before = sorted(p.name for p in place.iterdir())
    try:
        rc = cli.main(argv)
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    assert rc == 2, (rc, err)
    assert "Traceback" not in err + out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for n in needles:
        assert n.lower() in lines[0].lower(), (n, lines[0])
    assert sorted(p.name for p in place.iterdir()) == before


def test_record_on_cpu_plans_only_strategies_a_cpu_runs(capsys):
    """`h2dlab record --device cpu` planned forum-sizes with pinned_reuse, which measure
    refuses on cpu: the recording always ended with a failed experiment."""
    assert cli.main(["record", "--device", "cpu", "--dry-run"]) == 0
    plan = capsys.readouterr().out
    lists = re.findall(r"--strategies (\S+)", plan)
    assert lists, plan  # the plan does name strategies (forum-sizes)
    for names in lists:
        assert names, plan
        for name in names.split(","):
            assert not REGISTRY[name].needs_cuda, (name, plan)
