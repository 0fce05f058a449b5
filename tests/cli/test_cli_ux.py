"""The command line as a user meets it: --version and python -m h2dlab, the exit-code
policy (0, 1, 2, 130) in --help and in practice, help on every option, strategies,
explain's text and JSON (time, flags, run names, fit warnings, stretches), datasets --json."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from h2dlab import __version__
from h2dlab.cli import main as cli
from h2dlab.cli.explain import JSON_SCHEMA
from h2dlab.cli.main import build_parser
from h2dlab.recording import datasets
from tests.conftest import ROOT, refused_in_one_line, run_cli

NO_CUDA = not torch.cuda.is_available()
FLAGS = Path(__file__).resolve().parents[1] / "data" / "explain_flags.csv"


def _env():
    return {k: v for k, v in os.environ.items() if k != "H2DLAB_DEBUG"}


def _one_line(r, code, *needles):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    err = r.stderr.strip().splitlines()
    assert len(err) == 1, r.stderr
    for n in needles:
        assert n.lower() in err[0].lower(), (n, err[0])
    return err[0]


def test_version_and_python_dash_m():
    r = subprocess.run(
        [sys.executable, "-m", "h2dlab", "--version"], capture_output=True, text=True, cwd=ROOT
    )
    assert r.returncode == 0 and r.stdout.strip() == f"h2dlab {__version__}", r
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"h2dlab {__version__}"


def test_no_command_is_a_usage_error_pointing_at_help():
    r = run_cli()
    line = _one_line(r, 2, "(see h2dlab --help)")
    assert "h2dlab h2dlab" not in line
    _one_line(run_cli("explain"), 2, "see h2dlab explain --help")


def test_help_states_the_exit_codes_and_the_gpu_commands():
    for args in (["--help"], ["measure", "--help"], ["compare", "--help"]):
        r = run_cli(*args)
        assert r.returncode == 0
        for text in (
            "exit codes",
            "0    done",
            "1    this machine",
            "2    the command line",
            "130  interrupted",
        ):
            assert text in r.stdout, (args, text)
        assert "need a CUDA GPU" in r.stdout and "run anywhere" in r.stdout


def test_every_option_has_help():
    p = build_parser()
    sub = next(a for a in p._actions if a.dest == "cmd")
    assert {
        "env",
        "datasets",
        "strategies",
        "measure",
        "forum",
        "overlap",
        "explain",
        "compare",
        "report",
    } <= set(sub.choices)
    missing = [
        f"{name} {'/'.join(a.option_strings) or a.dest}"
        for name, sp in sub.choices.items()
        for a in sp._actions
        if a.dest not in ("help", "seqs") and not a.help  # --seqs: hidden on purpose (tests only)
    ]
    assert not missing, missing


def _main_raising(body: str):
    code = (
        "import sys\nimport h2dlab.cli.main as c\nfrom h2dlab.errors import Unavailable, UsageError\n"
        f"def fake(a, argv):\n    {body}\n"
        "c.COMMANDS['env'] = fake\nsys.exit(c.main(['env']))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_env())


@pytest.mark.parametrize(
    "body,code,needle",
    [
        ("raise Unavailable('CUDA is not available on this machine: replay')", 1, "CUDA is not available"),
        ("raise UsageError('give a size such as 1KiB')", 2, "give a size"),
        (
            "raise OSError(28, 'No space left on device', '/tmp/x.csv')",
            1,
            "No space left on device: /tmp/x.csv",
        ),
        ("raise KeyboardInterrupt", 130, "interrupted"),
        # a name too long for the file system is the name given, not the machine: it was exit 1
        (
            "raise OSError(36, 'File name too long', '/tmp/aaa.csv')",
            2,
            "File name too long: /tmp/aaa.csv: give a shorter",
        ),
    ],
)
def test_exit_codes(body, code, needle):
    _one_line(_main_raising(body), code, needle)


def test_a_bug_exits_1_with_its_traceback():
    r = _main_raising("raise RuntimeError('an internal invariant broke')")
    assert r.returncode == 1 and "Traceback" in r.stderr and "RuntimeError" in r.stderr.splitlines()[-1]


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_missing_cuda_is_a_failure_of_the_machine_not_of_the_command_line(tmp_path):
    _one_line(
        run_cli("measure", "--sizes", "1KiB", "--out", str(tmp_path / "r.csv")), 1, "CUDA is not available"
    )
    _one_line(run_cli("forum", "--out", str(tmp_path / "f.csv")), 1, "CUDA")
    _one_line(run_cli("forum", "--device", "cpu", "--out", str(tmp_path / "f.csv")), 2, "give a cuda device")
    _one_line(run_cli("report", "--mode", "live", "--outdir", str(tmp_path)), 1, "live mode needs CUDA")


def test_strategies_lists_each_with_what_it_times_and_whether_it_runs_here():
    from h2dlab.measure import strategies

    r = run_cli("strategies", "--device", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    rows = {d["name"]: d for d in json.loads(r.stdout)}
    assert set(rows) == set(strategies.REGISTRY)
    for name, cls in strategies.REGISTRY.items():
        assert rows[name]["times"] == cls.summary and rows[name]["direction"] == cls.direction
        assert rows[name]["runs_here"] is (not cls.needs_cuda)
    assert rows["pageable"]["runs_here"] and not rows["pinned_reuse"]["runs_here"]
    text = run_cli("strategies", "--device", "cpu").stdout
    line = next(ln for ln in text.splitlines() if ln.startswith("pinned_reuse "))
    assert "host -> GPU" in line and " no " in line and "pinned buffer" in line
    assert any(ln.startswith("d2h_pageable ") and "GPU -> host" in ln for ln in text.splitlines())


def test_measure_refuses_a_cuda_strategy_on_cpu_up_front(tmp_path):
    out = tmp_path / "r.csv"
    r = run_cli(
        "measure", "--device", "cpu", "--strategies", "pinned_reuse", "--sizes", "1KiB", "--out", str(out)
    )
    _one_line(r, 2, "pinned_reuse needs CUDA", "pageable")
    assert not out.exists() and not list(tmp_path.iterdir())


def test_datasets_json():
    r = run_cli("datasets", "--json")
    assert r.returncode == 0
    assert json.loads(r.stdout) == datasets.names()


# --- explain --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sweep_json():
    r = run_cli("explain", "h200_sweep", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))


def test_explain_h200_sweep_flags_the_pinned_copies(sweep_json):
    # Its CPU time (target 3 s) is benchmarks/bench_explain.py's to print, not a test's to time.
    rep = sweep_json
    want = pd.read_csv(FLAGS, keep_default_na=False)
    want = want[(want.dataset == "h200_sweep") & (want.is_outlier.astype(str) == "True")]
    got = {(f["run"], f["strategy"], f["order"], f["cause"]) for f in rep["flagged"]}
    assert got == set(zip(want.run, want.strategy, want.order, want.cause, strict=True))
    assert len(got) == 31


def test_explain_json_schema(sweep_json):
    rep = sweep_json
    assert set(rep) == set(JSON_SCHEMA) and rep["schema"] == "h2dlab.explain/1"
    assert rep["rows"] == len(datasets.load("h200_sweep")) and rep["timed_rows"] == 6708
    assert {r["run"] for r in rep["runs"]} == {"pow2", "pow2-interleaved", "forum-sizes"}
    fit_keys = JSON_SCHEMA["fit"].split("{")[1].split("}")[0].split(", ")
    flag_keys = JSON_SCHEMA["flagged"].split("{")[1].split("}")[0].split(", ")
    assert all(list(f) == fit_keys for f in rep["fit"]) and len(rep["fit"]) == 14
    assert all(list(f) == flag_keys for f in rep["flagged"])
    assert sum(rep["causes"].values()) == len(rep["flagged"])
    staged = next(f for f in rep["fit"] if f["run"] == "pow2-interleaved" and f["strategy"] == "staged")
    assert staged["poor_fit"] is True and staged["gbps"] < 10 < 30 < staged["measured_gbps"]
    reuse = next(f for f in rep["fit"] if f["run"] == "forum-sizes" and f["strategy"] == "pinned_reuse")
    assert (
        reuse["poor_fit"] is False
        and reuse["warning"] == ""
        and reuse["gbps_lo"] < reuse["gbps"] < reuse["gbps_hi"]
    )


def test_explain_text_names_runs_warns_of_poor_fits_and_groups_stretches():
    r = run_cli("explain", "h200_sweep")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    ids = datasets.load("h200_sweep")["run_id"].unique()
    assert not [i for i in ids if i in out]  # run names, never the hex ids
    assert "! pow2-interleaved staged: the straight line fits poorly" in out
    assert "the fitted line predicts 8.9 GB/s at 4 GiB, measured 37.3 GB/s" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("[pow2 #1520-#1523]"))
    assert "x4" in line and "4 consecutive slow copies" in line and "isolated" not in line
    assert "nan" not in out.lower()


def test_explain_tiny_run_says_n_a_not_nan(tmp_path):
    # Synthetic (made-up) table: 6 timed rows, too few for a bootstrap interval.
    rows = [
        dict(run_id="synthetic", order=i, strategy="pageable", size_bytes=s, shape=f"({s},)", dtype="uint8", rep=k,
             warmup=False, t_s=i * 0.01, wall_ms=0.05 + s / 5e6, event_ms=float("nan"), host_allocs=float("nan"),
             device_allocs=float("nan"), empty_cache=False, error="")
        for i, (s, k) in enumerate([(1024, 0), (1024, 1), (2**20, 0), (2**20, 1), (2**24, 0), (2**24, 1)])
    ]  # fmt: skip
    path = tmp_path / "tiny.csv"
    datasets.save(pd.DataFrame(rows), path)
    r = run_cli("explain", str(path))
    assert r.returncode == 0, r.stderr
    assert "n/a (too few rows)" in r.stdout and "nan" not in r.stdout.lower()
    rep = json.loads(run_cli("explain", str(path), "--json").stdout)
    assert rep["fit"][0]["gbps_lo"] is None and rep["fit"][0]["gbps"] > 0


def test_explain_missing_file_and_annotated_folder(tmp_path):
    _one_line(run_cli("explain", str(tmp_path / "missing.csv.gz")), 2, "no such file")
    _one_line(run_cli("explain", "missing.csv.gz"), 2, "no such file")
    folder = tmp_path / "annotated"
    folder.mkdir()
    assert run_cli("explain", "forum_a100", "--out", str(folder / "a.csv.gz")).returncode == 0
    r = run_cli("explain", str(folder))
    assert r.returncode == 0, r.stderr
    assert "630 rows" in r.stdout and "host_alloc_growth" in r.stdout


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_make_test_gpu_fails_plainly_without_cuda():
    import shutil

    if shutil.which("make") is None:
        pytest.skip("no make here")
    venv_bin = str(Path(sys.executable).parent)
    # -o: take the install stamp as made (this test must not install anything)
    r = subprocess.run(
        ["make", "-s", "-o", ".venv/.installed", "test-gpu", f"BIN={venv_bin}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode != 0
    assert "make test-gpu: this machine has no CUDA device" in r.stderr
    assert "passed" not in r.stdout and "skipped" not in r.stdout  # pytest never ran


def test_building_the_parser_imports_no_torch():
    # Every command builds the whole parser: a torch import there costs seconds on each.
    code = (
        "import sys\nfrom h2dlab.cli.main import build_parser\nbuild_parser()\nprint('torch' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_env())
    assert r.stdout.strip() == "False", r.stderr
    from h2dlab.cli import measuring as cli_measuring
    from h2dlab.measure import batch_methods

    assert cli_measuring.LAYOUTS == batch_methods.LAYOUTS


# --- RECORDING:KIND[:RUN] names (helper attack5): `compare h200:sweep` was "unknown dataset" ---


def _main(capsys, *argv):
    from h2dlab.cli import main as cli

    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err.strip().splitlines()


def test_a_kind_of_the_bundled_recording_is_a_run_name(capsys):
    """h200:sweep is data/h200/sweep (the recording the notebooks read), h200:sweep:pow2-interleaved one run
    of it; the labels are names the command takes back."""
    rc, out, err = _main(capsys, "compare", "h200:sweep", "--strategies", "pageable", "--json")
    assert rc == 0, err
    runs = {c["run"] for c in json.loads(out)}
    assert runs == {f"h200:sweep:{r}" for r in ("pow2-interleaved", "forum-sizes")}  # sweep/pow2 retired
    rc, out, err = _main(capsys, "compare", "h200:sweep:pow2-interleaved", "--sizes", "1MiB", "--json")
    cells = json.loads(out)
    assert rc == 0 and {c["run"] for c in cells} == {"h200:sweep:pow2-interleaved"}
    # the same numbers as the table's own path gives
    rc, out2, _ = _main(
        capsys,
        "compare",
        str(datasets.DATA_DIR / "h200/sweep/pow2-interleaved.csv.gz"),
        "--sizes",
        "1MiB",
        "--json",
    )
    assert [c["median_ms"] for c in json.loads(out2)] == [c["median_ms"] for c in cells]
    rc, out, err = _main(capsys, "explain", "h200:d2h", "--json")
    assert rc == 0 and json.loads(out)["source"] == "h200:d2h" and json.loads(out)["rows"] > 0


def test_explain_takes_dataset_colon_run_as_compare_does(capsys):
    rc, out, err = _main(capsys, "explain", "h200_sweep:pow2", "--json")
    assert rc == 0, err
    assert {r["run"] for r in json.loads(out)["runs"]} == {"pow2"}


@pytest.mark.parametrize(
    "cmd,source,needles",
    [
        ("compare", "h200", ["bundled recording", "h200:KIND", "h200:sweep", "h200_batch"]),
        ("explain", "h200", ["bundled recording", "h200:sweep", "h200_sweep", "h200_batch"]),
        ("compare", "h200:nope", ["h200:nope", "no kind 'nope'", "sweep", "d2h"]),
        ("explain", "h200:sweep:nope", ["no sweep run 'nope'", "pow2-interleaved"]),
        ("compare", "h200:overlap", ["timeline", "h200:sweep"]),
        ("compare", "nothing_here", ["unknown dataset", "h200:KIND"]),
        ("compare", "h200_sweep:nope", ["no run named 'nope'"]),
    ],
)
def test_recording_names_refused_in_one_line(capsys, cmd, source, needles):
    rc, _, err = _main(capsys, cmd, source)
    assert rc == 2 and len(err) == 1, err
    for n in needles:
        assert n in err[0], (n, err[0])


def test_a_recording_folder_with_a_cut_table_names_the_file(tmp_path, capsys, monkeypatch):
    """A SYNTHETIC recording whose sweep table was cut short (a copy stopped mid-way):
    FOLDER:sweep names the damaged file, exit 2; so does report's workbook (was a traceback)."""
    import shutil

    rec = tmp_path / "my rec"
    (rec / "sweep").mkdir(parents=True)
    shutil.copy(datasets.DATA_DIR / "h200" / "recording.json", rec)
    datasets.save(datasets.load("forum_a100").head(60), rec / "sweep" / "synthetic.csv.gz")
    data = (rec / "sweep" / "synthetic.csv.gz").read_bytes()
    (rec / "sweep" / "synthetic.csv.gz").write_bytes(data[: len(data) // 2])
    for cmd in ("compare", "explain"):
        rc, _, err = _main(capsys, cmd, f"{rec}:sweep")
        assert rc == 2 and len(err) == 1 and "synthetic.csv.gz: not a readable .csv.gz table" in err[0], err
    import nbclient

    monkeypatch.setattr(nbclient.NotebookClient, "execute", lambda self, **kw: self.nb)  # no kernel
    rc, out, err = _main(
        capsys, "report", "--data", str(rec), "--only", "05-explore", "--outdir", str(tmp_path / "r")
    )
    assert rc == 2 and len(err) == 1, err
    assert "workbook cannot read" in err[0] and "synthetic.csv.gz: not a readable .csv.gz table" in err[0]


def test_a_tilde_the_shell_left_is_the_home_folder(tmp_path, capsys, monkeypatch):
    """`--out=~/r.csv` reaches h2dlab with its ~ (the shell expands none after '='): measure
    said "the folder '~' of --out does not exist: create it first", and record planned (and
    would have made) a folder named ~ in the current one."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(tmp_path)
    argv = ["measure", "--device", "cpu", "--strategies", "pageable", "--sizes", "1KiB", "--reps", "1"]
    rc, _, err = _main(capsys, *argv, "--warmup", "0", "--no-progress", "--out=~/r.csv")
    assert rc == 0, err
    assert len(datasets.read(tmp_path / "home" / "r.csv")) == 1 and not (tmp_path / "~").exists()
    rc, out, err = _main(capsys, "record", "--device", "cpu", "--dry-run", "--out=~/rec")
    assert rc == 0 and f"into {tmp_path / 'home' / 'rec'}" in out.splitlines()[0], (out, err)
    rc, out, err = _main(capsys, "compare", "~/r.csv", "--json")
    assert rc == 0 and json.loads(out)[0]["run"] == f"{tmp_path / 'home' / 'r.csv'}:r"


@pytest.mark.parametrize("value,traceback", [("0", False), ("", False), ("no", False), ("1", True)])
def test_debug_variable_set_to_0_is_off(monkeypatch, capsys, value, traceback):
    """H2DLAB_DEBUG=0 showed the traceback of a user mistake (any value counted as on)."""
    from h2dlab.cli import main as cli
    from h2dlab.errors import UsageError

    monkeypatch.setenv("H2DLAB_DEBUG", value)
    if traceback:
        with pytest.raises(UsageError):
            cli.main(["explain", "no_such_dataset"])
        return
    rc, _, err = _main(capsys, "explain", "no_such_dataset")
    assert rc == 2 and len(err) == 1 and "unknown dataset" in err[0]


def test_a_kind_leaves_out_a_run_stopped_early(tmp_path, capsys):
    """A SYNTHETIC recording: one whole sweep run and one stopped early (its env.json says 3 of
    30 rows). FOLDER:sweep:half said "no sweep run 'half'" while FOLDER:sweep (and the
    notebooks' rec.table('sweep')) mixed its 3 rows in; now the kind leaves it out and says so."""
    from h2dlab.recording import session

    forum = datasets.load("forum_a100")
    (tmp_path / "rec" / "sweep").mkdir(parents=True)
    datasets.save(
        forum.head(30), tmp_path / "rec" / "sweep" / "whole.csv", env={"run_id": "forum_a100", "n": 1}
    )
    half = forum.iloc[30:33].assign(run_id="synthetic-half")
    datasets.save(
        half,
        tmp_path / "rec" / "sweep" / "half.csv",
        env={"run_id": "synthetic-half", "measured_rows": 3, "planned_rows": 30},
    )
    with pytest.warns(UserWarning, match="left out the unfinished run"):
        t = session.recording(str(tmp_path / "rec")).table("sweep")
    assert set(t["run_id"]) == {"forum_a100"} and len(t) == 30
    assert list(t.attrs["run_names"].values()) == ["whole"]
    capsys.readouterr()
    rc, out, err = _main(capsys, "compare", f"{tmp_path / 'rec'}:sweep", "--json")
    assert rc == 0 and {c["run"] for c in json.loads(out)} == {f"{tmp_path / 'rec'}:sweep:whole"}
    assert len(err) == 1 and "left out the unfinished run(s) half" in err[0] and "record --resume" in err[0]


def test_datasets_names_the_bundled_recordings_kinds(capsys):
    """`h2dlab datasets` listed no name for data/h200's kinds, which compare and explain take."""
    from h2dlab.recording.sources import resolve

    rc, out, _ = _main(capsys, "datasets")
    line = next(ln for ln in out.splitlines() if ln.startswith("h200:KIND "))
    kinds = line.split(": ", 1)[1].split(", ")
    assert rc == 0 and {"sweep", "d2h", "batch", "forum"} <= set(kinds)
    assert resolve("h200:d2h").label == "h200:d2h" and len(resolve("h200:d2h").table) > 0


def test_a_recording_named_like_the_bundled_one_in_the_current_folder(capsys, monkeypatch):
    """In data/ (where the folder h200 is), h200:sweep:pow2 fell through to DATASET:RUN and
    said "h200 is a recording"; the folder there is read as the recording it is."""
    monkeypatch.chdir(datasets.DATA_DIR)
    rc, out, err = _main(capsys, "compare", "h200:sweep:pow2-interleaved", "--sizes", "1GiB", "--json")
    assert rc == 0, err
    assert {c["run"] for c in json.loads(out)} == {"h200:sweep:pow2-interleaved"}


DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture
def two_runs(tmp_path) -> Path:
    """A folder with two runs, each with its own env.json: the schema-1 sweep's pow2 (old
    ``<stem>.env.json`` name, no stall census) and the schema-4 d2h run (with one)."""
    folder = tmp_path / "mix"
    folder.mkdir()
    for f in ("h200_sweep/pow2.csv.gz", "h200_sweep/pow2.env.json", "h200/d2h/d2h.csv.gz"):
        shutil.copy(DATA / f, folder)
    shutil.copy(DATA / "h200/d2h/d2h.csv.gz.env.json", folder)
    return folder


def test_explain_out_refuses_runs_with_their_own_env_json(two_runs, tmp_path, capsys):
    """It wrote the first run's env.json for both: read back, each run was named after the
    file and the schema-1 run was explained with the other run's stall census."""
    out = tmp_path / "ann.csv.gz"
    line = refused_in_one_line(
        ["explain", str(two_runs), "--out", str(out)],
        ["one table with one env.json", "holds 2 runs", f"{two_runs}:d2h", "leave --out out"],
        capsys,
        tmp_path,
    )
    assert line.startswith("h2dlab: error: explain --out writes")
    assert not out.exists() and not datasets.env_path(out).exists()


def test_explain_out_of_one_run_keeps_its_own_env_json(two_runs, tmp_path, capsys):
    out = tmp_path / "pow2-ann.csv.gz"
    assert cli.main(["explain", f"{two_runs}:pow2", "--out", str(out)]) == 0
    capsys.readouterr()
    env = json.loads(datasets.env_path(out).read_text())
    assert env["schema_version"] == 1 and "stall_census" not in env
    assert env["run_id"] == datasets.read(out)["run_id"].unique().tolist()[0]


def test_explain_out_of_a_one_run_dataset_still_works(tmp_path, capsys):
    out = tmp_path / "annotated.csv"  # README's example
    assert cli.main(["explain", "forum_a100", "--out", str(out)]) == 0
    assert "wrote the annotated table" in capsys.readouterr().err
    assert len(datasets.read(out)) == 630


def test_explain_out_keeps_an_existing_env_json_without_force(tmp_path, capsys):
    """Only the table itself was checked: an env.json at <out>.env.json was overwritten."""
    out = tmp_path / "out.csv.gz"
    beside = datasets.env_path(out)
    beside.write_text('{"mine": 1}\n')
    refused_in_one_line(
        ["explain", "forum_a100", "--out", str(out)], [str(beside), "exists", "--force"], capsys, tmp_path
    )
    assert beside.read_text() == '{"mine": 1}\n' and not out.exists()
    assert cli.main(["explain", "forum_a100", "--out", str(out), "--force"]) == 0
    assert json.loads(beside.read_text())["annotated"]["source"] == "forum_a100"


def _d2h_with(tmp_path, name, change) -> Path:
    """The bundled d2h run, changed by ``change(df)``, saved with its env.json."""
    src = DATA / "h200/d2h/d2h.csv.gz"
    df = datasets.read(src)
    df = change(df)
    return datasets.save(df, tmp_path / name, env=datasets.read_env(src))


def _explain_json(path, capsys) -> tuple[int, dict]:
    rc = cli.main(["explain", str(path), "--json"])
    out = capsys.readouterr().out
    return rc, (json.loads(out) if out.strip() else {})


def test_explain_says_how_many_rows_a_zero_time_left_out(tmp_path, capsys):
    """A successful copy with wall_ms and event_ms 0 was dropped by the fit and the check in
    silence ("0 of 498 flagged" counted it); bundled data has none, but a measurement's
    clock can give one, so it is said, not refused."""

    def zero(df):
        i = df.index[~df["warmup"] & (df["strategy"] == "pageable")][5]
        df.loc[i, ["wall_ms", "event_ms"]] = 0.0
        return df

    path = _d2h_with(tmp_path, "one_zero.csv.gz", zero)
    rc, rep = _explain_json(path, capsys)
    assert rc == 0 and rep["timed_rows"] == 498 and rep["checked_rows"] == 497
    assert rep["not_checked"] == [
        "1 with a time of 0 ms (wall_ms, event_ms), which neither the fit nor the check can use"
    ]
    assert cli.main(["explain", str(path)]) == 0
    assert (
        "of 498 timed rows flagged as slow (1 not checked: 1 with a time of 0 ms" in capsys.readouterr().out
    )


def test_explain_of_a_whole_table_checks_every_timed_row(capsys):
    rc, rep = _explain_json("h200:d2h", capsys)
    assert rc == 0 and rep["checked_rows"] == rep["timed_rows"] == 498 and rep["not_checked"] == []


def test_explain_says_no_line_was_fitted_to_copies_of_one_size(tmp_path, capsys):
    """With one size per strategy no line can be fitted: the fit section vanished and
    '0 of 60 timed rows flagged' was all it said (the rows are still checked, against
    their size's median)."""
    path = _d2h_with(tmp_path, "one_size.csv.gz", lambda df: df[df["size_bytes"] == 2**20])
    rc, rep = _explain_json(path, capsys)
    assert rc == 0 and rep["fit"] == [] and rep["checked_rows"] == rep["timed_rows"] > 0
    assert len(rep["not_fitted"]) == 6
    assert "one_size pageable: copies of one size only (1 MiB)" in rep["not_fitted"]
    assert cli.main(["explain", str(path)]) == 0
    text = capsys.readouterr().out
    assert "no line fitted (a line needs copies of two sizes or more): one_size " in text


@pytest.mark.parametrize(
    ("name", "change", "why"),
    [
        ("zero.csv.gz", lambda df: df.assign(wall_ms=0.0, event_ms=0.0), "0 ms"),
        ("warm.csv.gz", lambda df: df[df["warmup"]], "no timed copy that succeeded"),
        ("err.csv.gz", lambda df: df.assign(error="OOM"), "no timed copy that succeeded"),
    ],
)
def test_explain_with_no_copy_it_can_check_exits_2_like_compare(tmp_path, capsys, name, change, why):
    """It printed '0 of N timed rows flagged as slow' with exit code 0: a silent wrong answer."""
    path = _d2h_with(tmp_path, name, change)
    for json_flag in ([], ["--json"]):
        line = refused_in_one_line(
            ["explain", str(path), *json_flag],
            ["nothing to explain", "no copy could be checked", why],
            capsys,
            tmp_path,
        )
        assert str(path) in line
    assert cli.main(["compare", str(path)]) == 2  # the same answer compare gives


@pytest.mark.parametrize(
    ("cmd", "dataset"), [(["overlap"], "h200_overlap"), (["duplex"], "h200_bidir")], ids=["overlap", "duplex"]
)
def test_without_cuda_overlap_and_duplex_name_their_recorded_data(capsys, tmp_path, cmd, dataset):
    """Their hint said 'time host copies on device cpu', which both then refuse."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code = cli.main([*cmd, "--out", str(tmp_path / "o.csv")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1
    assert f"(the dataset {dataset})" in err[0] and "device cpu" not in err[0]
    from h2dlab.recording import datasets

    assert dataset in datasets.names()  # the hint names a dataset that exists


def test_explain_and_compare_say_when_a_table_was_stopped_early(tmp_path, capsys):
    """An interrupted measure keeps its rows and says so in env.json (measured < planned);
    explain and compare showed the sizes it reached as if they were the plan."""
    from h2dlab.recording import sources, tableio

    df = sources.load("h200:sweep:pow2-interleaved")
    env = {**df.attrs["env"], "planned_rows": len(df) + 500, "measured_rows": len(df)}
    out = tableio.save(df, tmp_path / "z.csv", env)
    for cmd in (["explain", str(out)], ["compare", str(out)]):
        assert cli.main(cmd) == 0
        err = capsys.readouterr().err
        want = f"note: {out} holds a run stopped early ({len(df)} of {len(df) + 500} rows)"
        assert want in err, cmd
    whole = tableio.save(
        df, tmp_path / "w.csv", {**df.attrs["env"], "planned_rows": len(df), "measured_rows": len(df)}
    )
    assert cli.main(["compare", str(whole)]) == 0 and "stopped early" not in capsys.readouterr().err


def test_strategies_refuses_cpu_with_an_index_as_measure_does(capsys, tmp_path):
    assert cli.main(["strategies", "--device", "cpu:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["h2dlab: error: unknown device 'cpu:1': use cpu, cuda or cuda:N"]
    assert cli.main(["measure", "--device", "cpu:1", "--out", str(tmp_path / "x.csv")]) == 2
    assert "unknown device 'cpu:1'" in capsys.readouterr().err and not list(tmp_path.iterdir())


def test_the_stopped_note_speaks_only_for_the_run_its_env_names():
    from h2dlab.recording import sources

    df = pd.DataFrame({"run_id": ["a", "b"]})
    env = {"run_id": "a", "measured_rows": 5, "planned_rows": 9}
    df.attrs.update(envs={"a": env, "b": env}, run_names={"a": "a", "b": "b"})
    note = sources.stopped_note(df, "cat.csv")
    assert note is not None and "a: 5 of 9 rows" in note and "b:" not in note
