"""Hostile inputs found by the tenth attack pass, on ``explain`` and ``compare``."""

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from h2dlab.cli import main as cli
from h2dlab.recording import datasets
from tests.conftest import refused_in_one_line

DATA = Path(__file__).resolve().parent.parent / "data"


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


@pytest.mark.parametrize("name", ["py\tthon", "\x1b[2Jevil", "a\nb"])
def test_a_busiest_thread_with_control_characters_is_refused(tmp_path, capsys, name):
    """explain printed it raw in the evidence: a terminal escape from a table."""
    path = tmp_path / "ctrl.csv.gz"
    df = datasets.read(DATA / "h200/d2h/d2h.csv.gz")
    df.loc[df.index[3], "busiest_thread"] = name
    df.to_csv(path, index=False)  # not save(): it validates, as read does
    refused_in_one_line(
        ["explain", str(path)], ["row 3", "busiest_thread", "control character"], capsys, tmp_path
    )


def test_real_thread_names_pass():
    df = datasets.read(DATA / "h200/d2h/d2h.csv.gz")
    df["busiest_thread"] = ["python3", "pt_autograd_0", "cuda-EvtHandlr", ""] * (len(df) // 4) + [""] * (
        len(df) % 4
    )
    assert datasets.validate(df)["busiest_thread"].tolist() == df["busiest_thread"].tolist()


def _catches_sigterm(status: Path) -> bool:
    """Whether the process behind ``/proc/<pid>/status`` has a SIGTERM handler (SigCgt)."""
    try:
        line = next(ln for ln in status.read_text().splitlines() if ln.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


def _terminated(*args) -> tuple[int, str]:
    """Run ``h2dlab args`` and send SIGTERM once main() has installed its handler (the
    process's SigCgt says so), long before it ends; its exit code and stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "h2dlab.cli.main", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    status = Path(f"/proc/{proc.pid}/status")
    t0 = time.time()
    while proc.poll() is None and time.time() - t0 < 60 and not _catches_sigterm(status):
        time.sleep(0.005)  # main() installs its handler once the imports are done (~1 s)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
@pytest.mark.parametrize(
    "args",
    [("explain", "h200:sweep", "--json"), ("compare", *["h200_omp"] * 8, "--json")],
    ids=["explain", "compare"],
)
def test_sigterm_exits_130_with_one_line(args):
    """SIGTERM killed explain and compare with 143 and no word; --help promises 130."""
    rc, err = _terminated(*args)
    assert rc == 130, err
    assert err.strip().splitlines() == ["h2dlab: interrupted"]


def test_compare_refuses_a_strategy_the_runs_lack(tmp_path, capsys):
    """--strategies pinned_reuse,nosuch showed pinned_reuse and passed over the typo."""
    argv = [
        "compare",
        "h200:sweep:pow2-interleaved",
        "--strategies",
        "pinned_reuse,nosuch",
        "--sizes",
        "1GiB",
    ]
    line = refused_in_one_line(
        argv, ["unknown strategy 'nosuch'", "--strategies", "pinned_reuse, "], capsys, tmp_path
    )
    assert "pageable" in line and "'pinned_reuse'" not in line


def test_compare_refuses_a_size_the_runs_lack(tmp_path, capsys):
    argv = ["compare", "h200:sweep:pow2-interleaved", "--strategies", "pinned_reuse", "--sizes", "1GiB,7GiB"]
    line = refused_in_one_line(
        argv, ["--sizes 7 GiB", "no timed copy of that size", "1 KiB, 2 KiB"], capsys, tmp_path
    )
    assert line.endswith("1 GiB, 2 GiB")


def test_compare_with_known_names_and_sizes_still_shows_them(capsys):
    assert (
        cli.main(
            [
                "compare",
                "h200:sweep:pow2-interleaved",
                "--strategies",
                "pinned_reuse",
                "--sizes",
                "1GiB",
                "--json",
            ]
        )
        == 0
    )
    cells = json.loads(capsys.readouterr().out)
    assert [(c["strategy"], c["size_bytes"]) for c in cells] == [("pinned_reuse", 2**30)]


@pytest.mark.parametrize("source", ["h200::", "h200:"])
def test_a_recording_with_an_empty_kind_names_its_kinds(tmp_path, capsys, source):
    """'h200::' said "give h200: for every  run, or h200::RUN": an empty kind slot."""
    line = refused_in_one_line(
        ["explain", source], [f"{source!r} names no kind", "h200:KIND", "sweep, "], capsys, tmp_path
    )
    assert "h200::RUN" not in line and "every  run" not in line


@pytest.mark.parametrize("version", ['"4"', "true", "4.0"])
def test_a_schema_version_that_is_no_whole_number_is_a_damaged_env_json(tmp_path, capsys, version):
    """It said 'written with table schema version '4' ... upgrade h2dlab': no newer kit wrote it."""
    src = DATA / "h200/d2h/d2h.csv.gz"
    path = tmp_path / "v.csv.gz"
    shutil.copy(src, path)
    text = datasets.env_path(src).read_text()
    datasets.env_path(path).write_text(re.sub(r'"schema_version": \d+', f'"schema_version": {version}', text))
    line = refused_in_one_line(
        ["explain", str(path)], ["schema_version", "not a whole number", "damaged"], capsys, tmp_path
    )
    assert "upgrade" not in line
