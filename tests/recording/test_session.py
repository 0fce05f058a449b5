"""session.recording(): the bundled H200 recording and recording folders, read the same way."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from h2dlab.errors import UsageError
from h2dlab.recording import datasets, live, session
from h2dlab.recording.folder import MANIFEST, write_manifest
from h2dlab.recording.run import python_command


def test_bundled_recording_holds_every_kind_and_run():
    rec = session.recording("h200")
    # data/h200 (h2dlab record) holds every kind but concurrent, which comes from the first
    # session's 2-GPU tables
    assert rec.kinds() == [
        "forum",
        "sweep",
        "allocator",
        "overlap",
        "concurrent",
        "d2h",
        "bidir",
        "batch",
        "idle",
        "workload",
        "reference",
    ]
    assert rec.runs("idle") == ["pause-0ms", "pause-10ms", "pause-1ms", "pause-3ms"]
    assert rec.runs("forum") == ["ascending-1", "ascending-2", "shuffled-1"]
    # (sweep/pow2 and allocator/pin-register-warm retired: record_plan.RETIRED)
    assert set(rec.runs("sweep")) == {"pow2-interleaved", "forum-sizes"}
    assert len(rec.runs("allocator")) == 5 and rec.runs("batch") == ["equal", "mixed"]
    assert rec.has("sweep") and rec.has("sweep", "pow2-interleaved") and rec.has("d2h", "d2h")
    assert not rec.has("sweep", "pow2") and not rec.has("sweep", "pow3")
    assert rec.runs("workload") == ["steps"] and rec.runs("reference") == ["reference"]


def test_bundled_tables_are_the_recorded_datasets():
    rec = session.recording("h200")
    pow2 = rec.table("sweep", "pow2-interleaved")
    want = datasets.read(datasets.DATA_DIR / "h200" / "sweep" / "pow2-interleaved.csv.gz")
    assert len(pow2) == len(want) == 756
    assert pow2["wall_ms"].sum() == pytest.approx(want["wall_ms"].sum())
    assert pow2.attrs["env"]["gpu_name"] == "NVIDIA H200"
    assert pow2.attrs["dataset"] == "sweep/pow2-interleaved"
    forum = rec.table("forum")
    assert len(forum) == 3 * 630 and forum.attrs["dataset"] == "forum"
    assert sorted(forum.attrs["run_names"].values()) == rec.runs("forum")
    assert set(rec.table("overlap")["scenario"]) == set(datasets.timeline("h200_overlap")["scenario"])
    reg = rec.env("allocator", "pin-register-emptied")
    assert reg["PYTORCH_CUDA_ALLOC_CONF"].startswith("pinned_use_cuda_host_register:True")
    assert len(rec.table("concurrent")) == len(datasets.load("h200x2_concurrent"))  # the v1 fallback
    # a cached table is handed out as a copy: a notebook's edits do not leak into the next read
    pow2["wall_ms"] = 0.0
    assert rec.table("sweep", "pow2-interleaved")["wall_ms"].sum() > 0


def test_missing_kind_or_run_says_what_there_is(tmp_path):
    rec = session.recording("h200")
    with pytest.raises(ValueError, match="no sweep run 'nope' .*pow2-interleaved"):
        rec.table("sweep", "nope")
    with pytest.raises(ValueError, match="unknown kind"):
        rec.has("sweeps")
    (tmp_path / "sweep").mkdir()  # a recording with only a sweep says what it has
    datasets.save(rec.table("sweep", "pow2-interleaved"), tmp_path / "sweep" / "pow2.csv.gz")
    with pytest.raises(ValueError, match="no d2h runs .*sweep"):
        session.recording(str(tmp_path)).table("d2h")


def test_banner_names_machine_date_and_mode():
    text = session.recording("h200").banner()
    assert "**Replay**" in text and "NVIDIA H200" in text and "2026-11-30" in text and "`vm`" in text
    assert text._repr_markdown_() == str(text)


def _folder_recording(tmp_path, host="box", gpu="NVIDIA Synthetic", status="complete"):
    """A recording folder made of bundled tables copied into the <kind>/<run> layout."""
    folder = tmp_path / f"{host}-rec"
    for kind, src in (("sweep", "h200_sweep/pow2"), ("allocator", "h200_allocator/pin-warm")):
        (folder / kind).mkdir(parents=True)
        run = src.split("/")[1]
        shutil.copy(datasets.DATA_DIR / f"{src}.csv.gz", folder / kind / f"{run}.csv.gz")
        shutil.copy(datasets.DATA_DIR / f"{src}.env.json", folder / kind / f"{run}.env.json")
    write_manifest(
        folder, {"hostname": host, "gpu_name": gpu, "created": "2030-01-02T03:04:05", "status": status}
    )
    return folder


def test_folder_recording_reads_its_layout(tmp_path):
    folder = _folder_recording(tmp_path)
    rec = session.recording(str(folder))
    assert rec.kinds() == ["sweep", "allocator"] and rec.runs("sweep") == ["pow2"]
    assert len(rec.table("sweep", "pow2")) == 1530
    assert rec.table("sweep").attrs["dataset"] == f"{folder.name}/sweep"
    assert not rec.has("forum")
    assert "2030-01-02" in rec.banner()  # the manifest's date, not the runs'


def test_banner_falls_back_to_the_recordings_own_env_json(tmp_path):
    """Runs without their env.json: the banner names the machine from <folder>/env.json."""
    folder = _folder_recording(tmp_path)
    for p in folder.rglob("*.env.json"):
        p.unlink()
    rec = session.recording(str(folder), environ={})
    assert rec.folder_env() == {} and "`?`" in rec.banner()  # nothing to name the machine by
    synthetic = {"hostname": "synthetic-host", "gpu_name": "NVIDIA Synthetic", "cpu_count": 7, "torch": "9.9"}
    (folder / "env.json").write_text(json.dumps(synthetic))
    rec = session.recording(str(folder), environ={})
    assert rec.folder_env() == synthetic and rec.machine() == synthetic
    text = rec.banner()
    assert (
        "NVIDIA Synthetic" in text
        and "`synthetic-host`" in text
        and "7 cores" in text
        and "torch 9.9" in text
    )
    # a run's own env.json still comes first
    shutil.copy(datasets.DATA_DIR / "h200_sweep" / "pow2.env.json", folder / "sweep" / "pow2.env.json")
    assert "`synthetic-host`" not in session.recording(str(folder), environ={}).banner()


def test_h2dlab_data_wins_over_the_notebook(tmp_path):
    folder = _folder_recording(tmp_path)
    rec = session.recording("h200", environ={"H2DLAB_DATA": str(folder), "H2DLAB_MODE": "replay"})
    assert rec.folder == folder.resolve() and rec.mode == "replay"


def test_not_a_recording_is_one_clear_error(tmp_path):
    with pytest.raises(UsageError, match="no recording"):
        session.recording(str(tmp_path / "missing"), environ={})
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="is not a recording"):
        session.recording(str(tmp_path / "empty"), environ={})


def test_find_recording_matches_host_and_gpu_and_prefers_complete(tmp_path):
    a = _folder_recording(tmp_path / "a", status="incomplete")
    assert session.find_recording({"hostname": "box", "gpu_name": "NVIDIA Synthetic"}, tmp_path / "a") == a
    b = _folder_recording(tmp_path / "a", host="box2")
    assert session.find_recording({"hostname": "box2", "gpu_name": "NVIDIA Synthetic"}, tmp_path / "a") == b
    assert session.find_recording({"hostname": "box", "gpu_name": "Other"}, tmp_path / "a") is None
    m = json.loads((a / MANIFEST).read_text())
    write_manifest(a, {**m, "status": "complete", "created": "2000-01-01"})
    c = tmp_path / "a" / "c"
    shutil.copytree(a, c)
    write_manifest(c, {**m, "status": "incomplete", "created": "2040-01-01"})
    # complete beats newer-but-unfinished
    assert session.find_recording({"hostname": "box", "gpu_name": "NVIDIA Synthetic"}, tmp_path / "a") == a


class _FakePopen:
    """Stands in for the recorder's process: notes the command, marks the folder complete."""

    calls: list[list[str]] = []

    def __init__(self, cmd, **kw):
        _FakePopen.calls.append(cmd)
        folder = Path(cmd[cmd.index("--resume" if "--resume" in cmd else "--out") + 1])
        m = json.loads((folder / MANIFEST).read_text()) if (folder / MANIFEST).exists() else {}
        if not m:
            shutil.copytree(_FakePopen.template, folder)
            m = json.loads((folder / MANIFEST).read_text())
        write_manifest(folder, {**m, "status": "complete"})
        self.stdout = ["[1/1] sweep/pow2 (est. 19 s)\n"]

    def wait(self):
        return 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def live_box(tmp_path, monkeypatch):
    """Live mode on a pretend GPU machine 'box' (no CUDA needed): runs folder in tmp_path."""
    monkeypatch.setattr(session, "resolve_mode", lambda mode, env=None: "live")
    monkeypatch.setattr(session, "this_machine", lambda: {"hostname": "box", "gpu_name": "NVIDIA Synthetic"})
    monkeypatch.setattr(live.subprocess, "Popen", _FakePopen)  # the recorder runs from h2dlab.recording.live
    monkeypatch.setenv("H2DLAB_RUNS", str(tmp_path / "runs"))
    _FakePopen.calls = []
    _FakePopen.template = _folder_recording(tmp_path / "t", status="incomplete")
    return tmp_path / "runs"


def test_live_records_once_then_reuses(live_box):
    rec = session.recording("h200", mode="live", environ={})
    assert len(_FakePopen.calls) == 1 and _FakePopen.calls[0][-5:-1] == [
        "h2dlab.cli.main",
        "record",
        "--quick",
        "--out",
    ]
    assert _FakePopen.calls[0][:-5] == python_command() + ["-m"]  # never from the current folder (-P)
    assert rec.mode == "live" and rec.made_now and rec.folder.parent == live_box.resolve()
    assert "**Live**" in rec.banner() and "made just now" in rec.banner()
    again = session.recording("h200", mode="live", environ={})  # the next notebook: nothing measured
    assert len(_FakePopen.calls) == 1 and again.folder == rec.folder and not again.made_now


def test_live_resumes_an_unfinished_recording_of_this_machine_when_asked(live_box, monkeypatch):
    monkeypatch.setenv("H2DLAB_RESUME", "1")  # asked: unasked, tests/recording/test_live_resume_consent.py
    live_box.mkdir()
    unfinished = shutil.copytree(_FakePopen.template, live_box / "box-old")
    rec = session.recording("h200", mode="live", environ={})
    assert _FakePopen.calls == [
        [*python_command(), "-m", "h2dlab.cli.main", "record", "--resume", str(unfinished.resolve())]
    ]
    assert rec.folder == unfinished.resolve()


def test_live_takes_the_given_folder_when_it_is_this_machines(live_box, tmp_path):
    mine = _folder_recording(tmp_path / "given", status="complete")
    rec = session.recording(str(mine), mode="live", environ={})
    assert _FakePopen.calls == [] and rec.folder == mine.resolve() and rec.mode == "live"
    other = _folder_recording(tmp_path / "other", host="elsewhere")  # another machine's: record this one
    session.recording(str(other), mode="live", environ={})
    assert len(_FakePopen.calls) == 1


def test_same_machine_ignores_case_and_spacing_of_the_gpu_name():
    assert session.same_machine(
        {"hostname": "a", "gpu_name": "NVIDIA  H200"}, {"hostname": "a", "gpu_name": "nvidia h200"}
    )
    assert not session.same_machine(
        {"hostname": "a", "gpu_name": "NVIDIA H200"}, {"hostname": "b", "gpu_name": "NVIDIA H200"}
    )
    assert not session.same_machine(
        {"hostname": "a", "gpu_name": "NVIDIA H100"}, {"hostname": "a", "gpu_name": "NVIDIA H200"}
    )


def test_an_idle_kind_loads_where_a_recording_has_it(tmp_path):
    """Plan 3's ``idle`` runs (``measure --pause``), made here on the CPU (synthetic as
    data: nothing idles on a CPU), load by kind, as a dataset folder and in explain; the
    bundled recording has them (plan 3)."""
    from h2dlab.cli import main as cli
    from h2dlab.explain import idle as factors_idle
    from h2dlab.measure.harness import sweep
    from h2dlab.measure.spec import SweepSpec

    assert session.recording("h200").has("idle")
    folder = tmp_path / "rec"
    (folder / "idle").mkdir(parents=True)
    for ms in (0, 1):
        spec = SweepSpec(("pageable",), (4096, 65536), device="cpu", reps=3, warmup=0, pause_ms=ms)
        sweep(spec, out=folder / "idle" / f"pause-{ms}ms.csv.gz", progress=False)
    rec = session.recording(str(folder), environ={})
    assert rec.kinds() == ["idle"] and rec.runs("idle") == ["pause-0ms", "pause-1ms"]
    idle = rec.table("idle")
    assert len(idle) == 2 * 2 * 3
    assert sorted(factors_idle.pauses(idle).unique()) == [0.0, 1.0]
    assert rec.env("idle", "pause-1ms")["spec"]["pause_ms"] == 1.0
    assert len(datasets.load(folder / "idle")) == 12
    assert cli.main(["explain", str(folder / "idle")]) == 0


def test_a_recording_that_is_no_name_or_folder_is_a_clear_type_error():
    for bad in (None, 3, ["h200"]):
        with pytest.raises(TypeError, match=r"data must be 'h200' or a recording folder, not"):
            session.recording(bad, environ={})


def test_a_folder_of_ones_own_named_h200_is_that_folder_not_the_bundled_data(tmp_path):
    """It read the bundled recording's runs, tables and banner (helper attack, eighth session)."""
    mine = tmp_path / "h200" / "sweep"
    mine.mkdir(parents=True)
    shutil.copy(datasets.DATA_DIR / "h200" / "sweep" / "pow2-interleaved.csv.gz", mine / "only.csv.gz")
    rec = session.recording(tmp_path / "h200", environ={})
    assert not rec.bundled and rec.kinds() == ["sweep"] and rec.runs("sweep") == ["only"]
    assert "the bundled recording" not in str(rec.banner())
    bundled = session.recording(Path("h200"), environ={})  # the name, as a Path, where no such folder is
    assert bundled.bundled and "forum" in bundled.kinds()
    with pytest.raises(TypeError, match="data must be 'h200' or a recording folder, not ''"):
        session.recording("", environ={})
