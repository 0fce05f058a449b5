"""``gpu_wake`` only with a calibration from idle runs recorded on the same machine: no
calibration, or one showing no wake-up cost, names no copy ``gpu_wake``; a gap under the
calibrated threshold is not one; ``wake_source.attach`` (which explaining a table calls)
attaches the calibration of a recording's ``idle`` kind, which ``datasets.load`` names. Every table and calibration here is synthetic (made up)."""

import dataclasses
import shutil

import numpy as np
import pandas as pd
import pytest

from h2dlab.cli import main as cli
from h2dlab.explain import causes, outliers, wake_source
from h2dlab.explain.idle import wake_calibration
from h2dlab.recording import datasets, session
from h2dlab.recording.folder import new_manifest, write_manifest
from h2dlab.recording.tableio import save
from tests.explain.test_outliers_wake import SYNTHETIC_WAKE, synthetic_wake_run


def load_calibrated(where):
    """``datasets.load`` and then what explaining a table does first: attach the calibration
    of the recording's idle runs (``wake_source.attach``; reading a table runs no analysis)."""
    return wake_source.attach(datasets.load(where))


@pytest.fixture(scope="module")
def runs():
    return [synthetic_wake_run(s) for s in range(3)]


def test_no_calibration_no_gpu_wake_and_ruled_out_says_so(runs):
    for df, _kind in runs:
        with_cal = outliers.explain(df, wake=SYNTHETIC_WAKE)
        assert (with_cal["cause"] == "gpu_wake").sum() >= 5
        assert "wake_calibration" not in df.attrs
        e = outliers.explain(df)
        assert not (e["cause"] == "gpu_wake").any()
        # nothing else moves: the copies gpu_wake named are unexplained
        pd.testing.assert_series_equal(e["cause"], with_cal["cause"].replace("gpu_wake", "unexplained"))
        table = outliers.ruled_out(e)
        gap = causes.neighbours(e)["idle_gap_ms"]
        for i in e.index[(with_cal["cause"] == "gpu_wake").to_numpy()]:
            want = (
                f"host time since the previous copy ended {gap[i]:.2f} ms; no idle runs recorded beside this table to tell what a "
                "pause costs on this machine"
            )
            assert table.at[i, "idle gap"] == want
            assert e.at[i, "evidence"].endswith(want)


def test_a_calibration_without_a_wake_up_names_no_gpu_wake(runs):
    none = dataclasses.replace(SYNTHETIC_WAKE, idle_ms=None, extra_ms=None, shares=(0.0, 0.0, 0.05, 0.1))
    df, _ = runs[0]
    plain = outliers.explain(df)
    e = outliers.explain(df, wake=none)
    pd.testing.assert_series_equal(e["cause"], plain["cause"])
    i = e.index[e["is_outlier"] & (e["cause"] == "unexplained")][0]
    gap = causes.neighbours(e).at[i, "idle_gap_ms"]
    assert outliers.ruled_out(e).at[i, "idle gap"] == (
        f"host time since the previous copy ended {gap:.2f} ms; this machine's idle runs show no wake-up cost after pauses up "
        "to 10 ms (synthetic idle runs: pauses 0, 1, 2, 10 ms)"
    )


def test_a_gap_under_the_calibrated_threshold_is_not_gpu_wake(runs):
    """The synthetic wake-ups follow gaps of 2.5-30 ms: with a threshold of 10 ms, those
    after shorter gaps are unexplained and say so, the others stay gpu_wake."""
    late = dataclasses.replace(SYNTHETIC_WAKE, idle_ms=10.0)
    moved = kept = 0
    for df, _kind in runs:
        early = outliers.explain(df, wake=SYNTHETIC_WAKE)
        e = outliers.explain(df, wake=late)
        gap = causes.neighbours(e)["idle_gap_ms"]
        woke = early["cause"] == "gpu_wake"
        assert (e.loc[woke & (gap >= 10), "cause"] == "gpu_wake").all()
        under = woke & (gap < 10)
        assert (e.loc[under, "cause"] == "unexplained").all()
        for i in e.index[under]:
            assert e.at[i, "evidence"].endswith(
                f"host time since the previous copy ended {gap[i]:.2f} ms, under the 10.00 ms between copies after which this machine's idle runs "
                "show a wake-up (at least 20% of each strategy's smallest copies 1.5x slow)"
            )
        moved += int(under.sum())
        kept += int((woke & (gap >= 10)).sum())
        assert not ((e["cause"] == "gpu_wake") & (gap < 10)).any()
    assert moved >= 3 and kept >= 3, (moved, kept)


# --- a synthetic recording folder ------------------------------------------------------


def _row_table(run_id, ms, t_s, size=4096, strategy="pinned_reuse"):
    n = len(ms)
    return datasets.validate(
        pd.DataFrame(
            {
                "run_id": run_id,
                "order": np.arange(n),
                "strategy": strategy,
                "size_bytes": size,
                "shape": "",
                "dtype": "uint8",
                "rep": np.arange(n),
                "warmup": False,
                "t_s": t_s,
                "wall_ms": np.asarray(ms) * 1.01,
                "event_ms": ms,
                "host_allocs": 0.0,
                "device_allocs": 0.0,
                "empty_cache": False,
                "error": "",
            }
        )
    )


#: The made-up machine every run of :func:`synthetic_recording` names in its env.json.
SYNTHETIC_MACHINE = {"gpu_name": "synthetic GPU", "hostname": "synthetic-host", "platform": "synthetic-os"}


def synthetic_recording(folder, idle_env=None):
    """recording.json, an ``idle`` kind (pauses 0, 3 and 10 ms, each on top of 3 ms of the
    loop's own work between copies; after 10 ms half the 4 KiB copies are 0.05 ms slower)
    and a ``sweep`` kind of 4 KiB copies 1 ms apart, one of them 0.04 ms slower after 15 ms
    without copies, written with the kit's own writers. Every run names
    :data:`SYNTHETIC_MACHINE` and device ``cuda:0``; ``idle_env`` (a dict) is merged into
    each idle run's env.json."""
    folder.mkdir()
    write_manifest(
        folder,
        new_manifest([], quick=False, device="cuda", gpus=1, gpu_name="synthetic GPU", command="synthetic"),
    )
    (folder / "idle").mkdir()
    k = np.arange(20)
    for pause in (0, 3, 10):
        for strategy, base in (("pinned_reuse", 0.010), ("pageable", 0.020)):
            ms = base + 0.0001 * k + (0.05 * (k % 2 == 0) if pause == 10 else 0.0)
            t = _row_table(f"synthetic-{pause}-{strategy}", ms, k * (3 + pause) / 1000, strategy=strategy)
            env = {
                **SYNTHETIC_MACHINE,
                "run_id": f"synthetic-{pause}-{strategy}",
                "spec": {"pause_ms": float(pause), "device": "cuda:0"},
                **(idle_env or {}),
            }
            save(t, folder / "idle" / f"pause-{pause}ms-{strategy}.csv.gz", env=env)
    (folder / "sweep").mkdir()
    n = 60
    ms = np.full(n, 0.05) * np.exp(np.random.default_rng(3).normal(0, 0.02, n))
    ms[30] += 0.04
    gaps = np.full(n, 1.0)
    gaps[30] = 15.0
    wall = ms * 1.01
    t_s = np.concatenate([[0.0], np.cumsum(wall[:-1] + gaps[1:])]) / 1000
    save(
        _row_table("synthetic-sweep", ms, t_s),
        folder / "sweep" / "pow2.csv.gz",
        env={**SYNTHETIC_MACHINE, "run_id": "synthetic-sweep", "spec": {"device": "cuda:0"}},
    )
    return folder


def test_reading_a_table_calibrates_nothing_and_explain_calibrates_it_the_same(tmp_path):
    """``datasets.load`` only names the idle kind beside a table; explaining the plain
    loaded table finds the same calibration and the same causes as one attached first."""
    folder = synthetic_recording(tmp_path / "rec")
    plain = datasets.load(folder / "sweep")
    assert plain.attrs["idle_runs"] == {"folder": str(folder / "idle")}
    assert "wake_calibrations" not in plain.attrs and "wake_calibration" not in plain.attrs
    e = outliers.explain(plain)
    assert e.at[30, "cause"] == "gpu_wake"
    pd.testing.assert_frame_equal(e, outliers.explain(load_calibrated(folder / "sweep")))
    assert e.attrs["wake_calibration"] == load_calibrated(folder / "sweep").attrs["wake_calibration"]


def test_load_attaches_the_recordings_idle_calibration(tmp_path, capsys):
    folder = synthetic_recording(tmp_path / "rec")
    want = wake_calibration(load_calibrated(folder / "idle"), source="x")
    assert want.idle_ms == 10.0 and want.shares == pytest.approx((0.0, 0.0, 0.5))
    assert want.extra_ms == pytest.approx(0.05 + 0.00142 - 0.00095)
    # the threshold is the gap the cost came at: 10 ms of pause + 3 ms of loop - a copy's wall
    assert want.gap_ms == pytest.approx(13.0 - 0.0485, abs=0.03) and want.threshold_ms == want.gap_ms
    for where in (folder / "sweep", folder / "sweep" / "pow2.csv.gz", folder / "idle"):
        cal = load_calibrated(where).attrs["wake_calibration"]
        assert dataclasses.replace(cal, source="x") == want, where
        assert cal.source == "idle runs of rec/idle: pauses 0, 3, 10 ms"
    rec = session.recording(str(folder), environ={})
    assert (
        wake_source.attach(rec.table("sweep")).attrs["wake_calibration"]
        == load_calibrated(folder / "sweep").attrs["wake_calibration"]
    )
    e = outliers.explain(load_calibrated(folder / "sweep"))
    assert list(e.index[e["is_outlier"]]) == [30]
    assert e.at[30, "cause"] == "gpu_wake"
    assert (
        "(idle runs of rec/idle: pauses 0, 3, 10 ms); the first copy after a spell without copies can pay a "
        "wake-up" in e.at[30, "evidence"]
    )
    assert "likely, not certain" in e.at[30, "evidence"]
    for source in (str(folder / "sweep"), f"{folder}:sweep"):  # a kind's folder, RECORDING:KIND
        capsys.readouterr()
        assert cli.main(["explain", source]) == 0
        said = capsys.readouterr().out
        assert (
            "pinned_reuse 4 KiB: gpu_wake" in said and "idle runs of rec/idle: pauses 0, 3, 10 ms" in said
        ), said
    # without the idle kind, or outside a recording, nothing is attached and nothing is gpu_wake
    shutil.rmtree(folder / "idle")
    alone = load_calibrated(folder / "sweep")
    assert "wake_calibration" not in alone.attrs
    e = outliers.explain(alone)
    assert e.at[30, "cause"] == "unexplained"
    assert e.at[30, "evidence"].endswith(
        "no idle runs recorded beside this table to tell what a pause costs on this machine"
    )
    # kind folders without recording.json are a recording too (record_folder.is_recording, as
    # session reads them): its idle kind calibrates its sweep as it did with the manifest.
    # A table outside any recording's kind folder gets nothing.
    synthetic_recording(tmp_path / "bare")
    (tmp_path / "bare" / "recording.json").unlink()
    cal = load_calibrated(tmp_path / "bare" / "sweep").attrs["wake_calibration"]
    assert (
        dataclasses.replace(cal, source="x") == want
        and cal.source == "idle runs of bare/idle: pauses 0, 3, 10 ms"
    )
    (tmp_path / "bare" / "loose").mkdir()
    for name in ("pow2.csv.gz", "pow2.csv.gz.env.json"):  # the same run, env.json and all
        shutil.copy(tmp_path / "bare" / "sweep" / name, tmp_path / "bare" / "loose" / name)
    assert "wake_calibration" not in load_calibrated(tmp_path / "bare" / "loose").attrs


def test_idle_runs_with_one_pause_attach_no_calibration(tmp_path):
    folder = synthetic_recording(tmp_path / "rec")
    for p in (folder / "idle").iterdir():
        if "pause-0ms" not in p.name:
            p.unlink()
    assert load_calibrated(folder / "sweep").attrs["wake_calibration"] is None
    assert outliers.explain(load_calibrated(folder / "sweep")).at[30, "cause"] == "unexplained"
