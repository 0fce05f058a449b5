"""``gpu_wake``'s calibration run by run: each run of a table gets the calibration of the
idle runs measured on a CUDA GPU of its own machine (``wake_source.calibrations``); a run of
another machine or boot gets none, and its copies' idle-gap check says which key differs.
Every table and machine here is synthetic (made up): the builders of
``tests/explain/test_wake_calibration.py``."""

import dataclasses
import json
import re

import pandas as pd
import pytest

from h2dlab.cli import explain as cli_explain
from h2dlab.cli import main as cli
from h2dlab.explain import causes, outliers, wake_source
from h2dlab.recording import datasets, session
from h2dlab.recording.tableio import save
from tests.explain.test_outliers_wake import SYNTHETIC_WAKE
from tests.explain.test_wake_calibration import SYNTHETIC_MACHINE, load_calibrated, synthetic_recording

#: The second run's env.json: the synthetic machine after a reboot into another image.
OTHER_BOOT = {**SYNTHETIC_MACHINE, "platform": "synthetic-os-v2"}
OTHER_SAID = (
    "the recording's idle runs (rec/idle) were measured on another machine or boot (platform synthetic-os "
    "where this run's is synthetic-os-v2), so they cannot tell what a pause costs on this one"
)


def _add_sweep_run(folder, name, run_id, env):
    """A copy of the synthetic sweep run (its slow copy at order 30 after 15 ms without
    copies) as another run, ``run_id``, with ``env`` as its env.json's machine."""
    df = datasets.read(folder / "sweep" / "pow2.csv.gz").assign(run_id=run_id)
    save(df, folder / "sweep" / f"{name}.csv.gz", env={**env, "run_id": run_id, "spec": {"device": "cuda:0"}})


@pytest.fixture
def two_boots(tmp_path):
    folder = synthetic_recording(tmp_path / "rec")
    _add_sweep_run(folder, "pow2-other-boot", "synthetic-other", OTHER_BOOT)
    return folder


def _slow(e, run_id):
    """The index of a run's copy at order 30 (the one slowed after 15 ms without copies)."""
    (i,) = e.index[(e["run_id"] == run_id) & (e["order"] == 30)]
    return i


def test_each_run_gets_its_own_machines_calibration(two_boots):
    one = load_calibrated(two_boots / "idle").attrs["wake_calibration"]  # the idle runs' own machine
    assert one.idle_ms == 10.0
    df = load_calibrated(two_boots / "sweep")
    cals = df.attrs["wake_calibrations"]
    assert set(cals) == {"synthetic-sweep", "synthetic-other"}
    assert cals["synthetic-sweep"] == one and cals["synthetic-other"] == OTHER_SAID
    assert df.attrs["wake_calibration"] is None  # the runs share no one calibration
    e = outliers.explain(df)
    flagged = e[e["is_outlier"]]
    assert sorted(flagged["run_id"]) == ["synthetic-other", "synthetic-sweep"]
    mine, other = _slow(e, "synthetic-sweep"), _slow(e, "synthetic-other")
    assert (
        e.at[mine, "cause"] == "gpu_wake"
        and "(idle runs of rec/idle: pauses 0, 3, 10 ms)" in e.at[mine, "evidence"]
    )
    assert e.at[other, "cause"] == "unexplained"
    assert not (e.loc[e["run_id"] == "synthetic-other", "cause"] == "gpu_wake").any()
    gap = causes.neighbours(e).at[other, "idle_gap_ms"]
    want = f"host time since the previous copy ended {gap:.2f} ms; {OTHER_SAID}"
    assert gap == pytest.approx(15.0) and e.at[other, "evidence"].endswith(want)
    assert outliers.ruled_out(e).at[other, "idle gap"] == want
    # the output carries what it used, and ruled_out reads it back
    assert e.attrs["wake_calibrations"] == cals and e.attrs["wake_calibration"] is None


def test_the_cli_session_and_one_run_agree(two_boots, capsys):
    rec = session.recording(str(two_boots), environ={})
    assert (
        wake_source.attach(rec.table("sweep")).attrs["wake_calibrations"]
        == load_calibrated(two_boots / "sweep").attrs["wake_calibrations"]
    )
    alone = load_calibrated(two_boots / "sweep" / "pow2-other-boot.csv.gz")
    assert alone.attrs["wake_calibrations"] == {"synthetic-other": OTHER_SAID}
    assert alone.attrs["wake_calibration"] is None
    own = load_calibrated(two_boots / "sweep" / "pow2.csv.gz").attrs
    assert own["wake_calibration"].idle_ms == 10.0 and own["wake_calibrations"] == {
        "synthetic-sweep": own["wake_calibration"]
    }
    for source in (str(two_boots / "sweep"), f"{two_boots}:sweep"):
        r = cli_explain.report(source, n_boot=5)
        causes_by_run = dict(zip(r["_flagged"]["run_id"], r["_flagged"]["cause"], strict=True))
        assert causes_by_run == {"synthetic-sweep": "gpu_wake", "synthetic-other": "unexplained"}, source
        (said,) = r["_flagged"].loc[r["_flagged"]["run_id"] == "synthetic-other", "evidence"]
        assert said.endswith(OTHER_SAID)
    capsys.readouterr()
    assert cli.main(["explain", f"{two_boots}:sweep:pow2-other-boot"]) == 0
    out = capsys.readouterr().out
    assert "gpu_wake" not in out and "platform synthetic-os where this run's is synthetic-os-v2" in out


def test_a_table_of_one_machine_explains_as_with_one_calibration(tmp_path):
    folder = synthetic_recording(tmp_path / "rec")
    _add_sweep_run(folder, "pow2-again", "synthetic-again", SYNTHETIC_MACHINE)
    df = load_calibrated(folder / "sweep")
    cal = df.attrs["wake_calibration"]
    assert cal is not None and df.attrs["wake_calibrations"] == {
        "synthetic-sweep": cal,
        "synthetic-again": cal,
    }
    assert cal == wake_source.calibration(df, load_calibrated(folder / "idle"), "rec/idle")
    per_run = outliers.explain(df)
    bare = df.copy()
    bare.attrs = {"envs": df.attrs["envs"]}
    one = outliers.explain(bare, wake=cal)
    cols = ["episode", "cause", "evidence"]
    pd.testing.assert_frame_equal(per_run[cols], one[cols])
    assert (per_run["cause"] == "gpu_wake").sum() == 2
    pd.testing.assert_frame_equal(outliers.ruled_out(per_run), outliers.ruled_out(one))
    # explain's wake= as one calibration still wins over the per-run attrs (tests use it)
    e = outliers.explain(
        load_calibrated(folder / "sweep"), wake=dataclasses.replace(cal, idle_ms=None, extra_ms=None)
    )
    assert not (e["cause"] == "gpu_wake").any()


def test_wake_as_a_mapping_per_run(two_boots):
    df = load_calibrated(two_boots / "sweep")
    e = outliers.explain(df, wake={"synthetic-other": SYNTHETIC_WAKE})
    assert e.at[_slow(e, "synthetic-other"), "cause"] == "gpu_wake"
    i = _slow(e, "synthetic-sweep")  # a run the mapping lacks has none and says the old words
    assert e.at[i, "cause"] == "unexplained"
    assert e.at[i, "evidence"].endswith(
        "no idle runs recorded beside this table to tell what a pause costs on this machine"
    )
    assert e.attrs["wake_calibrations"] == {"synthetic-other": SYNTHETIC_WAKE}
    # one calibration for every run overrides the per-run attrs, and is what the output keeps
    e = outliers.explain(df, wake=SYNTHETIC_WAKE)
    assert set(e.loc[e["cause"] == "gpu_wake", "run_id"]) == {"synthetic-sweep", "synthetic-other"}
    assert e.attrs["wake_calibration"] == SYNTHETIC_WAKE
    assert e.attrs["wake_calibrations"] == dict.fromkeys(
        ["synthetic-sweep", "synthetic-other"], SYNTHETIC_WAKE
    )
    with pytest.raises(
        TypeError, match="^wake must be a WakeCalibration or a mapping run_id -> one, not list"
    ):
        outliers.explain(df, wake=[SYNTHETIC_WAKE])


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            {"hostname": "other-host", "platform": "other-os"},
            "(hostname synthetic-host where this run's is other-host, platform synthetic-os where this run's is "
            "other-os)",
        ),
        ({"gpu_name": "other GPU"}, "(gpu_name synthetic GPU where this run's is other GPU)"),
    ],
)
def test_the_sentence_names_each_key_that_differs(tmp_path, change, said):
    folder = synthetic_recording(tmp_path / "rec")
    _add_sweep_run(folder, "pow2-other", "synthetic-other", {**SYNTHETIC_MACHINE, **change})
    got = load_calibrated(folder / "sweep").attrs["wake_calibrations"]["synthetic-other"]
    assert (
        got
        == f"the recording's idle runs (rec/idle) were measured on another machine or boot {said}, so they cannot tell what a pause costs on this one"
    )


def test_idle_runs_of_two_other_machines_name_the_nearest(tmp_path):
    folder = synthetic_recording(tmp_path / "rec")
    for p in sorted((folder / "idle").glob("*-pageable.csv.gz")):  # half the idle runs: another host too
        env = datasets.read_env(p)
        datasets.env_path(p).write_text(json.dumps({**env, "hostname": "far-host", "platform": "far-os"}))
    _add_sweep_run(folder, "pow2-other", "synthetic-other", OTHER_BOOT)
    cals = load_calibrated(folder / "sweep").attrs["wake_calibrations"]
    assert cals["synthetic-other"] == (
        "the recording's idle runs (rec/idle) were measured on 2 other machines or boots (the nearest: platform "
        "synthetic-os where this run's is synthetic-os-v2), so they cannot tell what a pause costs on this one"
    )
    # the original run's machine keeps the pinned_reuse idle runs: a calibration of them alone
    assert cals["synthetic-sweep"].idle_ms == 10.0 and cals["synthetic-sweep"].shares == pytest.approx(
        (0.0, 0.0, 0.5)
    )


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({k: v for k, v in SYNTHETIC_MACHINE.items() if k != "platform"}, "names no platform"),
        ({**SYNTHETIC_MACHINE, "hostname": " ", "gpu_name": 3}, "names no gpu_name, hostname"),
    ],
)
def test_a_run_that_does_not_name_its_machine_says_so(tmp_path, env, said):
    folder = synthetic_recording(tmp_path / "rec")
    _add_sweep_run(folder, "pow2-unnamed", "synthetic-unnamed", env)
    df = load_calibrated(folder / "sweep")
    assert df.attrs["wake_calibrations"]["synthetic-unnamed"] == (
        f"this run's env.json {said}, so the recording's idle runs (rec/idle) cannot be matched to its machine"
    )
    assert df.attrs["wake_calibrations"]["synthetic-sweep"].idle_ms == 10.0
    e = outliers.explain(df)
    assert e.at[_slow(e, "synthetic-unnamed"), "cause"] == "unexplained"
    assert e.at[_slow(e, "synthetic-sweep"), "cause"] == "gpu_wake"


ONE_PAUSE_SAID = (
    "the idle runs of this run's machine (rec/idle) hold one pause (0 ms): at least two pauses with timed "
    "copies are needed to tell what a pause costs (the shortest is the baseline); record them with "
    "`h2dlab record --only idle` (it times each strategy after each pause)"
)
ON_CPU_SAID = (
    "the recording's idle runs (rec/idle) timed no CUDA GPU (their env.json's spec.device), so they cannot "
    "tell what a pause costs on one"
)
UNNAMED_SAID = (
    "the recording's idle runs (rec/idle) that timed a CUDA GPU do not name their machine (gpu_name, "
    "hostname, platform in their env.json), so they cannot be matched to this run's"
)


def _rewrite_idle_envs(folder, change):
    for p in (folder / "idle").glob("*.csv.gz"):
        env = datasets.read_env(p)
        change(env)
        datasets.env_path(p).write_text(json.dumps(env))


def test_unusable_idle_runs_say_why_not_that_none_were_recorded(tmp_path):
    """Idle runs with one pause, only on the CPU, or naming no machine: no calibration, and
    each run's idle-gap check says why (it said 'no idle runs recorded beside this table',
    false with idle runs beside it); the other boot's run keeps its own sentence."""
    folder = synthetic_recording(tmp_path / "rec")
    _add_sweep_run(folder, "pow2-other", "synthetic-other", OTHER_BOOT)
    for p in (folder / "idle").iterdir():
        if "pause-0ms" not in p.name:
            p.unlink()
    df = load_calibrated(folder / "sweep")
    assert df.attrs["wake_calibrations"] == {"synthetic-other": OTHER_SAID, "synthetic-sweep": ONE_PAUSE_SAID}
    assert df.attrs["wake_calibration"] is None
    e = outliers.explain(df)
    i = _slow(e, "synthetic-sweep")
    assert e.at[i, "cause"] == "unexplained" and e.at[i, "evidence"].endswith(f"ms; {ONE_PAUSE_SAID}")
    _rewrite_idle_envs(folder, lambda env: env["spec"].update(device="cpu"))
    df = load_calibrated(folder / "sweep")
    assert df.attrs["wake_calibrations"] == dict.fromkeys(["synthetic-sweep", "synthetic-other"], ON_CPU_SAID)
    assert df.attrs["wake_calibration"] is None
    e = outliers.explain(df)
    for run in ("synthetic-sweep", "synthetic-other"):
        assert e.at[_slow(e, run), "evidence"].endswith(f"ms; {ON_CPU_SAID}")
    _rewrite_idle_envs(folder, lambda env: env.update(hostname="", spec={**env["spec"], "device": "cuda:0"}))
    df = load_calibrated(folder / "sweep")
    assert df.attrs["wake_calibrations"] == dict.fromkeys(
        ["synthetic-sweep", "synthetic-other"], UNNAMED_SAID
    )
    # a table carrying no env.json at all gets nothing (nothing to match)
    bare = load_calibrated(folder / "idle")
    bare.attrs["envs"] = {}
    assert wake_source.calibrations(df, bare, "rec/idle") == {}


def test_a_mapping_without_the_run_says_the_old_words(two_boots):
    df = load_calibrated(two_boots / "sweep")
    e = outliers.explain(df, wake={})
    for run in ("synthetic-sweep", "synthetic-other"):
        assert e.at[_slow(e, run), "evidence"].endswith(
            "no idle runs recorded beside this table to tell what a pause costs on this machine"
        )


@pytest.mark.parametrize(
    ("value", "error", "said"),
    [
        (5, TypeError, "must be a WakeCalibration, a sentence why the run has none, or None; not int"),
        (float("nan"), TypeError, "not float"),
        ({"idle_ms": 10.0}, TypeError, "not dict"),
        (" ", ValueError, "is a blank sentence: say why the run has no calibration, or give None"),
    ],
)
def test_a_mapping_value_that_is_no_calibration_nor_sentence_is_refused(two_boots, value, error, said):
    """It read as 'no idle runs recorded beside this table' (a blank sentence: a dangling
    '; ' at the evidence's end)."""
    df = load_calibrated(two_boots / "sweep")
    with pytest.raises(error, match=r"^wake\['synthetic-other'\] .*" + re.escape(said)):
        outliers.explain(df, wake={"synthetic-sweep": SYNTHETIC_WAKE, "synthetic-other": value})
    e = outliers.explain(df, wake={"synthetic-sweep": None, "synthetic-other": "a reason"})
    assert e.at[_slow(e, "synthetic-other"), "evidence"].endswith("ms; a reason")


@pytest.mark.parametrize(
    ("pauses", "error", "said"),
    [
        (5, TypeError, "pauses must be a mapping run_id -> pause in ms, not int"),
        ({"synthetic-other": "x"}, TypeError, "pauses['synthetic-other'] must be a number of ms, not str"),
        ({"synthetic-other": True}, TypeError, "pauses['synthetic-other'] must be a number of ms, not bool"),
        (
            {"synthetic-other": -5},
            ValueError,
            "pauses['synthetic-other'] is -5: a run's --pause is 0 to 1000 ms",
        ),
        ({"synthetic-other": float("nan")}, ValueError, "pauses['synthetic-other'] is nan"),
    ],
)
def test_explain_refuses_pauses_no_run_could_take(two_boots, pauses, error, said):
    """It raised "'int' object is not callable" or pandas' "could not convert string to
    float", or said '(-5 ms of it the run's --pause)'."""
    df = load_calibrated(two_boots / "sweep")
    with pytest.raises(error, match="^" + re.escape(said)):
        outliers.explain(df, pauses=pauses)
    e = outliers.explain(df, pauses={"synthetic-other": 2})
    assert "(2 ms of it the run's --pause)" in e.at[_slow(e, "synthetic-other"), "evidence"]


def test_another_machines_sentence_speaks_of_the_idle_runs_that_name_one(tmp_path):
    """Half the idle runs name no hostname: the other boot's run is told of 'the recording's
    idle runs that name their machine', not of all of them (the others may be its own)."""
    folder = synthetic_recording(tmp_path / "rec")
    for p in sorted((folder / "idle").glob("*-pageable.csv.gz")):
        env = datasets.read_env(p)
        datasets.env_path(p).write_text(json.dumps({**env, "hostname": ""}))
    _add_sweep_run(folder, "pow2-other", "synthetic-other", OTHER_BOOT)
    cals = load_calibrated(folder / "sweep").attrs["wake_calibrations"]
    assert cals["synthetic-other"] == OTHER_SAID.replace(
        "the recording's idle runs (rec/idle)", "the recording's idle runs that name their machine (rec/idle)"
    )


def test_a_run_timed_on_the_cpu_gets_no_gpu_wake(tmp_path):
    """A run of the idle runs' own machine timed with --device cpu (host-memory copies): no
    calibration and no gpu_wake, its check says why; it was named gpu_wake ('the GPU's copy
    engine, its PCIe link ...') after the same 15 ms gap."""
    folder = synthetic_recording(tmp_path / "rec")
    df = datasets.read(folder / "sweep" / "pow2.csv.gz").assign(run_id="synthetic-cpu")
    save(
        df,
        folder / "sweep" / "pow2-cpu.csv.gz",
        env={**SYNTHETIC_MACHINE, "run_id": "synthetic-cpu", "spec": {"device": "cpu"}},
    )
    df = load_calibrated(folder / "sweep")
    said = (
        "this run timed no CUDA GPU (its env.json's spec.device is cpu), so the recording's idle runs (rec/idle) "
        "do not speak for its copies"
    )
    assert df.attrs["wake_calibrations"]["synthetic-cpu"] == said
    e = outliers.explain(df)
    assert e.at[_slow(e, "synthetic-sweep"), "cause"] == "gpu_wake"
    i = _slow(e, "synthetic-cpu")
    assert e.at[i, "cause"] == "unexplained" and e.at[i, "evidence"].endswith(f"ms; {said}")


def test_calibrations_and_shared_refuse_what_is_no_table_or_mapping(two_boots):
    """They raised AttributeError ('list' object has no attribute 'attrs'), or turned an
    idle table lacking a column into a run's 'sentence' ('not a measurement table: ...')."""
    sweep, idle = load_calibrated(two_boots / "sweep"), load_calibrated(two_boots / "idle")
    with pytest.raises(
        TypeError, match=r"^table must be a measurement table \(a pandas DataFrame\), not list$"
    ):
        wake_source.calibrations([1], idle, "rec/idle")
    with pytest.raises(TypeError, match=r"^idle_runs must be a measurement table .*, not NoneType$"):
        wake_source.calibrations(sweep, None, "rec/idle")
    with pytest.raises(TypeError, match="^label must be a str naming the idle runs, not int$"):
        wake_source.calibrations(sweep, idle, 5)
    with pytest.raises(ValueError, match=r"^not a measurement table: missing column\(s\) strategy$"):
        wake_source.calibrations(sweep, idle.drop(columns="strategy"), "rec/idle")
    with pytest.raises(
        TypeError, match="^wake must be a mapping run_id -> calibration or sentence, not int$"
    ):
        wake_source.shared(5, ["synthetic-sweep"])


def test_neighbours_refuses_what_is_no_table(two_boots):
    """It raised pandas' 'Index(...) must be called with a collection of some kind'."""
    with pytest.raises(TypeError, match=r"^expected a pandas DataFrame \(a measurement table\), got list$"):
        causes.neighbours([1])
    df = load_calibrated(two_boots / "sweep").drop(columns="rep")
    with pytest.raises(ValueError, match=r"^not a measurement table: missing column\(s\) rep$"):
        causes.neighbours(df)
