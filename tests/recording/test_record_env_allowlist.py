"""What a recording.json may make ``h2dlab record --resume`` run (issue #35).

Before: each experiment's ``env`` went to its child process unchecked, so a planted
``PYTHONPATH`` ran a planted ``h2dlab/cli/main.py`` (``LD_PRELOAD``, ``PYTHONSTARTUP``,
``BASH_ENV`` passed too), and damaged values (an int argument, ``seconds`` as text, a NUL,
``measured_rows: "abc"``) ended in tracebacks. Now: only :data:`record_folder.ALLOWED_ENV`
with plain setting values, only the options the plan gives its command, refused in one
line (exit 2) before any experiment starts. Recordings here are SYNTHETIC.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.cli import main as cli
from h2dlab.recording import run as record_run
from h2dlab.recording.env import OPENMP_VARS
from h2dlab.recording.folder import ALLOWED_ENV, experiment_problem, finished, new_manifest, write_manifest
from h2dlab.recording.plan import PLAN


def _run(**change):
    run = {"kind": "sweep", "run": "tiny", "args": ["measure", "--sizes", "1KiB", "--reps", "1", "--warmup", "0",
           "--strategies", "pageable", "--device", "cpu"], "env": {}, "seconds": 2, "fresh": False,
           "name": "sweep/tiny", "status": "pending"}  # fmt: skip
    run.update(change)
    return run


def _recording(folder, **change):
    """A SYNTHETIC recording as `h2dlab record --device cpu` starts it, one run changed."""
    m = new_manifest(
        [_run(**change)], quick=False, device="cpu", gpus=0, gpu_name=None, command="h2dlab record"
    )
    folder.mkdir()
    write_manifest(folder, m)
    return folder


@pytest.fixture
def no_child(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError(f"an experiment was started: {a}")

    monkeypatch.setattr(record_run.subprocess, "Popen", refuse)


def _resume(folder, capsys):
    rc = cli.main(["record", "--resume", str(folder)])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    return rc, lines


@pytest.mark.parametrize(
    "env",
    [
        {"PYTHONPATH": "/tmp/planted"},
        {"LD_PRELOAD": "/tmp/planted.so"},
        {"PYTHONSTARTUP": "/tmp/planted.py"},
        {"BASH_ENV": "/tmp/planted.sh"},
        {"PYTHONINSPECT": "1"},
        {"OMP_WAIT_POLICY": "PASSIVE", "PATH": "/tmp/planted"},
    ],
)
def test_resume_refuses_an_environment_variable_the_kit_does_not_set(tmp_path, capsys, no_child, env):
    folder = _recording(tmp_path / "rec", env=env)
    rc, lines = _resume(folder, capsys)
    bad = next(k for k in env if k not in ALLOWED_ENV)
    assert rc == 2 and len(lines) == 1 and "Traceback" not in lines[0]
    assert lines[0].startswith(f"h2dlab: error: {folder / 'recording.json'} is damaged (experiment 0: ")
    assert f"environment variable '{bad}' is not one the kit sets" in lines[0]


@pytest.mark.parametrize(
    "value", ["/tmp/planted", "PASSIVE; touch /tmp/x", "a b", "x\x00y", "$(id)", 3, None, "x" * 201]
)
def test_resume_refuses_an_allowed_variable_whose_value_is_not_a_setting(tmp_path, capsys, no_child, value):
    folder = _recording(tmp_path / "rec", env={"OMP_WAIT_POLICY": value})
    rc, lines = _resume(folder, capsys)
    assert rc == 2 and len(lines) == 1 and "the value of OMP_WAIT_POLICY is not a setting" in lines[0]


@pytest.mark.parametrize(
    "args,said",
    [
        (["measure", "--sizes", 1024], "args are not a list of strings"),
        (["measure", "--sizes", "1KiB\x00"], "holds a control character"),
        (["measure", "--sizes", ""], "is empty or holds a control character"),
        (["measure", "--out", "/etc/x.csv"], "option '--out' is not one the plan gives measure"),
        (["measure", "--force"], "option '--force' is not one the plan gives measure"),
        (["measure", "--out=/tmp/x.csv"], "option '--out=/tmp/x.csv' is not one the plan gives measure"),
        (["report", "--outdir", "/tmp"], "not one of"),
        ("measure --sizes 1KiB", "args are not a list of strings"),
    ],
)
def test_resume_refuses_arguments_the_plan_never_gives(tmp_path, capsys, no_child, args, said):
    folder = _recording(tmp_path / "rec", args=args)
    rc, lines = _resume(folder, capsys)
    assert rc == 2 and len(lines) == 1 and said in lines[0] and "Traceback" not in lines[0]


@pytest.mark.parametrize("seconds", ["ten", None, [], float("nan"), -1, True])
def test_resume_refuses_seconds_that_are_not_a_number(tmp_path, capsys, no_child, seconds):
    folder = _recording(tmp_path / "rec", seconds=seconds)
    rc, lines = _resume(folder, capsys)
    assert rc == 2 and len(lines) == 1 and "Traceback" not in lines[0] and "is damaged" in lines[0]


def test_resume_refuses_a_run_without_a_name(tmp_path, capsys, no_child):
    folder = _recording(tmp_path / "rec", name=7)
    rc, lines = _resume(folder, capsys)
    assert rc == 2 and len(lines) == 1 and "experiment 0 has no name" in lines[0]


def test_the_recorder_itself_refuses_before_running_anything(tmp_path, no_child):
    """A manifest handed to record() directly (a --plan, live mode) is checked too."""
    from h2dlab.errors import UsageError

    m = new_manifest([_run(env={"PYTHONPATH": "/tmp/p"})], quick=False, device="cpu", gpus=0, gpu_name=None,
                     command="h2dlab record")  # fmt: skip
    (tmp_path / "rec").mkdir()
    with pytest.raises(UsageError, match="environment variable 'PYTHONPATH' is not one the kit sets"):
        record_run.record(tmp_path / "rec", m, options=lambda command: set())


def test_every_variable_the_plan_sets_and_every_openmp_knob_is_allowed():
    assert {k for e in PLAN for k in e.env} <= ALLOWED_ENV
    assert set(OPENMP_VARS) <= ALLOWED_ENV
    assert (
        not {"PYTHONPATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONSTARTUP", "BASH_ENV", "PATH"} & ALLOWED_ENV
    )


def test_every_experiment_of_the_plan_passes_its_own_check():
    for e in PLAN:
        for quick in (False, True):
            if quick and not e.in_quick():
                continue
            d = {**e.to_dict(quick), "name": e.name, "status": "pending"}
            assert experiment_problem(d) is None, e.name
            assert experiment_problem({**d, "args": [*d["args"], "--device", "cpu"]}) is None


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.one_of(st.sampled_from(sorted(ALLOWED_ENV)), st.text(min_size=1, max_size=20)),
        st.text(max_size=30),
        min_size=1,
        max_size=3,
    )
)
def test_only_allowed_variables_with_plain_settings_are_accepted(env):
    why = experiment_problem(_run(env=env))
    outside = set(env) - ALLOWED_ENV
    plain = all(re.fullmatch(r"[A-Za-z0-9_.:,=+-]*", v) and len(v) <= 200 for v in env.values())
    assert (why is None) == (not outside and plain)
    if outside and plain:
        assert "is not one the kit sets" in why


@pytest.mark.parametrize("measured", ["abc", [], {"a": 1}, "1e999"])
def test_a_damaged_measured_rows_vouches_for_nothing(tmp_path, measured):
    table = tmp_path / "t.csv.gz"
    table.write_bytes(b"")
    (tmp_path / "t.csv.gz.env.json").write_text(json.dumps({"measured_rows": measured, "planned_rows": 10}))
    assert finished(table) is False


def test_a_planted_pythonpath_never_reaches_a_child(tmp_path):
    """End to end, in a real process: the planted cli.py would write a file if it ran."""
    import os
    import sys
    from pathlib import Path

    planted = tmp_path / "planted" / "h2dlab"
    planted.mkdir(parents=True)
    (planted / "__init__.py").write_text("")
    ran = tmp_path / "PLANTED_CODE_RAN"
    (planted / "cli.py").write_text(f"open({str(ran)!r}, 'w').write('x')\n")
    folder = _recording(tmp_path / "rec", env={"PYTHONPATH": str(tmp_path / "planted")})
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run(
        [sys.executable, "-m", "h2dlab", "record", "--resume", str(folder)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        cwd=root,
        timeout=120,
    )
    assert r.returncode == 2 and not ran.exists()
    assert r.stderr.count("\n") == 1 and "PYTHONPATH" in r.stderr
