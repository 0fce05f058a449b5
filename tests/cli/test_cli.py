"""The command line: every user mistake is one line, a non-zero exit and no traceback;
interruptions keep every measured row and --resume finishes the plan exactly."""

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from h2dlab.cli import common as cli_common
from h2dlab.recording import datasets
from tests.conftest import ROOT, refused_in_one_line, run_cli

NO_CUDA = not torch.cuda.is_available()


def _one_line_error(r, *needles):
    assert r.returncode != 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    err = r.stderr.strip().splitlines()
    assert len(err) == 1, r.stderr
    for n in needles:
        assert n.lower() in err[0].lower(), (n, err[0])
    return err[0]


M = ["measure", "--device", "cpu", "--no-progress"]


@pytest.mark.parametrize(
    "args,needles",
    [
        (["--strategies", "teleport", "--sizes", "1KiB"], ["unknown strategy", "pageable"]),
        (["--sizes", "12QB"], ["12QB", "unit"]),
        (["--sizes", "0"], ["must be positive"]),
        (["--sizes=-4KiB"], ["must be positive"]),
        (["--sizes", "1GiB..1KiB"], ["backwards"]),
        (["--sizes", "1KiB", "--reps", "0"], ["--reps", "at least 1"]),
        (["--sizes", "1KiB", "--warmup", "-1"], ["--warmup"]),
        (["--sizes", "1KiB", "--dtype", "float128"], ["unknown dtype"]),
        (["--sizes", "1TiB"], ["host memory", "available"]),
        (["--sizes", "1023", "--dtype", "float32"], ["multiple"]),
    ],
)
def test_measure_bad_input(tmp_path, args, needles):
    r = run_cli(*M, *args, "--out", str(tmp_path / "r.csv"))
    _one_line_error(r, *needles)
    assert r.returncode == 2


def test_output_folder_missing(tmp_path):
    r = run_cli(*M, "--sizes", "1KiB", "--out", str(tmp_path / "nope" / "r.csv"))
    _one_line_error(r, "does not exist")


def test_output_folder_not_writable(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        import os

        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who may write anywhere (root)")
        r = run_cli(*M, "--sizes", "1KiB", "--out", str(ro / "r.csv"))
        _one_line_error(r, "not writable")
    finally:
        ro.chmod(0o700)


def test_output_folder_refusing_writes():
    # /proc refuses new files even to root.
    r = run_cli(*M, "--sizes", "1KiB", "--out", "/proc/h2dlab-test.csv")
    _one_line_error(r, "not writable")


def test_output_extension(tmp_path):
    r = run_cli(*M, "--sizes", "1KiB", "--out", str(tmp_path / "r.json"))
    _one_line_error(r, ".csv", ".parquet", ".xlsx")


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_cuda_missing_is_one_line(tmp_path):
    r = run_cli("measure", "--sizes", "1KiB", "--out", str(tmp_path / "r.csv"))
    _one_line_error(r, "CUDA is not available", "device cpu")
    r = run_cli("forum", "--out", str(tmp_path / "f.csv"))
    _one_line_error(r, "CUDA")


def test_unknown_device(tmp_path):
    r = run_cli("measure", "--device", "tpu", "--sizes", "1KiB", "--out", str(tmp_path / "r.csv"))
    _one_line_error(r, "tpu")


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_live_mode_without_cuda(tmp_path):
    r = run_cli("report", "--mode", "live", "--outdir", str(tmp_path))
    _one_line_error(r, "live mode needs CUDA", "replay")
    r = run_cli("report", "--outdir", str(tmp_path), env={"H2DLAB_MODE": "live"})
    _one_line_error(r, "live mode needs CUDA")


def test_explain_bad_inputs(tmp_path):
    r = run_cli("explain", "no_such_dataset")
    _one_line_error(r, "unknown dataset", "forum_a100")
    foreign = tmp_path / "foreign.csv"
    pd.DataFrame({"x": [1, 2], "y": [3, 4]}).to_csv(foreign, index=False)
    _one_line_error(run_cli("explain", str(foreign)), "not an h2dlab measurement table", "missing column")
    good = tmp_path / "good.parquet"
    datasets.save(datasets.load("forum_a100").head(30), good)
    data = good.read_bytes()
    trunc = tmp_path / "trunc.parquet"
    trunc.write_bytes(data[: len(data) // 3])
    _one_line_error(run_cli("explain", str(trunc)), "not a readable .parquet")
    old = tmp_path / "old.csv"
    datasets.save(
        datasets.load("forum_a100").head(30), old, env={"run_id": "forum_a100", "schema_version": 0}
    )
    _one_line_error(run_cli("explain", str(old)), "schema version 0", "re-run")
    _one_line_error(
        run_cli("explain", "forum_a100", "--out", str(tmp_path / "x" / "a.csv")), "does not exist"
    )
    _one_line_error(run_cli("explain", "forum_a100", "--out", str(tmp_path / "a.json")), "cannot write")


def test_explain_the_bundled_recording_names_what_it_takes(tmp_path, capsys):
    """`h2dlab explain h200` (the recording's name) was 'unknown dataset'."""
    line = refused_in_one_line(
        ["explain", "h200"], ["bundled recording", "h200_sweep", "h200_batch"], capsys, tmp_path
    )
    assert str(datasets.DATA_DIR / "h200" / "sweep") in line
    assert "unknown dataset" not in line


def test_explain_writes_annotated_table(tmp_path):
    out = tmp_path / "a.csv"
    r = run_cli("explain", "forum_a100", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "host_alloc_growth" in r.stdout and "context_init" in r.stdout
    df = pd.read_csv(out)
    assert {"expected_ms", "robust_z", "is_outlier", "episode", "cause", "evidence"} <= set(df.columns)
    assert len(df) == 630


def test_measure_cpu_writes_all_columns(tmp_path):
    out = tmp_path / "r.csv"
    r = run_cli(*M, "--sizes", "1KiB,1MiB", "--strategies", "pageable", "--reps", "3", "--out", str(out))
    assert r.returncode == 0, r.stderr
    df = datasets.read(out)
    assert list(df.columns) == list(datasets.COLUMNS)
    assert (~df.warmup).sum() == 6 and df.warmup.sum() == 4
    assert (df.wall_ms > 0).all() and df.event_ms.isna().all()
    env = datasets.read_env(out)
    assert "measure" in env["command"] and env["cpu_count"] >= 1 and env["gpu_name"] is None


def test_measure_pause_is_recorded_in_the_spec_and_left_out_without_it(tmp_path):
    paused, plain = tmp_path / "p.csv", tmp_path / "n.csv"
    common = [*M, "--sizes", "1KiB,4KiB", "--strategies", "pageable", "--reps", "3", "--warmup", "0"]
    r = run_cli(*common, "--pause", "1", "--out", str(paused))
    assert r.returncode == 0, r.stderr
    assert datasets.read_env(paused)["spec"]["pause_ms"] == 1.0
    assert len(datasets.read(paused)) == 6
    r = run_cli(*common, "--out", str(plain))
    assert r.returncode == 0, r.stderr
    assert "pause_ms" not in datasets.read_env(plain)["spec"]


def _start_and_interrupt(tmp_path, sig):
    out = tmp_path / "i.csv.gz"
    args = [
        *M,
        "--sizes",
        "8MiB,16MiB",
        "--strategies",
        "pageable,pageable_non_blocking",
        "--reps",
        "150",
        "--warmup",
        "1",
        "--out",
        str(out),
    ]
    p = subprocess.Popen(
        [sys.executable, "-m", "h2dlab.cli.main", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    partial = out.with_name(out.name + ".partial.csv")
    t0 = time.time()
    while time.time() - t0 < 60:
        if partial.exists() and len(partial.read_text().splitlines()) > 20:
            break
        time.sleep(0.02)
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    return p, err, out, args


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_keeps_rows_and_resume_completes(tmp_path, sig):
    p, err, out, args = _start_and_interrupt(tmp_path, sig)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "--resume" in err and "rows kept" in err
    kept = datasets.read(out)
    planned = 2 * 2 * 151
    assert 20 <= len(kept) < planned
    assert kept["order"].tolist() == list(range(len(kept)))  # complete up to the interruption
    assert (kept["wall_ms"] > 0).all()
    r = run_cli(*args, "--resume")
    assert r.returncode == 0, r.stderr
    done = datasets.read(out)
    assert len(done) == planned and done["order"].tolist() == list(range(planned))
    assert done["run_id"].nunique() == 1
    assert not done.duplicated(["strategy", "size_bytes", "rep", "warmup"]).any()
    # The first rows are the ones measured before the interruption, untouched.
    pd.testing.assert_frame_equal(done.head(len(kept)), kept, check_dtype=False)


def test_resume_with_other_options_is_refused(tmp_path):
    p, err, out, args = _start_and_interrupt(tmp_path, signal.SIGINT)
    changed = [a if a != "150" else "9" for a in args]
    r = run_cli(*changed, "--resume")
    _one_line_error(r, "cannot resume")


def test_resume_without_a_run(tmp_path):
    r = run_cli(*M, "--sizes", "1KiB", "--out", str(tmp_path / "none.csv"), "--resume")
    _one_line_error(r, "nothing to resume")


def test_datasets_command_lists_all():
    r = run_cli("datasets")
    assert r.returncode == 0
    for n in ("forum_a100", "h200_forum", "h200_sweep", "h200_allocator", "h200_overlap"):
        assert n in r.stdout


def test_env_command_is_json():

    r = run_cli("env")
    env = json.loads(r.stdout)
    assert env["cpu_count"] >= 1 and "torch" in env and env["command"].startswith("h2dlab env")


def _run_main_with(command_body: str):
    """Run h2dlab's main() in a subprocess with the env command replaced by ``command_body``."""
    code = (
        "import sys\nimport h2dlab.cli.main as c\nfrom h2dlab.errors import UsageError\n"
        f"def fake(a, argv):\n    {command_body}\n"
        "c.COMMANDS['env'] = fake\nsys.exit(c.main(['env']))\n"
    )
    e = {k: v for k, v in __import__("os").environ.items() if k != "H2DLAB_DEBUG"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=e)


@pytest.mark.parametrize(
    "body,kind",
    [
        ("raise RuntimeError('an internal invariant broke')", "RuntimeError"),
        ("raise ValueError('not a user mistake')", "ValueError"),
        ("raise KeyError('missing')", "KeyError"),
        ("raise ZeroDivisionError('oops')", "ZeroDivisionError"),
    ],
)
def test_a_bug_keeps_its_traceback(body, kind):
    # (an OSError is the machine's failure, one line and exit 1: tests/cli/test_cli_ux.py)
    r = _run_main_with(body)
    assert r.returncode == 1, r.stderr
    assert "Traceback" in r.stderr and kind in r.stderr.splitlines()[-1]


def test_a_usage_error_is_one_line_exit_2():
    # a line break inside the message (from a file name, or a library's own error text) is
    # shown as text on the one line (escape.terminal_text), never as a second line
    r = _run_main_with("raise UsageError('give a size such as 1KiB\\nand more detail')")
    assert (
        _one_line_error(r, "give a size") == "h2dlab: error: give a size such as 1KiB\\u000aand more detail"
    )
    assert r.returncode == 2


def test_gpus_run_honours_options_and_prints_the_stopped_summary(tmp_path):
    """--gpus (two CPU processes here): interrupted, every rank stops, the rows are kept
    and the summary says how many, without offering a resume that cannot work."""
    out = tmp_path / "g.csv"
    args = [
        *M,
        "--gpus",
        "2",
        "--sizes",
        "8MiB,16MiB",
        "--strategies",
        "pageable",
        "--reps",
        "400",
        "--warmup",
        "0",
        "--empty-host-cache",
        "--dtype",
        "float16",
        "--out",
        str(out),
    ]
    # The command refuses --gpus with --device cpu; widened here to run its code path on CPUs.
    code = f"import sys, h2dlab.cli.main as c, h2dlab.cli.checks as k\nk.GPUS_DEVICE_KINDS = ('cuda', 'cpu')\nsys.exit(c.main({args!r}))"
    p = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    t0 = time.time()
    while time.time() - t0 < 120:
        partials = list(tmp_path.glob(".g.csv.w2.*/rank*.csv.partial.csv"))
        if len(partials) == 2 and all(len(f.read_text().splitlines()) > 5 for f in partials):
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "rows kept" in err and "cannot be resumed" in err
    kept = datasets.read(out)
    assert 10 <= len(kept) < 2 * 2 * 400 and f"{len(kept)} of 1600 rows kept" in err
    assert set(kept["gpu"]) == {0, 1} and kept["dtype"].eq("float16").all()
    spec = kept.attrs["env"]["spec"]
    assert spec["empty_host_cache_each_size"] is True and spec["reps"] == 400
    assert kept.attrs["env"]["stopped_by_signal"] == signal.SIGINT


def test_gpus_refuses_resume(tmp_path):
    r = run_cli(*M, "--gpus", "2", "--sizes", "1KiB", "--out", str(tmp_path / "g.csv"), "--resume")
    _one_line_error(r, "--resume", "--gpus")


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
