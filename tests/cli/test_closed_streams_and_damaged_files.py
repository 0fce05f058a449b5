"""Tracebacks the hostile pass of issue #35 found, each now a plain outcome:

- any command started with stdout or stderr closed (``>&-``) failed in its encoding check;
  now it runs, its output going nowhere (as ``>/dev/null``);
- an env.json, recording.json or plan nested past the JSON parser's depth raised
  RecursionError; now it reads as a damaged file, said in one line;
- ``plots.latency`` on a table with one size per strategy failed on an empty fit;
- ``measure --out x.xlsx`` of more rows than a sheet holds measured for hours, then failed
  at the save; now it is refused before measuring (and a save of such a table in one line).
Files and tables are SYNTHETIC.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")


from h2dlab.cli import main as cli
from h2dlab.explain import model
from h2dlab.recording import datasets
from h2dlab.recording.schema import SchemaError  # noqa: E402
from h2dlab.show import plots  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEEP = "[" * 100_000 + "]" * 100_000


def _h2dlab(args, close, tmp_path):
    """Run ``h2dlab args`` with the named descriptors closed, as ``>&-`` leaves them."""
    code = "import os,sys; [os.close(fd) for fd in map(int, sys.argv[1].split(','))]; os.execv(sys.executable, [sys.executable, '-m', 'h2dlab', *sys.argv[2:]])"  # fmt: skip
    marker = tmp_path / "stderr.txt"
    with open(marker, "w") as err:
        r = subprocess.run(
            [sys.executable, "-c", code, ",".join(map(str, close)), *args],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err if 2 not in close else subprocess.DEVNULL,
            timeout=300,
        )
    return r.returncode, marker.read_text()


@pytest.mark.parametrize("close", [(1,), (2,), (1, 2)], ids=["stdout", "stderr", "both"])
@pytest.mark.parametrize(
    "args,rc", [(["datasets"], 0), (["explain", "h200_forum"], 0), (["explain", "no_such_table"], 2)]
)
def test_a_closed_stream_is_no_traceback(tmp_path, close, args, rc):
    got, err = _h2dlab(args, close, tmp_path)
    assert got == rc and "Traceback" not in err


def test_measure_with_stdout_closed_still_writes_its_table(tmp_path):
    out = tmp_path / "m.csv"
    rc, err = _h2dlab(["measure", "--device", "cpu", "--sizes", "1KiB", "--reps", "2", "--warmup", "0",
                       "--strategies", "pageable", "--out", str(out)], (1,), tmp_path)  # fmt: skip
    assert rc == 0 and "Traceback" not in err and len(datasets.read(out)) == 2


def test_a_deeply_nested_env_json_is_a_damaged_file(tmp_path, capsys):
    p = datasets.save(datasets.load("h200_forum").head(50), tmp_path / "t.csv")
    (tmp_path / "t.csv.env.json").write_text(DEEP)
    with pytest.raises(SchemaError, match="not a readable env.json"):
        datasets.read(p)
    assert cli.main(["explain", str(p)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_deeply_nested_recording_json_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "recording.json").write_text(DEEP)
    assert cli.main(["record", "--resume", str(tmp_path / "rec")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be read" in err[0]
    from h2dlab.recording.env_folder import read_folder_env
    from h2dlab.recording.folder import read_manifest

    (tmp_path / "rec" / "env.json").write_text(DEEP)
    assert read_manifest(tmp_path / "rec") is None and read_folder_env(tmp_path / "rec") is None


def test_a_deeply_nested_plan_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "plan.json").write_text(DEEP)
    rc = cli.main(
        ["record", "--device", "cpu", "--plan", str(tmp_path / "plan.json"), "--out", str(tmp_path / "r")]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "cannot read the plan" in err[0]


def test_latency_draws_a_table_with_one_size_per_strategy():
    df = datasets.load("h200_sweep")
    one = df[df["size_bytes"] == df["size_bytes"].iloc[0]]
    fits = model.fit(one, by=("strategy",), n_boot=0)
    assert fits.empty and "strategy" in fits.columns and "gbps" in fits.columns
    ax = plots.latency(one)
    assert len(ax.lines) >= one["strategy"].nunique()  # the medians, no fitted line
    assert not any(line.get_linestyle() == "--" for line in ax.lines)


def test_measure_to_xlsx_past_a_sheet_is_refused_before_measuring(tmp_path, capsys, monkeypatch):
    from h2dlab.measure import harness as measure

    monkeypatch.setattr(measure, "sweep", lambda *a, **k: pytest.fail("it measured"))
    out = tmp_path / "big.xlsx"
    rc = cli.main(["measure", "--device", "cpu", "--sizes", "1KiB", "--reps", "1048576", "--warmup", "0",
                   "--strategies", "pageable", "--out", str(out), "--max-hours", "1000"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "1,048,575 rows an .xlsx sheet holds" in err[0] and not out.exists()


def test_saving_past_a_sheet_is_one_line(tmp_path, monkeypatch):
    from h2dlab.recording import tableio

    monkeypatch.setattr(tableio, "XLSX_MAX_ROWS", 10)
    with pytest.raises(SchemaError, match="more than the 10 an .xlsx sheet holds"):
        datasets.save(datasets.load("h200_forum").head(11), tmp_path / "t.xlsx")


def _h2dlab_env(args, **env):
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "h2dlab", *args], capture_output=True, text=True, encoding="utf-8",
        errors="replace", env={**os.environ, **env}, timeout=300,
    )  # fmt: skip


def test_an_ascii_terminal_gets_the_table_not_a_traceback():
    r = _h2dlab_env(["compare", "h200:sweep:pow2-interleaved"], PYTHONIOENCODING="ascii")
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert " us (" in r.stdout and "µ" not in r.stdout  # µs written as us


def test_a_utf8_table_reads_under_an_ascii_locale(tmp_path):
    """The kit writes UTF-8; reading used the locale's encoding (LC_ALL=C: ASCII)."""
    from h2dlab.recording import sources, tableio

    df = sources.load("h200:sweep:pow2-interleaved")
    df = df[df.strategy == "pageable"].assign(strategy="pagé")
    out = tableio.save(df, tmp_path / "u.csv", df.attrs.get("env"))
    r = _h2dlab_env(["explain", str(out)], LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONIOENCODING="utf-8")
    assert r.returncode == 0 and "not a readable" not in r.stderr, r.stderr
    assert "pagé" in r.stdout


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

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["h2dlab"] == "h2dlab.__main__:run"


MEASURE_JSON = ["measure", "--device", "cpu", "--sizes", "1KiB", "--reps", "2", "--warmup", "0",
                "--strategies", "pageable", "--json"]  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [["datasets", "--json"], ["compare", "h200_sweep", "--json"], ["env"], MEASURE_JSON],
    ids=["datasets", "compare", "env", "measure"],
)
def test_json_to_a_closed_stdout_is_refused_in_one_line(tmp_path, args):
    """``--json >&-`` exited 0 having written nothing (second hostile pass of issue #35): the
    JSON is the command's result, so it is refused before any work, exit 2, one line."""
    out = tmp_path / "m.csv"
    args = [*args, "--out", str(out)] if args[0] == "measure" else args
    rc, err = _h2dlab(args, (1,), tmp_path)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    assert lines[0].startswith("h2dlab: error: ") and "stdout, which is closed" in lines[0]
    assert not out.exists()  # measure refused before it measured
    rc, err = _h2dlab(args, (1, 2), tmp_path)
    assert rc == 2 and not out.exists()
