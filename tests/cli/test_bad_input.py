"""Bad input across the command line and the library (issue 15): every case is refused
before anything is measured or written. The command: exit code 2, ONE line on stderr,
no traceback. The library: ``ValueError``/``TypeError`` with a message in library terms."""

import math

import pandas as pd
import pytest
import torch

from h2dlab.cli import main as cli
from h2dlab.errors import UsageError
from h2dlab.findings import advice
from h2dlab.measure.concurrent import parse_gpus
from h2dlab.measure.recorder import Recording
from h2dlab.measure.spec import ForumSpec, OverlapSpec, SweepSpec
from h2dlab.recording import datasets
from h2dlab.recording.partial import partial_path
from h2dlab.transfer import fastpath as transfer
from h2dlab.units import parse_int, parse_size, parse_sizes
from tests.conftest import refused_in_one_line

M = ["measure", "--device", "cpu", "--no-progress", "--strategies", "pageable", "--sizes", "1KiB"]
F = ["forum", "--device", "cpu", "--no-progress"]
OV = ["overlap", "--device", "cpu"]


@pytest.fixture
def place(tmp_path):
    """Files the cases refer to: an existing output, a killed run's partial file, a planted
    link, a folder named like a table, a table that is not h2dlab's, one with an infinity."""
    (tmp_path / "exists.csv").write_text("an earlier table\n")
    (tmp_path / "budget.xlsx").write_bytes(b"PK not ours")
    (tmp_path / "killed.csv.partial.csv").write_text(",".join(datasets.COLUMNS) + "\n")
    partial_path(tmp_path / "linked.csv").symlink_to(tmp_path / "victim.txt")
    (tmp_path / "folder.csv").mkdir()
    pd.DataFrame({"x": [1, 2]}).to_csv(tmp_path / "foreign.csv", index=False)
    good = datasets.load("forum_a100").head(30)
    datasets.save(good, tmp_path / "good.csv")
    bad = good.astype({"wall_ms": object})
    bad.loc[3, "wall_ms"] = "inf"
    bad.to_csv(tmp_path / "inf.csv", index=False)
    good.drop(columns=["error"]).to_csv(tmp_path / "noerror.csv", index=False)
    return tmp_path


CLI_CASES = [
    # measure: what to measure
    ([*M, "--strategies", "teleport"], ["unknown strategy"]),
    ([*M, "--strategies", "pageable,pageable"], ["named twice"]),
    ([*M, "--strategies", ","], ["no strategy"]),
    ([*M, "--sizes", "12QB"], ["12QB", "unit"]),
    ([*M, "--sizes", "0"], ["must be positive"]),
    ([*M, "--sizes=-4KiB"], ["must be positive"]),
    ([*M, "--sizes", "1GiB..1KiB"], ["backwards"]),
    ([*M, "--sizes", "0.5"], ["whole number of bytes"]),
    ([*M, "--sizes", ""], ["no sizes"]),
    ([*M, "--sizes", "1e3"], ["cannot read size"]),
    ([*M, "--sizes", "9" * 60], ["too large"]),
    ([*M, "--sizes", "1KiB,,2KiB"], ["empty entry", "1KiB,,2KiB"]),  # was "cannot read size ''"
    ([*M, "--sizes", "1KiB.."], ["'1KiB..' lacks an end"]),
    # int() took other scripts' digits and underscores where sizes refuse them
    ([*M, "--reps", "١٠"], ["--reps", "'١٠' is not a whole number", "0-9"]),
    ([*M, "--reps", "1_0"], ["--reps", "'1_0' is not a whole number"]),
    ([*M, "--warmup", "٢"], ["--warmup", "not a whole number"]),
    ([*M, "--reps-large", "３"], ["--reps-large", "not a whole number"]),
    ([*M, "--seed", "٣"], ["--seed", "'٣' is not a whole number"]),
    ([*M, "--seed", "9" * 60], ["--seed", "too large"]),
    ([*F, "--seed", "٣"], ["--seed", "not a whole number"]),
    ([*F, "--seqs", "١"], ["--seqs"]),
    (["batch", "--device", "cpu", "--counts", "١,16", "--out", "{d}/b.csv"], ["--counts", "whole numbers"]),
    (["batch", "--device", "cpu", "--seed", "1_000", "--out", "{d}/b.csv"], ["--seed", "whole number"]),
    (["duplex", "--device", "cpu", "--reps", "٥", "--out", "{d}/b.csv"], ["--reps", "whole number"]),
    (["record", "--device", "cuda:٣", "--dry-run"], ["unknown device"]),
    ([*M, "--reps", "0"], ["--reps", "at least 1"]),
    ([*M, "--reps", "ten"], ["--reps", "whole number"]),
    ([*M, "--reps", "99999999999"], ["copies", "at most"]),
    ([*M, "--sizes", "1GiB", "--reps", "200000"], ["hours", "--max-hours"]),
    ([*M, "--warmup", "-1"], ["--warmup"]),
    ([*M, "--reps-large", "0"], ["--reps-large"]),
    ([*M, "--dtype", "float128"], ["unknown dtype"]),
    ([*M, "--dtype", "bool"], ["bool", "uint8"]),
    ([*M, "--dtype", "qint8"], ["no plain copy"]),
    ([*M, "--dtype", "__class__"], ["unknown dtype"]),
    ([*M, "--sizes", "1023", "--dtype", "float32"], ["multiple"]),
    ([*M, "--seed", str(2**64)], ["64 bits"]),
    ([*M, f"--seed={-(2**63) - 1}"], ["64 bits"]),
    ([*M, "--seed", "abc"], ["--seed"]),
    ([*M, "--order", "random"], ["--order"]),
    ([*M, "--device", "tpu"], ["tpu"]),
    ([*M, "--device", "cuda:x"], ["unknown device"]),
    ([*M, "--device", "cpu:0"], ["unknown device"]),
    ([*M, "--gpus", "1..2"], ["--gpus", "cuda"]),
    ([*M, "--gpus", "2", "--resume"], ["--resume", "--gpus"]),
    ([*M, "--pause", "-1"], ["--pause", "'-1' is out of range: give 0 to 1000 milliseconds"]),
    ([*M, "--pause=-0.5"], ["--pause", "'-0.5' is out of range"]),
    ([*M, "--pause", "nan"], ["--pause", "'nan' is not a number"]),
    ([*M, "--pause", "abc"], ["--pause", "'abc' is not a number"]),
    ([*M, "--pause", "2000"], ["--pause", "'2000' is out of range: give 0 to 1000 milliseconds"]),
    ([*M, "--pause", "inf"], ["--pause", "out of range"]),
    ([*M, "--pause", "٣"], ["--pause", "not a number"]),
    ([*M, "--max-hours", "0"], ["--max-hours"]),
    ([*M, "--max-hours", "nan"], ["--max-hours"]),
    ([*M, "--max-hours", "٣"], ["--max-hours", "'٣' is not a number"]),  # float() took it (attack5)
    ([*M, "--max-hours", "1_0"], ["--max-hours", "not a number"]),
    ([*M, "--bogus"], ["unrecognized"]),
    (["measure", "--device", "cpu", "--no-out"], ["--out"]),
    # measure: where it goes
    ([*M, "--out", "{d}/r.json"], ["cannot write"]),
    # a suffix and no name ('$NAME.csv' with NAME empty) wrote a hidden file '.csv' (attack5)
    ([*M, "--out", "{d}/.csv"], ["cannot write '.csv'", "file name before its suffix"]),
    ([*M, "--out", "{d}/ .csv.gz"], ["file name before its suffix"]),
    (["explain", "forum_a100", "--out", "{d}/.parquet"], ["file name before its suffix"]),
    ([*M, "--out", "{d}/nope/r.csv"], ["does not exist"]),
    ([*M, "--out", "{d}/exists.csv"], ["exists", "--force"]),
    ([*M, "--out", "{d}/budget.xlsx"], ["exists", "--force"]),
    ([*M, "--out", "{d}/killed.csv"], ["unfinished run", "--resume", "--force"]),
    ([*M, "--out", "{d}/linked.csv"], ["symbolic link"]),
    ([*M, "--out", "{d}/linked.csv", "--force"], ["symbolic link"]),
    ([*M, "--out", "{d}/folder.csv", "--force"], ["folder"]),
    ([*M, "--out", "{d}/none.csv", "--resume"], ["nothing to resume"]),
    ([*M, "--out", "/proc/h2dlab-bad-input.csv"], ["not writable"]),
    # forum
    ([*F, "--order", "sideways"], ["--order"]),
    ([*F, "--seqs", "a,b"], ["--seqs"]),
    ([*F, "--seqs", "1,1"], ["twice"]),
    ([*F, "--seqs", "0"], ["seq"]),
    ([*F, "--seed", str(2**70)], ["64 bits"]),
    ([*F, "--out", "{d}/exists.csv"], ["exists", "--force"]),
    ([*F, "--out", "{d}/f.csv"], ["CUDA"]),
    # overlap
    ([*OV, "--size", "1KiB,2KiB"], ["one size"]),
    ([*OV, "--reps", "0"], ["--reps"]),
    ([*OV, "--reps", "99999999999"], ["reps must be at most"]),
    ([*OV, "--out", "{d}/o.parquet"], ["cannot write", ".csv.gz"]),
    ([*OV, "--out", "{d}/exists.csv"], ["exists", "--force"]),
    # explain
    (["explain", "no_such_dataset"], ["unknown dataset"]),
    (["explain", ""], ["empty dataset name"]),
    (["explain", "{d}/foreign.csv"], ["missing column"]),
    (["explain", "{d}/noerror.csv"], ["missing column", "error"]),
    (["explain", "{d}/inf.csv"], ["row 3", "wall_ms", "infinite"]),
    (["explain", "{d}/folder.csv"], ["folder.csv"]),
    (["explain", "{d}/good.csv", "--out", "{d}/good.csv"], ["explain reads"]),
    (["explain", "{d}/good.csv", "--out", "{d}/good.csv", "--force"], ["explain reads"]),
    (["explain", "forum_a100", "--out", "{d}/exists.csv"], ["exists", "--force"]),
    (["explain", "forum_a100", "--out", "{d}/a.json"], ["cannot write"]),
    # the rest
    (["report", "--only", "nope"], ["unknown notebook"]),
    (["report", "--mode", "sideways"], ["--mode"]),
    ([], ["required"]),
    (["teleport"], ["invalid choice"]),
]


def _ids(case):
    return " ".join(case[0][4:] if case[0][:1] == ["measure"] else case[0])[:60]


@pytest.mark.parametrize("argv,needles", CLI_CASES, ids=[_ids(c) for c in CLI_CASES])
def test_cli_refuses_in_one_line(place, capsys, argv, needles):
    argv = [a.replace("{d}", str(place)) for a in argv]
    if "--no-out" in argv:  # the case of a forgotten --out
        argv.remove("--no-out")
    elif argv[:1] in (["measure"], ["forum"], ["overlap"]) and "--out" not in argv:
        argv += ["--out", str(place / "new.csv")]
    refused_in_one_line(argv, needles, capsys, place)  # nothing written, nothing removed
    assert (place / "exists.csv").read_text() == "an earlier table\n"
    assert not (place / "victim.txt").exists()


def _err(fn, kind=ValueError):
    with pytest.raises(kind) as info:
        fn()
    msg = str(info.value)
    assert msg and "--" not in msg, msg  # library terms, no command-line flags
    return msg


LIBRARY_CASES = [
    (lambda: parse_size("12QB"), ValueError, "cannot read size"),
    (lambda: parse_size(""), ValueError, "cannot read size"),
    (lambda: parse_size("1.5"), ValueError, "whole number"),
    (lambda: parse_size("-1KiB"), ValueError, "positive"),
    (lambda: parse_size("9" * 50), ValueError, "too large"),
    (lambda: parse_sizes(" "), ValueError, "no sizes"),
    (lambda: parse_sizes("8KiB..4KiB"), ValueError, "backwards"),
    (lambda: parse_sizes("1KiB.."), ValueError, "lacks an end"),
    (lambda: parse_sizes("1KiB,"), ValueError, "empty entry"),
    (lambda: parse_int("٣"), ValueError, "not a whole number"),
    (lambda: parse_int("1_000", "seed"), ValueError, "seed '1_000' is not a whole number"),
    (lambda: parse_int("9" * 41), ValueError, "too large"),
    (lambda: parse_gpus("١", 2), ValueError, "cannot read the GPU list"),
    (lambda: parse_gpus("1_0", 2), ValueError, "cannot read the GPU list"),
    (lambda: parse_gpus("1..99999999999", 2), ValueError, "there is no device 2"),  # was a MemoryError
    (lambda: parse_gpus("99999999999", 2), ValueError, "there is no device 2"),
    (lambda: SweepSpec(strategies=("pageable", "pageable")), ValueError, "named twice"),
    (lambda: SweepSpec(sizes=(1024, 1024)), ValueError, "given twice"),
    (lambda: SweepSpec(seed=2**64), ValueError, "64 bits"),
    (lambda: SweepSpec(seed=1.5), ValueError, "whole number"),
    (lambda: SweepSpec(reps=10**12), ValueError, "at most 10,000,000"),
    (lambda: SweepSpec(dtype="bool"), ValueError, "bool"),
    (lambda: SweepSpec(dtype="int4"), ValueError, "no plain copy"),
    (lambda: SweepSpec(device=None), ValueError, "unknown device"),
    (lambda: ForumSpec(seqs=(6, 6)), ValueError, "twice"),
    (lambda: ForumSpec(seed=-(2**64)), ValueError, "64 bits"),
    (lambda: OverlapSpec(reps=10**9), ValueError, "at most"),
    (lambda: OverlapSpec(size_bytes=0), ValueError, "at least 1"),
    (lambda: datasets.load(""), ValueError, "empty dataset name"),
    (lambda: datasets.load(None), TypeError, "dataset name"),
    (lambda: datasets.load("no_such_dataset"), ValueError, "unknown dataset"),
    (lambda: datasets.read("/nonexistent/r.csv"), ValueError, "no such file"),
    (lambda: datasets.validate([1, 2]), ValueError, "DataFrame"),
    (lambda: datasets.validate(pd.DataFrame({"x": [1]})), ValueError, "missing column"),
    (lambda: datasets.save(datasets.load("forum_a100").head(3), "/tmp/x.json"), ValueError, "cannot write"),
    (lambda: advice.advice(datasets.load("h200_sweep"), -5), ValueError, "positive"),
    (lambda: advice.advice(datasets.load("h200_sweep"), math.nan), ValueError, "whole number of bytes"),
    (lambda: advice.advice(datasets.load("h200_sweep"), "1GiB"), ValueError, "number of bytes"),
    (lambda: advice.advice(datasets.empty_table(), 2**30), ValueError, "no timed rows"),
    (lambda: transfer.to_device(torch.zeros(4), "cuda", num_threads=0), ValueError, "num_threads"),
    (lambda: transfer.to_device(torch.zeros(4), "cuda", chunk_bytes=1), ValueError, "chunk_bytes"),
    (lambda: transfer.to_device([1, 2], "cuda"), TypeError, "torch.Tensor"),
    (lambda: Recording(None, {}, [], resume=True), ValueError, "output file"),
]


@pytest.mark.parametrize("fn,kind,needle", LIBRARY_CASES, ids=[f"lib{i}" for i in range(len(LIBRARY_CASES))])
def test_library_refuses_with_a_message(fn, kind, needle):
    assert needle.lower() in _err(fn, kind).lower()


def test_library_output_refusals(tmp_path):
    spec = SweepSpec(("pageable",), (1024,), device="cpu", reps=1, warmup=0)
    (tmp_path / "r.csv").write_text("kept")
    assert "exists and is kept" in _err(lambda: Recording(tmp_path / "r.csv", spec.to_dict(), []), UsageError)
    partial_path(tmp_path / "l.csv").symlink_to(tmp_path / "target")
    assert "symbolic link" in _err(lambda: Recording(tmp_path / "l.csv", spec.to_dict(), []), UsageError)
    assert not (tmp_path / "target").exists() and (tmp_path / "r.csv").read_text() == "kept"


def test_there_are_at_least_60_cases():
    assert len(CLI_CASES) + len(LIBRARY_CASES) + 2 >= 60
    assert len({tuple(c[0]) for c in CLI_CASES}) == len(CLI_CASES)  # distinct


@pytest.mark.parametrize("delay", [0.05, 0.3])
def test_ctrl_c_while_the_command_starts_is_exit_130_without_a_traceback(delay):
    """SIGINT while the command imports its libraries (pandas, torch): one line, exit 130.
    Before: a 50-70 line KeyboardInterrupt traceback."""
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT

    p = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "h2dlab.cli.main", "explain", "forum_a100"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in p.stderr:  # the command's own module is imported: main() runs next
        if line.rstrip().endswith("h2dlab.cli.checks"):  # the last of cli.py's own imports
            break
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    rest = [ln for ln in p.stderr.read().splitlines() if not ln.startswith("import time:")]
    assert p.wait(timeout=60) == 130, rest
    assert not any("Traceback" in ln for ln in rest) and rest == ["h2dlab: interrupted"], rest


def test_explain_out_writes_its_own_fingerprint(tmp_path, capsys):
    """Before: no env.json beside the annotated table."""
    out = tmp_path / "a.csv"
    (tmp_path / "a.csv").write_text("old")
    assert cli.main(["explain", "forum_a100", "--out", str(out), "--force"]) == 0
    env = datasets.read_env(out)
    assert env["annotated"]["source"] == "forum_a100" and "explain forum_a100" in env["annotated"]["command"]
    assert len(pd.read_csv(out)) == 630


def test_a_read_only_out_is_named_in_one_line(tmp_path, capsys):
    out = tmp_path / "r.csv"
    out.write_text("kept")
    out.chmod(0o444)
    import os

    if os.access(out, os.W_OK):
        pytest.skip("running as a user who may write anywhere (root)")
    assert cli.main([*M, "--out", str(out), "--force"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out) in err[0] and ".tmp-" not in err[0]


def test_a_gpu_index_this_machine_lacks_is_a_usage_error(monkeypatch, capsys):
    """cuda:N past the last GPU is a wrong input (exit 2, like --gpus), not a missing
    capability (exit 1 is for no CUDA at all); checked with a pretend 1-GPU machine."""
    from h2dlab.cli import main as cli
    from h2dlab.errors import Unavailable, UsageError
    from h2dlab.measure.device import resolve_device
    from tests.fake_cuda import install

    install(monkeypatch)
    with pytest.raises(
        UsageError, match=r"there is no cuda:1: this machine has 1 CUDA device\(s\), 0\.\.0"
    ) as e:
        resolve_device("cuda:1")
    assert not isinstance(e.value, Unavailable)
    assert resolve_device("cuda:0").index == 0
    assert cli.main(["measure", "--device", "cuda:3", "--sizes", "1KiB", "--out", "x.csv"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["h2dlab: error: there is no cuda:3: this machine has 1 CUDA device(s), 0..0"]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (
            [
                "measure",
                "--device",
                "cpu",
                "--sizes",
                "1KiB",
                "--strategies",
                "pageable,,staged",
                "--out",
                "x.csv",
            ],
            "--strategies",
        ),
        (
            ["measure", "--device", "cpu", "--sizes", "1KiB", "--strategies", "pageable,", "--out", "x.csv"],
            "--strategies",
        ),
        (["compare", "h200_sweep:pow2", "--strategies", "pageable,,staged"], "--strategies"),
        (["batch", "--device", "cpu", "--methods", "loop_to,,", "--out", "x.csv"], "--methods"),
        (["record", "--dry-run", "--only", "sweep,,forum"], "--only"),
        (["report", "--only", "03-spikes-explained,,"], "--only"),
    ],
)
def test_an_empty_entry_in_a_name_list_is_refused(args, option, tmp_path, monkeypatch, capsys):
    """A doubled or trailing comma was passed over in silence; now one line, exit 2, and
    nothing written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("H2DLAB_RUNS", str(tmp_path / "runs"))
    line = refused_in_one_line(args, [option, "has an empty entry"], capsys, tmp_path)
    assert line.startswith("h2dlab: error: ")


def test_an_interrupted_command_exits_130_without_winding_the_interpreter_down(monkeypatch):
    """cli._exit: 130 leaves through os._exit (a Ctrl-C that landed during start-up could end
    the wind-down by the signal: exit -2 in 3 of 24 runs before); other codes through
    sys.exit, as before."""
    from h2dlab.cli import main as cli

    seen = []

    class Exited(Exception):
        pass

    def fake_exit(code):
        seen.append(code)
        raise Exited

    monkeypatch.setattr(cli.os, "_exit", fake_exit)
    with pytest.raises(Exited):
        cli._exit(cli.EXIT_INTERRUPTED)
    assert seen == [130]
    with pytest.raises(SystemExit) as exc:
        cli._exit(2)
    assert exc.value.code == 2 and seen == [130]


@pytest.fixture
def hostile_place(tmp_path, monkeypatch):
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
def test_cli_refuses_more_hostile_command_lines_in_one_line(hostile_place, capsys, argv, needles):
    argv = [a.replace("{d}", str(hostile_place)).replace("{data}", str(datasets.DATA_DIR)) for a in argv]
    before = (hostile_place / "rec" / "sweep" / "synthetic.csv").read_bytes()
    refused_in_one_line(argv, needles, capsys, hostile_place)
    assert (hostile_place / "rec" / "sweep" / "synthetic.csv").read_bytes() == before
    assert [p.name for p in (hostile_place / "rec" / "sweep").iterdir()] == ["synthetic.csv"]


@pytest.mark.parametrize("cmd", ["explain", "compare"])
def test_a_timeline_given_as_a_table_is_named_a_timeline(tmp_path, capsys, cmd):
    """A recording's overlap/ folder (a timeline) was refused with a list of 13 missing
    columns, as if it were a broken table."""
    rows = "scenario,rep,op,start_ms,end_ms,host_return_ms\npinned_1stream,0,copy,0.0,1.0,0.1\n"
    (tmp_path / "overlap").mkdir()
    (tmp_path / "overlap" / "synthetic.csv").write_text(rows)
    line = refused_in_one_line([cmd, str(tmp_path / "overlap")], ["is an overlap timeline"], capsys, tmp_path)
    assert "missing column" not in line


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
