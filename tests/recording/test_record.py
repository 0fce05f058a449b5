"""h2dlab record on a CPU: the dry run, usage errors, a tiny plan into a recording folder,
an interrupted recording finished exactly by --resume, and a failed experiment."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from h2dlab.cli import main as cli
from h2dlab.measure.plan import plan_sweep
from h2dlab.recording import datasets, session
from h2dlab.recording.folder import MANIFEST, read_manifest
from h2dlab.recording.plan import PLAN_VERSION, experiments, select, total_seconds
from h2dlab.units import parse_sizes
from tests.conftest import refused_in_one_line

ROOT = Path(__file__).resolve().parents[2]
NO_CUDA = not __import__("torch").cuda.is_available()

TINY = {"kind": "sweep", "run": "tiny", "args": ["measure", "--sizes", "1KiB..4KiB", "--reps", "2", "--warmup", "0", "--strategies", "pageable"], "seconds": 3}  # fmt: skip
# --pause 5: the light loop copies 1 KiB in microseconds; a stop must land mid-run, not after it
SLOW = {"kind": "sweep", "run": "slow", "args": ["measure", "--sizes", "1KiB..64KiB", "--reps", "100", "--warmup", "0", "--strategies", "pageable", "--pause", "5"], "seconds": 9}  # fmt: skip
BAD = {"kind": "sweep", "run": "bad", "args": ["measure", "--strategies", "no_such_way", "--sizes", "1KiB"], "seconds": 2}  # fmt: skip


def _plan(tmp_path: Path, *rows) -> str:
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(list(rows)))
    return str(p)


#: A synthetic commit for H2DLAB_GIT_COMMIT: the recorder and its runs record it.
COMMIT = "c0ffee0" * 5 + "12345"


def _record(*args, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "H2DLAB_GIT_COMMIT": COMMIT}
    env.pop("H2DLAB_DEBUG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "h2dlab.cli.main", "record", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        **kw,
    )


def test_dry_run_prints_the_plan_and_its_estimate(capsys, tmp_path):
    out = tmp_path / "rec"
    assert cli.main(["record", "--dry-run", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    full, quick = experiments(gpus=1), experiments(quick=True, gpus=1)
    assert f"{len(full)} experiments" in text and f"estimated {total_seconds(full):.0f} s (~" in text
    assert sum(bool(re.match(r" *\d+\. ", x)) for x in text.splitlines()) == len(full)  # a line each
    assert "allocator/pin-register-emptied" in text and "PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host" in text
    assert cli.main(["record", "--dry-run", "--quick", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert (
        f"{len(quick)} experiments" in text and f"estimated {total_seconds(quick, quick=True):.0f} s" in text
    )
    assert "<73 values" in text and "<75 values" in text  # sizes of the capped grid; seqs with the pair
    assert cli.main(["record", "--dry-run", "--only", "pow2-interleaved,forum", "--out", str(out)]) == 0
    assert f"{1 + len(select(full, 'forum'))} experiments" in capsys.readouterr().out
    assert not out.exists()  # a dry run writes nothing


@pytest.mark.skipif(not NO_CUDA, reason="checks the refusal on a machine without CUDA")
def test_without_cuda_record_refuses_in_one_line(capsys, tmp_path):
    assert cli.main(["record", "--out", str(tmp_path / "r")]) == 1  # the machine, not the command line
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA GPU" in err[0] and "--device cpu" in err[0]
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--resume", "{tmp}", "--quick"], "takes its plan from the folder"),
        (["--resume", "{tmp}"], "holds no recording.json"),
        (["--device", "tpu"], "unknown device 'tpu'"),
        (["--device", "cpu", "--only", "nope"], "no experiment named 'nope'"),
        (["--device", "cpu", "--out", "{tmp}"], "is not empty"),
        (["--device", "cpu", "--plan", "{tmp}/missing.json"], "cannot read the plan"),
    ],
)
def test_usage_mistakes_exit_2_in_one_line(argv, says, capsys, tmp_path):
    (tmp_path / "something").write_text("x")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert cli.main(["record", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_cpu_recording_interrupted_then_resumed_exactly(tmp_path):
    folder = tmp_path / "rec"
    p = _record("--device", "cpu", "--plan", _plan(tmp_path, TINY, SLOW), "--out", str(folder))
    partial = folder / "sweep" / "slow.csv.gz.partial.csv"
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:  # stop it once the slow run has rows on disk
        if partial.exists() and len(partial.read_text().splitlines()) > 5:
            p.send_signal(signal.SIGTERM)
            break
        time.sleep(0.05)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert f"h2dlab record --resume {folder}" in err
    m = read_manifest(folder)
    assert [(r["name"], r["status"]) for r in m["experiments"]] == [
        ("sweep/tiny", "done"),
        ("sweep/slow", "interrupted"),
    ]
    assert m["status"] == "incomplete" and m["device"] == "cpu" and m["hostname"]
    first = json.loads((folder / "env.json").read_text())  # the recording's own fingerprint
    assert first["command"] == f"h2dlab record --device cpu --plan {tmp_path / 'plan.json'} --out {folder}"
    assert (first["plan_version"], first["quick"], first["device"], first["resumed"]) == (
        PLAN_VERSION,
        False,
        "cpu",
        [],
    )
    assert (first["git_commit"], first["git_commit_source"]) == (COMMIT, "env")
    assert first["hostname"] == m["hostname"] and first["gpu_name"] is None and first["cpu_count"] > 0
    assert first["date"][:10] == m["created"][:10] and first["schema_version"] >= 2
    rec = session.recording(str(folder), environ={})
    assert rec.runs("sweep") == ["tiny"]  # the stopped run is not offered as a whole one
    kept = len(datasets.read(folder / "sweep" / "slow.csv.gz"))
    assert 5 < kept < 700
    tiny_mtime = (folder / "sweep" / "tiny.csv.gz").stat().st_mtime_ns

    p = _record("--resume", str(folder))
    _, err = p.communicate(timeout=240)
    assert p.returncode == 0, err
    m = read_manifest(folder)
    assert m["status"] == "complete" and all(r["status"] == "done" for r in m["experiments"])
    assert (folder / "sweep" / "tiny.csv.gz").stat().st_mtime_ns == tiny_mtime  # not measured again
    slow = session.recording(str(folder), environ={}).table("sweep", "slow")
    planned = plan_sweep(["pageable"], parse_sizes("1KiB..64KiB"), 100, 0)
    assert len(slow) == len(planned) == 700
    assert slow["run_id"].nunique() == 1  # continued, not started over
    assert sorted(slow["order"]) == list(range(700))
    # the last attempt's header line (its result table and "wrote" line follow it)
    assert (
        "--resume"
        in [ln for ln in (folder / "record.log").read_text().splitlines() if ln.startswith("== ")][-1]
    )
    both = session.recording(str(folder), environ={}).table("sweep")
    assert sorted(both.attrs["run_names"].values()) == ["slow", "tiny"] and len(both) == 700 + 6
    assert (folder / "sweep" / "tiny.csv.gz.env.json").exists() and (folder / MANIFEST).exists()
    after = json.loads((folder / "env.json").read_text())  # kept, with the resume noted
    assert {k: v for k, v in after.items() if k != "resumed"} == {
        k: v for k, v in first.items() if k != "resumed"
    }
    assert [r["command"] for r in after["resumed"]] == [f"h2dlab record --resume {folder}"]
    assert after["resumed"][0]["date"] >= first["date"]
    assert session.recording(str(folder), environ={}).env("sweep", "slow")["git_commit"] == COMMIT


def test_a_failed_experiment_does_not_stop_the_others(tmp_path):
    folder = tmp_path / "rec"
    p = _record("--device", "cpu", "--plan", _plan(tmp_path, BAD, TINY), "--out", str(folder))
    _, err = p.communicate(timeout=120)
    assert p.returncode == 1, err
    assert "failed: sweep/bad" in err and "record.log" in err
    m = read_manifest(folder)
    assert [(r["name"], r["status"], r["rc"]) for r in m["experiments"]] == [
        ("sweep/bad", "failed", 2),
        ("sweep/tiny", "done", 0),
    ]
    assert "no_such_way" in (folder / "record.log").read_text()
    assert session.recording(str(folder), environ={}).runs("sweep") == ["tiny"]


def test_folder_env_without_one_is_written_on_resume(tmp_path):
    """A recording made before the kit wrote <folder>/env.json gets one when resumed;
    a second resume adds to its list and keeps the rest."""
    from h2dlab.recording.env_folder import note_resume, read_folder_env, write_folder_env

    assert read_folder_env(tmp_path) is None
    note_resume(tmp_path, command="h2dlab record --resume x", quick=True, device="cpu")
    env = read_folder_env(tmp_path)
    assert env["written_on_resume"] is True and env["quick"] is True and env["device"] == "cpu"
    assert [r["command"] for r in env["resumed"]] == ["h2dlab record --resume x"]
    note_resume(tmp_path, command="h2dlab record --resume y", quick=True, device="cpu")
    again = read_folder_env(tmp_path)
    assert [r["command"] for r in again["resumed"]] == [
        "h2dlab record --resume x",
        "h2dlab record --resume y",
    ]
    assert again["date"] == env["date"] and again["command"] == "h2dlab record --resume x"
    with pytest.raises(ValueError, match="device must be cuda, cuda:N or cpu"):
        write_folder_env(tmp_path, command="h2dlab record", quick=False, device="tpu")
    (tmp_path / "env.json").write_text("[1, 2]")  # not an object: as if absent
    assert read_folder_env(tmp_path) is None


def test_a_cuda_recording_starts_its_env_json_without_a_cuda_context(tmp_path, monkeypatch):
    """The CUDA path's folder env.json on a CPU machine: a pretend GPU machine whose NVML is
    missing, experiments not run. The GPU's name comes from nvidia-smi's (here: given) and no
    torch call that starts a context is made (they would raise)."""
    import torch

    from h2dlab.cli import record as cli_record

    monkeypatch.setattr(cli_record, "_gpus", lambda device: (1, "NVIDIA Synthetic"))
    monkeypatch.setattr(cli_record, "record", lambda folder, manifest, options: 0)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    for name in ("current_device", "get_device_properties", "init", "set_device"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, **k: pytest.fail("a CUDA context was started"))
    monkeypatch.setenv("H2DLAB_GIT_COMMIT", COMMIT)
    folder = tmp_path / "gpu-rec"
    argv = ["record", "--quick", "--only", "overlap", "--out", str(folder)]
    assert cli.main(argv) == 0
    env = json.loads((folder / "env.json").read_text())
    assert env["command"] == f"h2dlab record --quick --only overlap --out {folder}"
    assert (env["device"], env["quick"], env["cuda_available"], env["gpu_count"]) == ("cuda", True, True, 1)
    assert env["gpu_name"] == "NVIDIA Synthetic" and env["git_commit"] == COMMIT
    assert read_manifest(folder)["command"] == env["command"]


def _recording(folder, **change):
    """A SYNTHETIC recording folder as `h2dlab record --device cpu` starts it (one tiny sweep)."""
    from h2dlab.recording.folder import new_manifest, write_manifest

    run = {"kind": "sweep", "run": "tiny", "args": ["measure", "--sizes", "1KiB", "--reps", "1", "--warmup", "0",
           "--strategies", "pageable", "--device", "cpu"], "env": {}, "seconds": 2, "fresh": False,
           "name": "sweep/tiny", "status": "pending"}  # fmt: skip
    m = new_manifest([run], quick=False, device="cpu", gpus=0, gpu_name=None, command="h2dlab record")
    m.update(change)
    folder.mkdir()
    write_manifest(folder, m)
    return folder


RECORDING_CASES = [
    ("not json", ["recording.json", "cannot be read"]),
    ("[1, 2]", ["recording.json", "damaged", "list"]),
    ({"experiments": None}, ["damaged", "experiments"]),
    ({"experiments": "x"}, ["damaged", "experiments"]),
    ({"device": None}, ["damaged", "device"]),
    ({"device": 5}, ["damaged", "device"]),
    ({"experiments": [{"kind": "sweep", "run": "x", "status": "pending"}]}, ["damaged", "experiment 0"]),
    (
        {"experiments": [{"kind": "../..", "run": "x", "args": ["measure"], "status": "x"}]},
        ["damaged", "../.."],
    ),
    ({"experiments": [{"kind": "sweep", "run": "x", "args": ["measure"]}]}, ["damaged", "no status"]),
    (
        {"experiments": [{"kind": "sweep", "run": "x", "args": ["record"], "status": "x"}]},
        ["damaged", "'record'"],
    ),
]


@pytest.mark.parametrize("dry", [False, True])
@pytest.mark.parametrize("damage,needles", RECORDING_CASES, ids=[str(c[0])[:30] for c in RECORDING_CASES])
def test_resume_of_a_damaged_recording_is_one_line(tmp_path, capsys, damage, needles, dry):
    """`record --resume` on a recording.json that is not JSON said "holds no recording.json";
    one without experiments, device, an experiment's args or status gave a traceback."""
    folder = tmp_path / "rec"
    if isinstance(damage, dict):
        _recording(folder, **damage)
    else:
        _recording(folder)
        (folder / "recording.json").write_text(damage)
    manifest = (folder / "recording.json").read_text()
    argv = ["record", "--resume", str(folder), *(["--dry-run"] if dry else [])]
    refused_in_one_line(argv, needles, capsys, folder)
    assert (folder / "recording.json").read_text() == manifest


@pytest.mark.parametrize("dry", [False, True])
@pytest.mark.parametrize(
    "args,needles",
    [
        (["--out", ""], ["--out is empty"]),  # was: the default folder, and a recording started there
        (["--out", " "], ["--out is empty"]),
        (["--resume", ""], ["--resume is empty"]),  # was: a new recording (exit 1, "no CUDA GPU")
        (["--out", "{d}/file"], ["is a file", "folder"]),  # was: exit 1 "Not a directory"; dry run: 0
        (["--out", "{d}/stuff"], ["not empty", "not a recording"]),  # said: resume it with --resume
        (["--out", "{d}/rec"], ["holds a recording", "--resume"]),  # the dry run printed a plan
        (["--resume", "{d}/file"], ["is a file"]),
        (["--resume", "{d}/none"], ["does not exist"]),
    ],
)
def test_record_folder_mistakes_are_one_line(tmp_path, capsys, monkeypatch, args, needles, dry):
    monkeypatch.chdir(tmp_path)  # before the fix, '--out " "' recorded into ./" "
    monkeypatch.setenv("H2DLAB_RUNS", str(tmp_path / "runs"))  # and '--out ""' into the runs folder
    (tmp_path / "file").write_text("x")
    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "a.txt").write_text("x")
    _recording(tmp_path / "rec")
    argv = ["record", *[a.replace("{d}", str(tmp_path)) for a in args]]
    argv += [] if "--resume" in args else ["--device", "cpu"]
    refused_in_one_line([*argv, *(["--dry-run"] if dry else [])], needles, capsys, tmp_path)


def test_a_recording_whose_table_env_is_damaged_fails_with_its_own_reason(tmp_path, capsys):
    """A run table whose env.json is unreadable: record --resume gave a SchemaError
    traceback (finished() read it); the FAILED line then quoted the previous attempt's log."""
    from h2dlab.recording.folder import finished

    folder = _recording(tmp_path / "rec")
    table = folder / "sweep" / "tiny.csv.gz"
    table.parent.mkdir()
    datasets.save(datasets.load("forum_a100").head(3), table)
    datasets.env_path(table).write_text("{bad")
    (folder / "record.log").write_text("== sweep/tiny earlier\nh2dlab: interrupted: 1 of 2 rows kept\n")
    assert finished(table) is False  # an unreadable env.json vouches for nothing
    assert cli.main(["record", "--resume", str(folder)]) == 1  # the experiment failed
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    failed = [ln for ln in out.splitlines() if "FAILED" in ln]
    assert len(failed) == 1 and "cannot resume" in failed[0] and "interrupted" not in failed[0], out
