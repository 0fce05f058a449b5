"""One recorder per recording folder, and an experiment is done only when its own table
is whole (issue 35, data loss).

Before, two ``record --resume`` of one folder ran side by side (each rewrote
recording.json over the other's), and an experiment whose ``<kind>/<run>`` table was
there already (a twin experiment's copied, or another run's env.json beside it) was
marked done without being run. Now the recorder holds a lock (``flock`` on
``.record.lock``) and a second one says in one line who holds it (exit 2); a table is
taken as the experiment's only when its env.json names the table's run and a command
that wrote this very ``<kind>/<run>``. Recordings here are made on the CPU.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from h2dlab.cli import main as cli
from h2dlab.errors import UsageError
from h2dlab.recording import datasets
from h2dlab.recording.env_folder import read_folder_env
from h2dlab.recording.folder import MANIFEST, load_manifest, read_manifest
from h2dlab.recording.run import LOCK_NAME, recording_lock

ROOT = Path(__file__).resolve().parents[2]
TINY = ["measure", "--sizes", "1KiB", "--reps", "2", "--warmup", "0", "--strategies", "pageable"]
# 5 ms between copies: about 3.5 s of copies, so the second recorder comes while it runs
SLOW = ["measure", "--sizes", "1KiB..64KiB", "--reps", "100", "--warmup", "0", "--strategies", "pageable"]
SLOW += ["--pause", "5"]


def _plan(tmp_path, *rows):
    p = tmp_path / "plan.json"
    p.write_text(
        json.dumps([{"kind": "sweep", "run": run, "args": args, "seconds": 3} for run, args in rows])
    )
    return str(p)


@pytest.mark.slow  # recorders and their experiments in processes of their own
def test_a_second_recorder_of_one_folder_is_refused_and_names_the_first(tmp_path, capsys):
    folder = tmp_path / "rec"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("H2DLAB_DEBUG", None)
    first = subprocess.Popen(
        [sys.executable, "-m", "h2dlab.cli.main", "record", "--device", "cpu"]
        + ["--plan", _plan(tmp_path, ("slow", SLOW), ("tiny", TINY)), "--out", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 60
        partial = folder / "sweep" / "slow.csv.gz.partial.csv"
        while not partial.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert partial.exists(), "the first recorder never started its experiment"
        manifest = (folder / MANIFEST).read_bytes()
        rc = cli.main(["record", "--resume", str(folder)])
        err = capsys.readouterr().err
        assert rc == 2
        lines = err.strip().splitlines()
        assert len(lines) == 1 and f"is being recorded by pid {first.pid}" in lines[0], err
        assert (folder / MANIFEST).read_bytes() == manifest  # the second one changed nothing
        assert read_folder_env(folder)["resumed"] == []
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(timeout=60)


def test_the_lock_is_released_when_the_recorder_ends(tmp_path):
    with recording_lock(tmp_path):
        assert (tmp_path / LOCK_NAME).read_text().strip() == str(os.getpid())
        with (
            pytest.raises(UsageError, match=f"is being recorded by pid {os.getpid()}"),
            recording_lock(tmp_path),
        ):
            pass
    with recording_lock(tmp_path):  # free again
        pass


@pytest.fixture
def recorded(tmp_path, capsys):
    """A CPU recording of one experiment, sweep/a (synthetic for the purpose: host copies)."""
    folder = tmp_path / "rec"
    assert (
        cli.main(["record", "--device", "cpu", "--plan", _plan(tmp_path, ("a", TINY)), "--out", str(folder)])
        == 0
    )
    capsys.readouterr()
    return folder


def _add_twin(folder, run="b"):
    """recording.json gets a second, pending experiment with sweep/a's command."""
    m = read_manifest(folder)
    twin = {**m["experiments"][0], "run": run, "name": f"sweep/{run}", "status": "pending"}
    twin.pop("rc", None), twin.pop("wall_s", None)
    m["experiments"].append(twin)
    m["status"] = "incomplete"
    (folder / MANIFEST).write_text(json.dumps(m))


@pytest.mark.slow  # recorders and their experiments in processes of their own
def test_a_twin_experiments_copied_table_is_not_marked_done_unrun(recorded, capsys):
    _add_twin(recorded)
    a, b = recorded / "sweep" / "a.csv.gz", recorded / "sweep" / "b.csv.gz"
    shutil.copy(a, b)
    shutil.copy(datasets.env_path(a), datasets.env_path(b))
    before = b.read_bytes()
    assert cli.main(["record", "--resume", str(recorded)]) == 1
    twin = read_manifest(recorded)["experiments"][1]
    assert twin["status"] == "failed"
    assert b.read_bytes() == before  # not run over, not rewritten
    log = (recorded / "record.log").read_text()
    assert "sweep/b: not run" in log and "written by another command" in log and "move it away" in log
    b.unlink(), datasets.env_path(b).unlink()  # moved away: the resume now runs it
    capsys.readouterr()
    assert cli.main(["record", "--resume", str(recorded)]) == 0
    assert read_manifest(recorded)["experiments"][1]["status"] == "done"
    ra, rb = (datasets.read(p)["run_id"].iloc[0] for p in (a, b))
    assert ra != rb


@pytest.mark.slow  # recorders and their experiments in processes of their own
def test_a_table_with_another_runs_env_json_is_not_marked_done(recorded):
    _add_twin(recorded)
    a, b = recorded / "sweep" / "a.csv.gz", recorded / "sweep" / "b.csv.gz"
    t = datasets.read(a).assign(run_id="synthetic-other")
    datasets.save(t, b)
    shutil.copy(datasets.env_path(a), datasets.env_path(b))  # names run a, not synthetic-other
    assert cli.main(["record", "--resume", str(recorded)]) == 1
    assert read_manifest(recorded)["experiments"][1]["status"] == "failed"
    assert "no env.json of its own" in (recorded / "record.log").read_text()


@pytest.mark.slow  # recorders and their experiments in processes of their own
def test_two_experiments_writing_one_table_are_refused_before_anything_runs(recorded, capsys):
    _add_twin(recorded, run="a")
    with pytest.raises(UsageError, match="experiments 0 and 1 both write sweep/a"):
        load_manifest(recorded)
    before = (recorded / MANIFEST).read_bytes()
    assert cli.main(["record", "--resume", str(recorded)]) == 2
    assert "both write sweep/a" in capsys.readouterr().err
    assert (recorded / MANIFEST).read_bytes() == before


def test_every_table_of_the_bundled_recording_is_its_experiments_own():
    """What the recorder accepts as 'finished before' holds for each real table of
    data/h200 (an overlap timeline included): a resume never runs them again or fails them."""
    from h2dlab.recording.run import _not_its_own

    folder = datasets.DATA_DIR / "h200"
    m = read_manifest(folder)
    for r in m["experiments"]:
        out = folder / r["kind"] / f"{r['run']}.csv.gz"
        assert _not_its_own(out, r) is None, r["name"]
    r = m["experiments"][0]
    twin = {**r, "run": r["run"] + "-twin"}
    assert "written by another command" in _not_its_own(folder / r["kind"] / f"{r['run']}.csv.gz", twin)
