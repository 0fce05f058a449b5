"""Hostile command-line cases that tests/test_bad_input.py did not cover (helper "attack"):
each one gave a traceback, a wrong exit code, a misleading line, or a plan that cannot run.
The command: exit code 2 and ONE line on stderr, no traceback, nothing written."""

import re

import pytest

from h2dlab.cli import main as cli
from h2dlab.measure.strategies import REGISTRY
from h2dlab.recording import datasets
from tests.conftest import refused_in_one_line


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A SYNTHETIC recording folder (a table one level down, as `h2dlab record` lays it
    out) and a SYNTHETIC table whose every timed copy failed."""
    good = datasets.load("forum_a100").head(30)
    (tmp_path / "rec" / "sweep").mkdir(parents=True)
    datasets.save(good, tmp_path / "rec" / "sweep" / "synthetic.csv")
    datasets.save(good.assign(error="synthetic failure"), tmp_path / "allfailed.csv")
    (tmp_path / "envdir.csv.env.json").mkdir()
    (tmp_path / "pdir.csv.partial.csv").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


CASES = [
    # compare used to let load()'s ValueError escape: a traceback and exit 1
    (["compare", "h200_overlap"], ["timeline"]),
    (["compare", "h200_overlap:x"], ["timeline"]),
    (["compare", ""], ["empty dataset name"]),
    (["compare", " h200_sweep"], ["spaces around"]),
    (["compare", "~\x00x"], ["NUL byte"]),  # expanding ~ looked up a user named '\x00x': ValueError
    (["explain", "~\x00"], ["NUL byte"]),
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
    # report: an empty --data reported the current folder, an empty --outdir wrote into it;
    # an --outdir that is a file failed late with exit 1 ("File exists")
    (["report", "--data", ""], ["--data is empty"]),
    (["report", "--outdir", " "], ["--outdir is empty"]),
    (["report", "--outdir", "{d}/allfailed.csv"], ["is a file"]),
    # an --outdir that cannot be made: exit 1, "No such file or directory: /proc/x" (attack5)
    (["report", "--outdir", "/proc/h2dlab-no-reports"], ["--outdir /proc/h2dlab-no-reports", "cannot write"]),
    (["report", "--outdir", "{d}/allfailed.csv/r"], ["--outdir", "allfailed.csv is a file"]),
    # an option the subcommand lacks: the line sent the user to `h2dlab --help`
    (
        ["duplex", "--out", "{d}/d.csv", "--resume"],
        ["unrecognized arguments: --resume", "h2dlab duplex --help"],
    ),
    (["explain", "forum_a100", "extra"], ["unrecognized arguments: extra", "h2dlab explain --help"]),
    # an empty --strategies blamed the filters ("no timed rows match")
    (["compare", "{d}/rec/sweep", "--strategies", " , "], ["--strategies is empty"]),
    # a negative size after a space was taken for an option: "expected one argument"
    (["measure", "--device", "cpu", "--sizes", "-1MiB", "--out", "{d}/m.csv"], ["'-1MiB' must be positive"]),
    (["compare", "forum_a100", "--sizes", "-1KiB"], ["'-1KiB' must be positive"]),
    # the table's env.json (or the partial file) is a folder: the run measured, then failed (exit 1)
    (["measure", "--device", "cpu", "--out", "{d}/envdir.csv"], ["envdir.csv.env.json is a folder"]),
    (["batch", "--device", "cpu", "--out", "{d}/envdir.csv", "--force"], ["envdir.csv.env.json is a folder"]),
    (["explain", "forum_a100", "--out", "{d}/envdir.csv"], ["envdir.csv.env.json is a folder"]),
    (["measure", "--device", "cpu", "--out", "{d}/pdir.csv"], ["pdir.csv.partial.csv is a folder"]),
    # a table named like a run in progress: folder readers skip it
    (["measure", "--device", "cpu", "--out", "{d}/t.partial.csv"], [".partial.csv names a run in progress"]),
    # --resume and --force together: one of them was silently chosen
    (["measure", "--device", "cpu", "--out", "{d}/allfailed.csv", "--resume", "--force"], ["give one"]),
    (["batch", "--device", "cpu", "--out", "{d}/allfailed.csv", "--resume", "--force"], ["give one"]),
    # explain --out in the folder it reads (helper attack5): --force replaced a source table,
    # and a new file there became one more run of that dataset or recording
    (
        ["explain", "{d}/rec/sweep", "--out", "{d}/rec/sweep/synthetic.csv", "--force"],
        ["inside", "explain reads"],
    ),
    (["explain", "{d}/rec/sweep:synthetic", "--out", "{d}/rec/sweep/synthetic.csv", "--force"], ["inside"]),
    (["explain", "{d}/rec:sweep", "--out", "{d}/rec/sweep/annotated.csv"], ["inside", "rec"]),
    (["explain", "h200_sweep:pow2", "--out", "{data}/h200_sweep/annotated.csv"], ["inside", "h200_sweep"]),
    (["explain", "h200:sweep", "--out", "{data}/h200/sweep/annotated.csv"], ["inside"]),
    # batch named a method '(none)'
    (["batch", "--device", "cpu", "--methods", "", "--out", "{d}/b.csv"], ["no batch method given"]),
]


@pytest.mark.parametrize("argv,needles", CASES, ids=[" ".join(c[0])[:50] for c in CASES])
def test_cli_refuses_in_one_line(place, capsys, argv, needles):
    argv = [a.replace("{d}", str(place)).replace("{data}", str(datasets.DATA_DIR)) for a in argv]
    before = (place / "rec" / "sweep" / "synthetic.csv").read_bytes()
    refused_in_one_line(argv, needles, capsys, place)
    assert (place / "rec" / "sweep" / "synthetic.csv").read_bytes() == before
    assert [p.name for p in (place / "rec" / "sweep").iterdir()] == ["synthetic.csv"]


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


def test_an_interrupted_batch_resumes_to_the_whole_plan(tmp_path, capsys):
    """An interrupted `h2dlab batch` said "run it again to finish", and running it again
    refused (the table exists; batch had neither --resume nor --force): its rows could
    never be completed, nor could `h2dlab record --resume` finish a batch experiment."""
    from h2dlab.measure.batch import BatchSpec, batch, plan_batch
    from h2dlab.measure.recorder import StopFlag

    spec = BatchSpec(counts=(1, 4), totals=(4096, 65536), reps=2, warmup=1, device="cpu")
    out = tmp_path / "b.csv"
    stop, calls = StopFlag(), iter(range(10**6))

    def clock():  # a fake host clock that asks for a stop after a few copies
        if next(calls) == 40:
            stop.request()
        return 0.0

    first = batch(spec, out=out, progress=False, clock=clock, stop=stop)
    planned = plan_batch(spec)
    assert first.attrs["stopped"] and 0 < len(first) < len(planned)
    argv = ["batch", "--device", "cpu", "--counts", "1,4", "--totals", "4KiB,64KiB", "--reps", "2"]
    argv += ["--warmup", "1", "--out", str(out), "--no-progress"]
    assert cli.main(argv) == 2  # kept, never replaced unasked
    assert "--resume" in capsys.readouterr().err
    assert cli.main([*argv, "--resume"]) == 0
    whole = datasets.read(out)
    assert len(whole) == len(planned)
    assert whole["run_id"].nunique() == 1  # continued, not started over
    assert sorted(whole["order"]) == list(range(len(planned)))
    assert whole["run_id"].iloc[0] == first["run_id"].iloc[0]  # the first rows are kept as they were
    cols = ["order", "strategy", "size_bytes", "n_tensors", "rep", "warmup"]
    head = whole.sort_values("order").head(len(first))[cols].reset_index(drop=True)
    assert head.astype(str).equals(first[cols].reset_index(drop=True).astype(str))


def test_duplex_takes_force_and_names_it(tmp_path, capsys):
    """duplex had no --force, yet an existing --out was refused with "force a new run"."""
    out = tmp_path / "d.csv"
    out.write_text("an earlier table\n")
    assert cli.main(["duplex", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--force" in err[0] and "--resume" not in err[0]
    assert out.read_text() == "an earlier table\n"


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


def test_a_failed_notebook_is_named_without_terminal_colours(tmp_path, capsys, monkeypatch):
    """The failure line quoted the kernel's coloured traceback: '\\x1b[31mValueError\\x1b[39m'."""
    import nbclient
    from nbclient.exceptions import CellExecutionError

    from h2dlab.show import report

    def fail(self, **kw):
        tb = "Cell In[3], line 1\n\x1b[31mValueError\x1b[39m: synthetic failure"  # as nbclient words it
        raise CellExecutionError(tb, "ValueError", "synthetic failure")

    monkeypatch.setattr(nbclient.NotebookClient, "execute", fail)
    assert report.build(outdir=tmp_path, notebooks=["05-explore"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "\x1b" not in err and "failed (ValueError: synthetic failure)" in err, err


def test_a_bad_commit_variable_is_one_warning_line_once(tmp_path, capsys, monkeypatch):
    """H2DLAB_GIT_COMMIT=garbage printed Python's two-line warning (file:line and the source
    line) twice per measure: once per env.json written."""
    monkeypatch.setenv("H2DLAB_GIT_COMMIT", "garbage")
    argv = ["measure", "--device", "cpu", "--no-progress", "--strategies", "pageable", "--sizes", "1KiB"]
    for _ in range(2):  # a second command in the same process warns again, once
        out = tmp_path / f"m{_}.csv"
        assert cli.main([*argv, "--reps", "1", "--out", str(out)]) == 0
        err = capsys.readouterr().err.strip().splitlines()
        assert [ln for ln in err if "garbage" in ln] == [
            "h2dlab: warning: H2DLAB_GIT_COMMIT='garbage' is not a commit (7 to 40 hex digits): ignored, asking git"
        ], err
        assert len(err) == 2 and err[1].startswith("wrote "), err


@pytest.mark.parametrize("cmd", ["explain", "compare"])
def test_a_timeline_given_as_a_table_is_named_a_timeline(tmp_path, capsys, cmd):
    """A recording's overlap/ folder (a timeline) was refused with a list of 13 missing
    columns, as if it were a broken table."""
    rows = "scenario,rep,op,start_ms,end_ms,host_return_ms\npinned_1stream,0,copy,0.0,1.0,0.1\n"
    (tmp_path / "overlap").mkdir()
    (tmp_path / "overlap" / "synthetic.csv").write_text(rows)
    line = refused_in_one_line([cmd, str(tmp_path / "overlap")], ["is an overlap timeline"], capsys, tmp_path)
    assert "missing column" not in line


def test_report_live_without_cuda_names_the_option_given(tmp_path, capsys):
    """`report --mode live` on a machine without CUDA said "use H2DLAB_MODE=replay", which
    --mode overrides: following it changed nothing."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the refusal on a machine without CUDA")
    assert cli.main(["report", "--mode", "live", "--outdir", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--mode replay" in err[0] and "H2DLAB_MODE" not in err[0], err
    assert not (tmp_path / "r").exists()


def test_an_inherited_data_variable_is_checked_before_any_notebook(tmp_path, capsys, monkeypatch):
    """H2DLAB_DATA naming no recording: the notebooks ran (and wrote their pages) and only
    the workbook, at the end, refused it."""
    monkeypatch.setenv("H2DLAB_DATA", str(tmp_path / "none"))
    monkeypatch.delenv("H2DLAB_MODE", raising=False)
    assert cli.main(["report", "--outdir", str(tmp_path / "r"), "--only", "05-explore"]) == 2
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [  # names the variable (helper attack5): the user did not type it
        f"h2dlab: error: H2DLAB_DATA={tmp_path / 'none'}: no recording '{tmp_path / 'none'}': give 'h200' "
        "(the bundled data) or the folder that `h2dlab record` wrote"
    ]
    assert "executing" not in out and not (tmp_path / "r").exists()


@pytest.mark.parametrize("dry", [False, True])
@pytest.mark.parametrize("where", ["file", "under-file"])
def test_a_runs_variable_that_names_a_file_is_named(tmp_path, capsys, monkeypatch, where, dry):
    """H2DLAB_RUNS pointing at a file: the line said "cannot create .../vm-cpu-<date>: Not a
    directory" (not which setting chose that folder), and --dry-run said nothing."""
    (tmp_path / "afile").write_text("not a folder")
    runs = tmp_path / "afile" if where == "file" else tmp_path / "afile" / "sub"
    monkeypatch.setenv("H2DLAB_RUNS", str(runs))
    line = refused_in_one_line(
        ["record", "--device", "cpu", "--only", "sweep", *(["--dry-run"] if dry else [])],
        ["is a file", f"H2DLAB_RUNS={runs}", "--out"],
        capsys,
        tmp_path,
    )
    assert str(tmp_path / "afile") in line


def test_a_runs_folder_that_cannot_be_made_names_the_variable(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("H2DLAB_RUNS", "/proc/h2dlab-no-such-runs")
    refused_in_one_line(
        ["record", "--device", "cpu", "--only", "sweep"],
        ["cannot create /proc/h2dlab-no-such-runs/", "H2DLAB_RUNS=/proc/h2dlab-no-such-runs"],
        capsys,
        tmp_path,
    )


def test_forum_on_a_device_torch_cannot_read_is_one_line(tmp_path, capsys, monkeypatch):
    """ForumSpec takes 'cuda:٣' (str.isdigit), then torch.device() raised a RuntimeError:
    a traceback and exit 1. Checked with a pretend CUDA machine."""
    from tests.fake_cuda import install

    install(monkeypatch)
    refused_in_one_line(
        ["forum", "--device", "cuda:٣", "--out", str(tmp_path / "f.csv")],
        ["unknown device"],
        capsys,
        tmp_path,
    )


def test_live_mode_refuses_a_runs_variable_naming_a_file_before_recording(tmp_path, monkeypatch):
    """Live mode (report --mode live, a notebook's MODE) with H2DLAB_RUNS naming a file: it
    started `h2dlab record --quick --out FILE/<name>`, which failed, and raised a RuntimeError
    ("record exited with 2") that showed as a traceback. Now: UsageError naming the variable,
    and no recorder started."""
    import subprocess

    from h2dlab.errors import UsageError
    from h2dlab.recording import live

    (tmp_path / "afile").write_text("not a folder")
    monkeypatch.setenv("H2DLAB_RUNS", str(tmp_path / "afile"))

    def no_recorder(*a, **k):
        raise AssertionError(f"a recorder was started: {a}")

    monkeypatch.setattr(subprocess, "Popen", no_recorder)
    with pytest.raises(UsageError, match=f"H2DLAB_RUNS={tmp_path / 'afile'} names where recordings go, but"):
        live.live_recording(machine={"hostname": "synthetic-host", "gpu_name": "Synthetic GPU"})
