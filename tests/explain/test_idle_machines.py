"""factors.idle_wake (notebook 03 §7) and factors_idle.wake_calibration compare pauses
within one machine on a CUDA GPU: idle runs of two machines or boots are not compared (the
verdict said 'the longest pause added ...' across machines), runs timed on the CPU are left
out (the verdict called their copies 'the CPU spinning with the GPU idle'). Every table
here is synthetic (the builder of tests/explain/test_wake_calibration.py)."""

import json

import pytest

from h2dlab.cli import main as cli
from h2dlab.explain import outliers
from h2dlab.explain.idle import wake_calibration
from h2dlab.findings import factors
from h2dlab.recording import datasets
from h2dlab.recording.machines import MACHINE_KEYS, describe_runs, machine_of, missing_keys, off_gpu, on_cuda
from h2dlab.recording.tableio import save
from tests.explain.test_idle_wake_gaps import synthetic_idle
from tests.explain.test_wake_calibration import load_calibrated, synthetic_recording


def _set_env(folder, pattern, change):
    """Rewrite the env.json of the idle runs matching ``pattern`` (``device`` goes in spec)."""
    for p in sorted((folder / "idle").glob(pattern)):
        env = datasets.read_env(p)
        for k, v in change.items():
            (env["spec"] if k == "device" else env)[k] = v
        datasets.env_path(p).write_text(json.dumps(env))


@pytest.fixture
def folder(tmp_path):
    return synthetic_recording(tmp_path / "rec")


def test_one_machines_idle_runs_are_compared(folder):
    f = factors.idle_wake(load_calibrated(folder / "idle"))
    assert f.verdict.startswith("Before each timed copy came a pause") and len(f.values["cells"]) == 6
    assert "Left out" not in f.verdict


@pytest.mark.parametrize(
    ("change", "differ"),
    [({"hostname": "other-host"}, "hostname"), ({"platform": "x", "gpu_name": "y"}, "gpu_name, platform")],
)
def test_idle_runs_of_two_machines_are_not_compared(folder, change, differ):
    _set_env(folder, "pause-10ms-*.csv.gz", change)
    idle = load_calibrated(folder / "idle")
    f = factors.idle_wake(idle)
    want = (
        f"The idle runs were measured on 2 machines or boots (their env.json differs in {differ}): what a "
        "pause costs is compared within one machine, so give the idle runs of one; record them with "
        "`h2dlab record --only idle` (it times each strategy after each pause)."
    )
    assert f.verdict == want and not f.holds and f.values["cells"].empty
    with pytest.raises(ValueError, match="^wake_calibration: The idle runs were measured on 2 machines"):
        wake_calibration(idle)
    # the recording's own per-run calibration still matches each run to its machine's runs
    cals = idle.attrs["wake_calibrations"]
    assert (
        isinstance(cals["synthetic-10-pageable"], str)
        and "hold one pause (10 ms)" in cals["synthetic-10-pageable"]
    )
    assert cals["synthetic-0-pageable"].pauses == (0.0, 3.0) and cals["synthetic-0-pageable"].idle_ms is None


def test_idle_runs_on_the_cpu_are_left_out(folder):
    _set_env(folder, "pause-10ms-*.csv.gz", {"device": "cpu"})
    f = factors.idle_wake(load_calibrated(folder / "idle"))
    assert f.values["pauses"] == [0.0, 3.0]
    assert f.verdict.endswith(
        " Left out, as timed on no CUDA GPU (copies within host memory): run(s) synthetic-10-pageable, "
        "synthetic-10-pinned_reuse."
    )
    _set_env(folder, "*.csv.gz", {"device": "cpu"})
    f = factors.idle_wake(load_calibrated(folder / "idle"))
    assert f.verdict.startswith(
        "The idle runs hold no run on a CUDA GPU (their env.json's spec.device: copies within host memory, "
        "no GPU idle): at least two pauses"
    )
    assert "GPU idle):" in f.verdict and "spinning with the GPU idle" not in f.verdict


def test_runs_that_name_no_machine_or_device_are_still_compared(folder):
    """Tables whose env.json holds only the pause (older tests, hand-made tables): compared."""
    _set_env(folder, "*.csv.gz", {"hostname": None})
    f = factors.idle_wake(load_calibrated(folder / "idle"))
    assert f.verdict.startswith("Before each timed copy came a pause")


def test_machine_helpers():
    env = {"gpu_name": "g", "hostname": "h", "platform": "p", "spec": {"device": "cuda:1"}}
    assert MACHINE_KEYS == ("gpu_name", "hostname", "platform")
    assert machine_of(env) == ("g", "h", "p") and missing_keys(env) == []
    assert machine_of({**env, "hostname": " "}) is None and missing_keys({**env, "platform": 3}) == [
        "platform"
    ]
    assert missing_keys(None) == list(MACHINE_KEYS) and machine_of([1]) is None
    assert on_cuda(env) and not off_gpu(env)
    cpu = {"spec": {"device": "cpu"}}
    assert off_gpu(cpu) and not on_cuda(cpu)
    for unknown in (None, {}, {"spec": {}}, {"spec": {"device": 3}}, {"spec": "cpu"}):
        assert not off_gpu(unknown) and not on_cuda(unknown)


def test_start_times_that_contradict_the_pause_give_no_gap(folder):
    """Idle runs whose copies start 1 µs apart (each takes longer: the median gap after
    the 10 ms pause is negative) tell nothing about the gap: the calibration falls back to
    the pause (it took the negative median as its threshold, named gpu_wake copies after
    any gap and said 'after pauses of 10 ms (a median -0.01 ms from the end of one copy to
    the start of the next ...)'), and idle_wake leaves that pause out of its gaps."""
    good = wake_calibration(load_calibrated(folder / "idle"))
    assert good.gap_ms == pytest.approx(13.0, abs=0.1) and good.threshold_ms == good.gap_ms
    for p in sorted((folder / "idle").glob("pause-10ms-*.csv.gz")):
        df, env = datasets.read(p), datasets.read_env(p)
        save(df.assign(t_s=df["order"] * 1e-6), p, env=env)
    idle = load_calibrated(folder / "idle")
    cal = wake_calibration(idle)
    assert cal.idle_ms == 10.0 and cal.gap_ms is None and cal.threshold_ms == 10.0
    f = factors.idle_wake(idle)
    assert set(f.values["gaps_ms"]) == {0.0, 3.0} and "for pauses of 0 and 3 ms." in f.verdict
    e = outliers.explain(load_calibrated(folder / "sweep"))
    (slow,) = e.index[e["order"] == 30]  # 15 ms after the previous copy: above the 10 ms pause
    assert e.at[slow, "cause"] == "gpu_wake" and "-0." not in e.at[slow, "evidence"]
    assert "after pauses of 10 ms, 50% of the smallest copies" in e.at[slow, "evidence"]


def test_a_strategy_timed_after_a_pause_at_some_sizes_only_says_so():
    """The 10 ms runs timed pageable at 1 MiB only (synthetic): pageable is left out, its
    words say it lacks 10 ms at some of its sizes; a strategy lacking a pause at every size
    still says plainly that it lacks it. It said '`pageable` lacks 0, 3, 10 ms' of a
    strategy timed after each of them (at one size or the other)."""
    df = synthetic_idle(lambda strategy, size, pause, k: 0.01 + 0.0001 * k)
    keep = ~((df["run_id"] == "synthetic-10") & (df["strategy"] == "pageable") & (df["size_bytes"] == 4096))
    f = factors.idle_wake(df[keep])
    assert f.verdict.endswith(
        " Left out, as not timed after every pause: `pageable` lacks 10 ms at some of its sizes."
    )
    keep &= ~((df["run_id"] == "synthetic-0") & (df["strategy"] == "pageable") & (df["size_bytes"] == 2**20))
    keep &= ~((df["run_id"] == "synthetic-3") & (df["strategy"] == "pinned_reuse"))
    f = factors.idle_wake(df[keep].copy())
    assert f.verdict == (
        "No strategy of the idle runs was timed after every pause (0, 3, 10 ms: `pageable` lacks 0, 10 ms at "
        "some of its sizes; `pinned_reuse` lacks 3 ms), so no copy can be compared across them; record them with "
        "`h2dlab record --only idle` (it times each strategy after each pause)."
    )


@pytest.mark.parametrize(
    ("table", "error", "said"),
    [
        ([1, 2], TypeError, r"^expected a pandas DataFrame \(a measurement table\), got list$"),
        ("no strategy", ValueError, r"^not a measurement table: missing column\(s\) strategy$"),
        ("no run_id", ValueError, r"^not a measurement table: missing column\(s\) run_id$"),
    ],
)
def test_idle_wake_and_the_calibration_refuse_what_is_no_table(folder, table, error, said):
    """It raised AttributeError ('list' object has no attribute 'assign') or KeyError."""
    if isinstance(table, str):
        table = load_calibrated(folder / "idle").drop(columns=table.removeprefix("no "))
    for f in (factors.idle_wake, wake_calibration):
        with pytest.raises(error, match=said):
            f(table)


def test_explain_header_names_every_setup_of_the_runs(folder, capsys):
    """A table whose runs come from two GPUs: explain's first line names both (it named the
    first run's, 'synthetic GPU', for all of them); one setup is one line as before. The JSON
    "machine" stays the first run's (documented so)."""
    df = datasets.read(folder / "sweep" / "pow2.csv.gz").assign(run_id="synthetic-a100")
    env = {
        "gpu_name": "NVIDIA A100",
        "hostname": "h",
        "platform": "p",
        "torch": "2.4.0",
        "date": "2025-01-01T00",
    }
    save(
        df,
        folder / "sweep" / "pow2-a100.csv.gz",
        env={**env, "run_id": "synthetic-a100", "spec": {"device": "cuda:0"}},
    )
    assert describe_runs(load_calibrated(folder / "sweep" / "pow2.csv.gz")) == "synthetic GPU"
    assert describe_runs(load_calibrated(folder / "sweep")) == (
        "2 setups: NVIDIA A100, torch 2.4.0, 2025-01-01; synthetic GPU"
    )
    assert cli.main(["explain", str(folder / "sweep")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("; 2 setups: NVIDIA A100, torch 2.4.0, 2025-01-01; synthetic GPU")
    assert cli.main(["explain", "--json", str(folder / "sweep")]) == 0
    assert json.loads(capsys.readouterr().out)["machine"] in (
        "synthetic GPU",
        "NVIDIA A100, torch 2.4.0, 2025-01-01",
    )
    bare = load_calibrated(folder / "sweep")
    bare.attrs = {}
    assert describe_runs(bare) is None
