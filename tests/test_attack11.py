"""The hostile tester's findings of session 29, each a command a user could type."""

import shlex

import pandas as pd
import pytest

from h2dlab.cli import common as cli_common
from h2dlab.cli import main as cli


def test_the_resume_line_after_a_forced_run_can_be_run_as_printed(capsys, tmp_path):
    """`measure ... --force --out r.csv`, interrupted: the printed line kept --force, which
    --resume refuses (exit 2). It must drop it, and say --resume once."""
    df = pd.DataFrame({"error": [""], "warmup": [False]})
    df.attrs.update(stopped=True, planned_rows=10)
    argv = ["measure", "--device", "cpu", "--force", "--out", str(tmp_path / "r.csv")]
    assert cli_common.finish_measure(df, tmp_path / "r.csv", argv) == 130
    line = capsys.readouterr().err.strip()
    printed = shlex.split(line.split("resume with: ", 1)[1])
    assert printed == ["h2dlab", "measure", "--device", "cpu", "--out", str(tmp_path / "r.csv"), "--resume"]
    again = cli_common.finish_measure(df, tmp_path / "r.csv", printed[1:])  # interrupted once more
    assert again == 130 and capsys.readouterr().err.strip().endswith("--resume") and "--force" not in line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--methods", "loop_to,loop_to"], "batch method 'loop_to' is named twice"),
        (["--counts", "1,,2"], "has an empty entry"),
        (["--counts", ",1"], "has an empty entry"),
    ],
)
def test_batch_refuses_a_repeated_method_or_an_empty_count_before_measuring(capsys, tmp_path, args, says):
    """A method named twice ran the whole plan, then failed on the table's key and lost it;
    an empty count entry was silently dropped."""
    out = tmp_path / "b.csv"
    argv = ["batch", "--device", "cpu", "--no-progress", "--out", str(out), "--totals", "1KiB", "--reps", "1"]
    try:
        code = cli.main([*argv, *args] if "--counts" in args else [*argv, "--counts", "1", *args])
    except SystemExit as exc:  # argparse's own refusal: its usage line, then the error
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and says in err.strip().splitlines()[-1] and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob("b.csv*"))


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


def _h2dlab(args, **env):
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "h2dlab", *args], capture_output=True, text=True, encoding="utf-8",
        errors="replace", env={**os.environ, **env}, timeout=300,
    )  # fmt: skip


def test_an_ascii_terminal_gets_the_table_not_a_traceback():
    r = _h2dlab(["compare", "h200:sweep:pow2-interleaved"], PYTHONIOENCODING="ascii")
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert " us (" in r.stdout and "µ" not in r.stdout  # µs written as us


def test_a_utf8_table_reads_under_an_ascii_locale(tmp_path):
    """The kit writes UTF-8; reading used the locale's encoding (LC_ALL=C: ASCII)."""
    from h2dlab.recording import sources, tableio

    df = sources.load("h200:sweep:pow2-interleaved")
    df = df[df.strategy == "pageable"].assign(strategy="pagé")
    out = tableio.save(df, tmp_path / "u.csv", df.attrs.get("env"))
    r = _h2dlab(["explain", str(out)], LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONIOENCODING="utf-8")
    assert r.returncode == 0 and "not a readable" not in r.stderr, r.stderr
    assert "pagé" in r.stdout


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


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "is blank"),
        ("   ", "is blank"),
        ("pageable\u202e", "control character or an invisible format"),  # right-to-left override
        ("page\u0085able", "control character or an invisible format"),  # a C1 control (NEL)
    ],
    ids=["empty", "spaces", "rlo", "c1"],
)
def test_a_blank_or_invisible_strategy_name_is_refused(tmp_path, capsys, name, says):
    """explain printed '[run #208]  256 KiB' with no strategy; a U+202E name reversed the line."""
    from h2dlab.recording import datasets

    df = datasets.read(datasets.DATA_DIR / "h200/d2h/d2h.csv.gz")
    df["strategy"] = df["strategy"].astype(object)
    df.loc[df.index[3], "strategy"] = name
    path = tmp_path / "s.csv"
    df.to_csv(path, index=False, encoding="utf-8")  # not save(): it validates, as read does
    for cmd in (["explain", str(path)], ["compare", str(path)]):
        assert cli.main(cmd) == 2, cmd
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "row 3, column strategy" in err[0] and says in err[0], err


@pytest.mark.parametrize("kind", ["timedelta", "datetime"])
def test_a_time_column_stored_as_a_time_span_or_date_is_refused(tmp_path, capsys, kind):
    """A parquet wall_ms stored as a timedelta read as nanoseconds: '24.0 s' for a 24 µs copy."""
    from h2dlab.recording import datasets

    df = datasets.read(datasets.DATA_DIR / "h200/d2h/d2h.csv.gz")
    if kind == "timedelta":
        df["wall_ms"] = pd.to_timedelta(df["wall_ms"], unit="ms")
    else:
        df["wall_ms"] = pd.to_datetime(df["wall_ms"], unit="ms")
    path = tmp_path / "t.parquet"
    df.to_parquet(path)
    said = {"timedelta": "is a time span", "datetime": "is a date"}[kind]
    assert cli.main(["explain", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "column wall_ms" in err[0] and f"{said}, not a number" in err[0], err


def test_a_ctrl_c_while_the_kit_imports_ends_in_one_line():
    """The first ~0.4 s import the kit; a Ctrl-C there gave a 30-line traceback (exit -2).
    The import is made to be interrupted here, deterministically."""
    import subprocess
    import sys

    script = (
        "import builtins\n"
        "real = builtins.__import__\n"
        "def imp(name, *a, **k):\n"
        "    if name == 'h2dlab.cli.main':\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = imp\n"
        "from h2dlab.__main__ import run\n"
        "run()\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 130 and r.stderr == "h2dlab: interrupted\n", (r.returncode, r.stderr)


def test_the_command_enters_through_the_guarded_entry_point():
    from pathlib import Path

    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["h2dlab"] == "h2dlab.__main__:run"


def test_a_file_of_two_runs_names_each_by_its_run_id_and_compare_refuses_a_run_twice(tmp_path, capsys):
    """pd.concat of two runs saved as one file showed both as the file's name: explain said
    'run(s) mix, mix' and `compare mix.csv:a` could pick neither; `compare t t` said 1.00x."""
    from h2dlab.recording import datasets, sources, tableio

    d = sources.load("h200:sweep:pow2-interleaved")
    d = d[d.strategy.isin(["pageable", "pinned_reuse"])]
    d = d.assign(run_id=["a" if i % 2 else "b" for i in range(len(d))])
    # as pd.concat of two runs saved with the first one's env.json: it names run a (an env.json
    # naming neither run is not used, with a warning: tests/test_env_belongs.py)
    mix = tableio.save(d, tmp_path / "mix.csv", {**d.attrs["env"], "run_id": "a"})
    assert set(datasets.load(str(mix)).attrs["run_names"].values()) == {"a", "b"}
    assert cli.main(["compare", f"{mix}:a"]) == 0
    assert f"{mix}:a" in capsys.readouterr().out
    assert cli.main(["compare", str(mix), str(mix)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hold the same run" in err[0]


def test_strategies_refuses_cpu_with_an_index_as_measure_does(capsys, tmp_path):
    assert cli.main(["strategies", "--device", "cpu:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["h2dlab: error: unknown device 'cpu:1': use cpu, cuda or cuda:N"]
    assert cli.main(["measure", "--device", "cpu:1", "--out", str(tmp_path / "x.csv")]) == 2
    assert "unknown device 'cpu:1'" in capsys.readouterr().err and not list(tmp_path.iterdir())


@pytest.mark.parametrize("flag", ["--forc", "--fo", "--force"])
def test_the_resume_line_drops_an_abbreviated_force_too(capsys, tmp_path, flag):
    """argparse takes --forc for --force; the resume line kept it and --resume refused it."""
    df = pd.DataFrame({"error": [""], "warmup": [False]})
    df.attrs.update(stopped=True, planned_rows=10)
    argv = ["measure", "--device", "cpu", flag, "--out", str(tmp_path / "r.csv"), "--resu"]
    assert cli_common.finish_measure(df, tmp_path / "r.csv", argv) == 130
    printed = shlex.split(capsys.readouterr().err.split("resume with: ", 1)[1])
    assert printed == ["h2dlab", "measure", "--device", "cpu", "--out", str(tmp_path / "r.csv"), "--resume"]
    assert not cli_common.abbreviates("--out", "--resume", "--force") and not cli_common.abbreviates(
        "--", "--force"
    )


def test_the_stopped_note_speaks_only_for_the_run_its_env_names():
    from h2dlab.recording import sources

    df = pd.DataFrame({"run_id": ["a", "b"]})
    env = {"run_id": "a", "measured_rows": 5, "planned_rows": 9}
    df.attrs.update(envs={"a": env, "b": env}, run_names={"a": "a", "b": "b"})
    note = sources.stopped_note(df, "cat.csv")
    assert note is not None and "a: 5 of 9 rows" in note and "b:" not in note


@pytest.mark.parametrize(
    ("name", "ok"), [("👩\u200d💻", True), ("🏳️\u200d🌈", True), ("page\u2028able", False)]
)
def test_emoji_joined_by_zwj_pass_and_line_separators_do_not(name, ok):
    from h2dlab.recording.schema import _unprintable

    assert _unprintable(name) is (not ok)
