"""No run lost (issue 15): an output is never replaced unasked, a run owns its partial file,
resume repairs what an interruption left, and a write leaves no temporary behind.

Each test here failed on the code before the change it guards (noted per test)."""

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from h2dlab.cli import main as cli
from h2dlab.errors import UsageError
from h2dlab.measure.harness import sweep
from h2dlab.measure.plan import plan_spec
from h2dlab.measure.recorder import Recording, RowWriter, StopFlag
from h2dlab.measure.spec import SweepSpec
from h2dlab.recording import datasets
from h2dlab.recording.partial import OutputBusy, partial_path
from tests.conftest import ROOT, refused_in_one_line

SPEC = SweepSpec(("pageable",), (1024, 2048, 4096), device="cpu", reps=3, warmup=1, seed=5)
PLAN = plan_spec(SPEC)
V1_COLUMNS = [
    "run_id",
    "order",
    "strategy",
    "size_bytes",
    "shape",
    "dtype",
    "rep",
    "warmup",
    "t_s",
    "wall_ms",
    "event_ms",
    "host_allocs",
    "device_allocs",
    "empty_cache",
    "error",
]


def synthetic_row(p, i):
    """A synthetic measured row for planned row ``p`` (no copy is timed)."""
    return {
        **{k: p[k] for k in ("order", "strategy", "size_bytes", "rep", "warmup")},
        "shape": f"({p['size_bytes']},)",
        "dtype": "uint8",
        "t_s": 0.01 * i,
        "wall_ms": 0.5 + 0.001 * i,
        "event_ms": np.nan,
        "host_allocs": np.nan,
        "device_allocs": np.nan,
        "empty_cache": False,
        "error": "",
    }


def killed_run(out, k):
    """A run that wrote ``k`` rows and died (kill -9: no finish; its lock goes with it)."""
    rec = Recording(out, SPEC.to_dict(), PLAN)
    for i, p in enumerate(PLAN[:k]):
        rec.write(synthetic_row(p, i))
    rec.writer.close()
    return rec


def test_a_second_run_with_the_same_out_refuses_and_the_first_keeps_its_rows(tmp_path):
    # Before: the second run truncated the first's partial file; the first lost every row.
    out = tmp_path / "same.csv"
    first = Recording(out, SPEC.to_dict(), PLAN)
    for i, p in enumerate(PLAN[:5]):
        first.write(synthetic_row(p, i))
    for kw in ({}, {"force": True}, {"resume": True}):
        with pytest.raises(OutputBusy, match=f"another run \\(pid {os.getpid()}\\) is writing"):
            Recording(out, SPEC.to_dict(), PLAN, **kw)
    for i, p in enumerate(PLAN[5:], start=5):
        first.write(synthetic_row(p, i))
    df = first.finish(StopFlag(), gpu=False)
    assert len(df) == len(PLAN) and df["order"].tolist() == list(range(len(PLAN)))
    assert datasets.read(out)["run_id"].nunique() == 1 and not partial_path(out).exists()


def test_a_second_process_refuses_at_once_naming_the_first(tmp_path):
    out = tmp_path / "same.csv"
    first = Recording(out, SPEC.to_dict(), PLAN)
    first.write(synthetic_row(PLAN[0], 0))
    code = (
        "import sys; from h2dlab.measure.harness import sweep; from h2dlab.measure.spec import SweepSpec\n"
        f"sweep(SweepSpec(('pageable',), (1024,), device='cpu', reps=1), out={str(out)!r}, progress=False)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode != 0 and f"pid {os.getpid()}" in r.stderr.splitlines()[-1]
    assert len(partial_path(out).read_text().splitlines()) == 2  # header + the first run's row


@pytest.mark.parametrize("name", ["budget.xlsx", "earlier.csv.gz", "notes.csv"])
def test_an_existing_output_is_kept_unless_forced(tmp_path, name):
    # Before: overwritten without a word.
    out = tmp_path / name
    out.write_bytes(b"not a measurement, and not ours")
    with pytest.raises(UsageError, match="exists and is kept"):
        sweep(SPEC, out=out, progress=False)
    assert out.read_bytes() == b"not a measurement, and not ours"
    assert not partial_path(out).exists() and not datasets.env_path(out).exists()
    df = sweep(SPEC, out=out, progress=False, force=True)
    assert len(datasets.read(out)) == len(df) == len(PLAN)


def test_the_partial_file_of_a_killed_run_is_kept_unless_forced(tmp_path):
    # Before: re-running without --resume truncated the only copy of the killed run.
    out = tmp_path / "k.csv"
    killed_run(out, 4)
    before = partial_path(out).read_bytes()
    with pytest.raises(UsageError, match="unfinished run"):
        sweep(SPEC, out=out, progress=False)
    assert partial_path(out).read_bytes() == before
    sweep(SPEC, out=out, progress=False, force=True)
    assert len(datasets.read(out)) == len(PLAN) and not partial_path(out).exists()


@pytest.mark.parametrize("tail", [b"", b"a1b2c3,", b"a1b2c3,7,pageable,10", b"\x00" * 40])
def test_resume_cuts_a_torn_last_line(tmp_path, tail):
    # Before: new rows were appended onto the fragment: "Expected 15 fields, saw 19" forever.
    out = tmp_path / "t.csv"
    killed_run(out, 5)
    with open(partial_path(out), "ab") as fh:
        fh.write(tail)
    done = sweep(SPEC, out=out, resume=True, progress=False)
    back = datasets.read(out)
    assert len(back) == len(done) == len(PLAN) and back["order"].tolist() == list(range(len(PLAN)))
    assert back["run_id"].nunique() == 1 and back["wall_ms"].head(5).tolist() == [
        0.5 + 0.001 * i for i in range(5)
    ]


def test_resume_rewrites_a_v1_partial_with_the_v2_header(tmp_path):
    # Before: 23-field rows were appended to a 15-field file.
    out = tmp_path / "old.csv"
    rows = [dict(synthetic_row(p, i), run_id="0123456789ab") for i, p in enumerate(PLAN[:4])]
    partial_path(out).write_text(pd.DataFrame(rows)[V1_COLUMNS].to_csv(index=False))
    env = {"schema_version": 1, "spec": SPEC.to_dict(), "run_id": "0123456789ab"}
    datasets.write_env(env, datasets.env_path(out))  # where older versions wrote it
    sweep(SPEC, out=out, resume=True, progress=False)
    back = datasets.read(out)
    assert list(back.columns) == list(datasets.COLUMNS) and len(back) == len(PLAN)
    assert back["run_id"].eq("0123456789ab").all() and back["direction"].eq("h2d").all()


@pytest.mark.parametrize("dangling", [False, True])
def test_a_link_planted_at_the_partial_path_is_refused(tmp_path, dangling):
    # Before: the partial file was opened through the link and its target overwritten.
    victim = tmp_path / "victim.txt"
    if not dangling:
        victim.write_text("precious")
    out = tmp_path / "run.csv"
    partial_path(out).symlink_to(victim)
    for kw in ({}, {"force": True}, {"resume": True}):
        with pytest.raises(UsageError, match="symbolic link"):
            sweep(SPEC, out=out, progress=False, **kw)
    assert victim.read_text() == "precious" if not dangling else not victim.exists()


def test_a_run_that_fails_at_once_leaves_the_tables_fingerprint_alone(tmp_path, monkeypatch):
    # Before: env.json was written beside the output when the run began.
    out = tmp_path / "r.csv.gz"
    sweep(SPEC, out=out, progress=False)
    env_before = datasets.env_path(out).read_text()
    from h2dlab.measure import strategies

    def broken(self, x):
        raise TypeError("a bug in the strategy")

    monkeypatch.setattr(strategies.get("pageable").__class__, "copy", broken)
    with pytest.raises(TypeError):
        sweep(SPEC, out=out, progress=False, force=True)
    assert datasets.env_path(out).read_text() == env_before
    assert json.loads(datasets.env_path(partial_path(out)).read_text())["pid"] == os.getpid()


def _save_killed_by_sigterm(folder, ext):
    code = f"""
import os, signal, pandas as pd
from h2dlab import datasets
df = datasets.load("forum_a100").head(20)
def killed(self, path, *a, **k):
    open(path, "wb").write(b"half a file")
    os.kill(os.getpid(), signal.SIGTERM)
for attr in ("to_excel", "to_parquet", "to_csv"):
    setattr(pd.DataFrame, attr, killed)
datasets.save(df, {str(folder / ("r" + ext))!r})
"""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("ext", [".xlsx", ".parquet", ".csv.gz"])
def test_sigterm_during_the_final_save_leaves_no_temporary(tmp_path, ext):
    # Before: the temporary file stayed forever.
    r = _save_killed_by_sigterm(tmp_path, ext)
    assert r.returncode != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_later_write_removes_stale_temporaries_of_its_own_output(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)
    stale = tmp_path / f".r.xlsx.tmp-{pid}-abc.xlsx"
    live = tmp_path / f".r.xlsx.tmp-{os.getppid()}-abc.xlsx"  # a process still running
    other = tmp_path / f".q.xlsx.tmp-{pid}-abc.xlsx"  # another output's
    for f in (stale, live, other):
        f.write_bytes(b"x")
    datasets.save(datasets.load("forum_a100").head(5), tmp_path / "r.xlsx")
    assert not stale.exists() and live.exists() and other.exists()


def test_a_failed_write_names_the_users_path_not_the_temporary(tmp_path):
    # Before: "Is a directory: '.tmp-xyzr.csv'".
    target = tmp_path / "r.csv"
    target.mkdir()
    with pytest.raises(OSError) as info:
        datasets.save(datasets.load("forum_a100").head(5), target)
    assert str(target) in str(info.value) and ".tmp-" not in str(info.value)
    assert [p.name for p in tmp_path.iterdir()] == ["r.csv"]
    with pytest.raises(OSError, match="cannot write .*nope/r.csv"):
        datasets.atomic_write(tmp_path / "nope" / "r.csv", lambda p: None)


def test_resuming_a_killed_run_compares_the_spec_beside_its_partial_file(tmp_path):
    """A killed run has no table yet: its spec is read from the env.json beside its
    partial file, and a resume with another spec (same plan) is refused."""
    out = tmp_path / "k.csv"
    killed_run(out, 4)
    assert not out.exists() and datasets.read_env(partial_path(out))["spec"] == SPEC.to_dict()
    changed = SweepSpec(
        ("pageable",), (1024, 2048, 4096), device="cpu", reps=3, warmup=1, seed=5, empty_cache=True
    )
    with pytest.raises(
        UsageError, match=r"spec differs from the first run's \(empty_cache was False, now True\)"
    ):
        sweep(changed, out=out, resume=True, progress=False)
    done = sweep(SPEC, out=out, resume=True, progress=False)
    assert len(done) == len(PLAN) and done.attrs["env"]["spec"] == SPEC.to_dict()


def test_a_new_run_starts_at_zero_with_a_fresh_run_id_and_records_its_command(tmp_path):
    out = tmp_path / "n.csv"
    rec = Recording(out, SPEC.to_dict(), PLAN, argv=["h2dlab", "measure", "--synthetic"])
    assert rec.start_at == 0 and rec.t_offset == 0.0 and 0.0 <= rec.elapsed() < 1.0
    assert len(rec.run_id) == 12 and int(rec.run_id, 16) >= 0
    env = datasets.read_env(partial_path(out))
    assert (env["run_id"], env["planned_rows"], env["command"]) == (
        rec.run_id,
        len(PLAN),
        "h2dlab measure --synthetic",
    )
    rec.write(synthetic_row(PLAN[0], 0))
    df = rec.finish(StopFlag(), gpu=False)
    assert df["run_id"].tolist() == [rec.run_id] and datasets.read_env(out)["run_id"] == rec.run_id


def test_an_existing_table_or_a_killed_runs_partial_needs_force(tmp_path):
    out = tmp_path / "x.csv"
    datasets.save(pd.DataFrame([synthetic_row(PLAN[0], 0)]).assign(run_id="synthetic"), out)
    with pytest.raises(UsageError) as info:
        Recording(out, SPEC.to_dict(), PLAN)
    assert (
        str(info.value)
        == f"{out} exists and is kept: choose another output, or force a new run to replace it"
    )
    killed = tmp_path / "k.csv"
    killed_run(killed, 2)
    with pytest.raises(UsageError, match="unfinished run"):
        RowWriter(killed)
    with pytest.raises(UsageError) as info:
        Recording(None, SPEC.to_dict(), PLAN, resume=True)
    assert str(info.value) == "resuming needs the output file of the run to continue"


def test_resuming_a_run_whose_rows_cover_the_plan_keeps_them_all(tmp_path):
    out = tmp_path / "all.csv"
    killed_run(out, len(PLAN))
    done = sweep(SPEC, out=out, resume=True, progress=False)
    assert len(done) == len(datasets.read(out)) == len(PLAN)
    assert done["wall_ms"].tolist() == [0.5 + 0.001 * i for i in range(len(PLAN))]  # the killed run's rows


def test_a_partial_file_with_todays_header_is_appended_to_not_rewritten(tmp_path, monkeypatch):
    from h2dlab.measure import recorder

    calls = []
    original = recorder.replace_locked
    monkeypatch.setattr(recorder, "replace_locked", lambda *a: calls.append(1) or original(*a))
    killed_run(tmp_path / "v2.csv", 4)
    sweep(SPEC, out=tmp_path / "v2.csv", resume=True, progress=False)
    assert calls == []
    test_resume_rewrites_a_v1_partial_with_the_v2_header(tmp_path)  # an old header is rewritten
    assert calls == [1]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files through /proc")
def test_a_resumed_run_leaves_no_file_descriptor_open(tmp_path):
    out = tmp_path / "fd.csv"
    killed_run(out, 4)
    before = len(os.listdir("/proc/self/fd"))
    sweep(SPEC, out=out, resume=True, progress=False)
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_resume_continues_the_clock_one_second_after_the_first_parts_last_row(tmp_path):
    """``t_offset`` is the last ``t_s`` on disk plus 1 s and the run id is the first part's;
    a first part whose rows carry no clock reading (every ``t_s`` missing, synthetic)
    continues from 1 s, not from NaN."""
    out = tmp_path / "t.csv"
    first = killed_run(out, 4)  # t_s 0.00, 0.01, 0.02, 0.03
    rec = Recording(out, SPEC.to_dict(), PLAN, resume=True)
    rec.writer.close()
    assert (rec.start_at, rec.run_id) == (4, first.run_id)
    assert rec.t_offset == pytest.approx(1.03, abs=1e-12)
    assert [r["order"] for r in rec.rows] == [0, 1, 2, 3]
    one = tmp_path / "one.csv"
    started = killed_run(one, 1)  # a single row on disk: its run id and clock go on
    rec = Recording(one, SPEC.to_dict(), PLAN, resume=True)
    rec.writer.close()
    assert (rec.start_at, rec.run_id, rec.t_offset) == (1, started.run_id, 1.0)
    blank = tmp_path / "nan.csv"
    lost = Recording(blank, SPEC.to_dict(), PLAN)
    for i, p in enumerate(PLAN[:3]):
        lost.write({**synthetic_row(p, i), "t_s": np.nan})
    lost.writer.close()
    rec = Recording(blank, SPEC.to_dict(), PLAN, resume=True)
    rec.writer.close()
    assert rec.start_at == 3 and rec.t_offset == 1.0


def test_the_env_is_taken_without_the_gpu_at_the_start_and_as_asked_at_the_finish(tmp_path, monkeypatch):
    """The env.json written at the start must not touch the GPU (the forum protocol starts
    CUDA inside its first timed step); ``finish`` queries it only when asked."""
    import inspect

    from h2dlab.measure import recorder

    real = recorder.collect_env
    default = inspect.signature(real).parameters["gpu"].default
    asked = []

    def spy(device_index=None, argv=None, gpu=default):
        asked.append(gpu)
        return real(device_index, argv, gpu=False)  # this machine's env, never its GPU

    monkeypatch.setattr(recorder, "collect_env", spy)
    rec = Recording(tmp_path / "g.csv", SPEC.to_dict(), PLAN)
    assert asked == [False]
    rec.write(synthetic_row(PLAN[0], 0))
    rec.finish(StopFlag(), gpu=False)
    assert asked == [False, False]
    Recording(None, SPEC.to_dict(), PLAN).finish(StopFlag(), gpu=True)  # no out: no env at the start
    assert asked == [False, False, True]


@pytest.mark.parametrize("damage", ["cut", "empty", "foreign", "bad-env"])
def test_resume_on_a_damaged_table_is_one_line(tmp_path, capsys, damage):
    """`measure --resume` on a table cut short (a truncated .csv.gz), emptied, not h2dlab's,
    or with an unreadable env.json printed a SchemaError traceback (exit 1)."""
    argv = ["measure", "--device", "cpu", "--no-progress", "--strategies", "pageable"]
    argv += ["--sizes", "1KiB,2KiB", "--reps", "2", "--warmup", "0", "--out", str(tmp_path / "t.csv.gz")]
    assert cli.main(argv) == 0
    out = tmp_path / "t.csv.gz"
    if damage == "cut":
        out.write_bytes(out.read_bytes()[: out.stat().st_size // 2])
    elif damage == "empty":
        out.write_bytes(b"")
    elif damage == "foreign":
        out.unlink()
        out = tmp_path / "t.csv"
        out.write_text("x,y\n1,2\n")
        argv[-1] = str(out)
    else:
        datasets.env_path(out).write_text("{not json")
    kept = out.read_bytes()
    capsys.readouterr()
    line = refused_in_one_line(
        [*argv, "--resume"], ["cannot resume", str(out.name), "force"], capsys, tmp_path
    )
    assert "Traceback" not in line and out.read_bytes() == kept
