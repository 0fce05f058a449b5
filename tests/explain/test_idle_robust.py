"""A recording's idle runs read robustly: a pause no run could have taken is no pause (and
both readers agree), a damaged idle kind leaves the other kinds readable (one warning,
gpu_wake off), only CUDA idle runs of the table's own machine calibrate gpu_wake, and a
recording.json that is not a JSON object reads as none. Every table here is synthetic."""

import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from h2dlab.cli import main as cli
from h2dlab.explain import outliers
from h2dlab.explain.causes_wake import run_pauses
from h2dlab.explain.idle import pauses
from h2dlab.measure.spec import MAX_PAUSE_MS, SweepSpec
from h2dlab.recording import datasets, session
from h2dlab.recording.folder import read_manifest
from tests.explain.test_wake_calibration import load_calibrated, synthetic_recording

BAD_PAUSES = [
    [1],
    {"a": 1},
    "10",
    "abc",
    "nan",
    True,
    False,
    None,
    -5,
    -0.001,
    1000.5,
    1e309,
    -1e309,
    10**400,
]


def _table(envs):
    """One synthetic row per run, the runs' env.json in ``attrs``."""
    df = pd.DataFrame({"run_id": list(envs)})
    df.attrs["envs"] = envs
    return df


@pytest.mark.parametrize("bad", BAD_PAUSES, ids=lambda v: repr(v)[:12])
def test_a_pause_no_run_could_take_is_no_pause_for_both_readers(bad):
    df = _table({"good": {"spec": {"pause_ms": 3}}, "bad": {"spec": {"pause_ms": bad}}})
    assert list(pauses(df)[:1]) == [3.0] and math.isnan(pauses(df)[1])
    assert run_pauses(df) == {"good": 3.0}


@pytest.mark.parametrize("env", ["x", [], {"spec": "x"}, {"spec": [1]}, {"spec": None}, None])
def test_an_env_or_spec_that_is_not_an_object_is_no_pause(env):
    df = _table({"r": env})
    assert pauses(df).isna().all() and run_pauses(df) == {}


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3),
        max_leaves=6,
    )
)
def test_both_readers_agree_on_any_json_value(value):
    df = _table({"r": {"spec": {"pause_ms": value}}})
    p = float(pauses(df)[0])
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_PAUSE_MS
    assert (p == value and math.copysign(1, p) == 1) if ok else math.isnan(p)
    assert run_pauses(df) == ({"r": p} if ok else {})


def test_minus_zero_pause_is_recorded_as_zero():
    for given_ms in (-0.0, 0, 0.0):
        p = SweepSpec(sizes=(4096,), strategies=("pageable",), pause_ms=given_ms).pause_ms
        assert p == 0.0 and math.copysign(1.0, p) == 1.0
    assert "-0.0" not in json.dumps(
        SweepSpec(sizes=(4096,), strategies=("pageable",), pause_ms=-0.0).to_dict()
    )


# --- damaged idle kinds ------------------------------------------------------------------


def _truncate(p):
    p.write_bytes(p.read_bytes()[:300])


def _garbage(p):
    p.write_bytes(b"hello,world\n")


def _bad_env(p):
    datasets.env_path(p).write_text("{not json")


@pytest.mark.parametrize("damage", [_truncate, _garbage, _bad_env])
def test_a_damaged_idle_kind_leaves_the_other_kinds_readable(tmp_path, damage, capsys):
    folder = synthetic_recording(tmp_path / "rec")
    damage(sorted((folder / "idle").glob("pause-3ms*.csv.gz"))[0])
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        df = load_calibrated(folder / "sweep")
    assert len(df) == 60 and df.attrs["wake_calibration"] is None
    msgs = [str(w.message) for w in said]
    assert (
        len(msgs) == 1 and msgs[0].startswith(f"{folder / 'idle'}: ") and msgs[0].endswith("gpu_wake is off")
    )
    capsys.readouterr()
    assert cli.main(["explain", str(folder / "sweep" / "pow2.csv.gz")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and err[0].startswith(f"h2dlab: warning: {folder / 'idle'}: ")
        and "gpu_wake is off" in err[0]
    )


def _set_idle_env(folder, change):
    """Rewrite every idle run's env.json with ``change`` (``device`` goes in its spec)."""
    for p in (folder / "idle").glob("*.csv.gz"):
        env = datasets.read_env(p)
        for k, v in change.items():
            (env["spec"] if k == "device" else env)[k] = v
        datasets.env_path(p).write_text(json.dumps(env))


@pytest.mark.parametrize(
    "change",
    [{"device": "cpu"}, {"hostname": "other-host"}, {"gpu_name": "other GPU"}, {"platform": "other-os"}],
    ids=lambda c: next(iter(c)),
)
def test_only_cuda_idle_runs_of_the_tables_machine_calibrate(tmp_path, change):
    folder = synthetic_recording(tmp_path / "rec")
    assert load_calibrated(folder / "sweep").attrs["wake_calibration"].idle_ms == 10.0  # as recorded
    _set_idle_env(folder, change)
    for where in (folder / "sweep", folder / "sweep" / "pow2.csv.gz"):
        assert load_calibrated(where).attrs["wake_calibration"] is None, where
    # the idle kind itself: its own runs are one machine, but CPU runs never calibrate
    own = load_calibrated(folder / "idle").attrs["wake_calibration"]
    assert (own is None) == (change == {"device": "cpu"})


@pytest.mark.parametrize("key", ["gpu_name", "hostname", "platform"])
def test_a_table_whose_env_lacks_its_machine_gets_no_calibration(tmp_path, key):
    folder = synthetic_recording(tmp_path / "rec")
    p = folder / "sweep" / "pow2.csv.gz"
    env = datasets.read_env(p)
    del env[key]
    datasets.env_path(p).write_text(json.dumps(env))
    assert load_calibrated(folder / "sweep").attrs["wake_calibration"] is None


@pytest.mark.parametrize("how", ["deleted", "cpu"])
def test_a_strategy_lacking_a_pause_is_left_out_of_the_calibration(tmp_path, how):
    folder = synthetic_recording(tmp_path / "rec")
    p = next((folder / "idle").glob("pause-10ms-pageable*.csv.gz"))
    if how == "deleted":
        p.unlink()
        datasets.env_path(p).unlink()
    else:  # measured on the CPU: not a calibrating run, as if absent
        env = datasets.read_env(p)
        env["spec"]["device"] = "cpu"
        datasets.env_path(p).write_text(json.dumps(env))
    got = load_calibrated(folder / "sweep").attrs["wake_calibration"]
    # pageable lacks 10 ms: left out, pinned_reuse alone decides (no NaN share, the wake-up seen)
    assert got.pauses == (0.0, 3.0, 10.0) and not np.isnan(got.shares).any()
    assert got.shares == pytest.approx((0.0, 0.0, 0.5)) and got.idle_ms == 10.0


# --- recording.json that is not an object -----------------------------------------------


@pytest.mark.parametrize("text", ["[1, 2]", '"x"', "3", "null", "{not json"])
def test_a_recording_json_that_is_not_an_object_reads_as_none(tmp_path, text):
    folder = synthetic_recording(tmp_path / "rec")
    bare = synthetic_recording(tmp_path / "bare")
    (bare / "recording.json").unlink()
    (folder / "recording.json").write_text(text)
    assert read_manifest(folder) is None
    rec = session.recording(str(folder), environ={})
    assert rec.manifest is None
    want = session.recording(str(bare), environ={}).banner().replace(str(bare.resolve()), "X")
    assert rec.banner().replace(str(folder.resolve()), "X") == want
    assert rec.lacks("idle") == ""


def test_a_damaged_idle_kind_is_said_in_each_copys_evidence(tmp_path):
    """The copies' idle-gap check says the idle runs cannot be read (the warning alone is
    lost in --json and notebooks), where it said 'no idle runs recorded beside this table'."""
    folder = synthetic_recording(tmp_path / "rec")
    _garbage(sorted((folder / "idle").glob("pause-3ms*.csv.gz"))[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = load_calibrated(folder / "sweep")
    said = "the recording's idle runs (rec/idle) cannot be read, so they cannot tell what a pause costs here"
    assert df.attrs["wake_calibrations"] == {"synthetic-sweep": said} and df.attrs["wake_calibration"] is None
    e = outliers.explain(df)
    (slow,) = e.index[e["order"] == 30]
    assert e.at[slow, "cause"] == "unexplained" and e.at[slow, "evidence"].endswith(f"ms; {said}")
