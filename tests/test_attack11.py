"""The hostile tester's findings of session 29, each a command a user could type."""

import shlex

import pandas as pd
import pytest

from h2dlab import cli, cli_common


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
    from h2dlab import datasets

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
    r = _h2dlab(["compare", "h200:sweep:pow2"], PYTHONIOENCODING="ascii")
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert " us (" in r.stdout and "µ" not in r.stdout  # µs written as us


def test_a_utf8_table_reads_under_an_ascii_locale(tmp_path):
    """The kit writes UTF-8; reading used the locale's encoding (LC_ALL=C: ASCII)."""
    from h2dlab import sources, tableio

    df = sources.load("h200:sweep:pow2")
    df = df[df.strategy == "pageable"].assign(strategy="pagé")
    out = tableio.save(df, tmp_path / "u.csv", df.attrs.get("env"))
    r = _h2dlab(["explain", str(out)], LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONIOENCODING="utf-8")
    assert r.returncode == 0 and "not a readable" not in r.stderr, r.stderr
    assert "pagé" in r.stdout
