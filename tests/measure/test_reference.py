"""The built-in reference check (issue #30) on the CPU: the kit's medians per cell, the
comparison rows, ``measure --reference`` writing them to env.json, and the plan's row.
Tables here are synthetic or measured on this CPU (host copies), never GPU figures."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from h2dlab.cli import main as cli
from h2dlab.cli.main import build_parser, spec_from_args
from h2dlab.measure import reference
from h2dlab.recording.plan import PLAN


def _table(event_ms, wall_ms, *, warmup=False, error=""):  # synthetic rows of one cell
    n = len(wall_ms)
    return pd.DataFrame(
        {
            "strategy": ["pinned_reuse"] * n,
            "size_bytes": [1024] * n,
            "warmup": [warmup] * n,
            "error": [error] * n,
            "event_ms": event_ms,
            "wall_ms": wall_ms,
        }
    )


def test_the_kit_median_is_the_event_time_of_timed_rows_without_error():
    df = pd.concat(
        [
            _table([0.010, 0.012, 0.030], [0.02, 0.02, 0.02]),
            _table([5.0], [5.0], warmup=True),  # a warm-up is not counted
            _table([9.0], [9.0], error="OOM: x"),  # nor a failed copy
        ]
    )
    assert reference.kit_medians_us(df) == {("pinned_reuse", 1024): (pytest.approx(12.0), "event")}


def test_without_events_the_kit_median_is_the_host_clock():
    got = reference.kit_medians_us(_table([np.nan] * 3, [0.001, 0.004, 0.002]))
    assert got == {("pinned_reuse", 1024): (pytest.approx(2.0), "wall")}


def test_compare_pairs_cells_both_timed_with_their_ratio():
    kit = {("pageable", 1024): (24.0, "event"), ("pageable", 2048): (30.0, "event")}
    ref = {("pageable", 1024): {"reference_median_us": 16.0, "reference_iqr_us": 1.0}}
    (row,) = reference.compare(kit, ref)
    assert row["strategy"] == "pageable" and row["size_bytes"] == 1024
    assert row["kit_median_us"] == 24.0 and row["reference_median_us"] == 16.0 and row["ratio"] == 1.5


def test_the_reference_times_the_strategys_own_copy(monkeypatch):
    calls = []
    from h2dlab.measure import strategies

    real = strategies.Pageable.copy
    monkeypatch.setattr(strategies.Pageable, "copy", lambda self, x: calls.append(x.numel()) or real(self, x))
    got = reference.reference_medians_us(["pageable"], [4096, 1024], "cpu", min_run_time_s=0.01)
    assert set(got) == {("pageable", 1024), ("pageable", 4096)}
    assert {1024, 4096} <= set(calls) and len(calls) > 10  # blocks of many calls, each of its size
    for r in got.values():
        assert r["reference_median_us"] > 0 and r["reference_blocks"] >= 1


def test_measure_reference_stores_the_comparison_in_env_json(tmp_path, monkeypatch):
    monkeypatch.setattr(reference, "MIN_RUN_TIME_S", 0.01)
    monkeypatch.setattr(
        reference,
        "reference_medians_us",
        lambda names, sizes, device, seed=0: {
            (n, s): {"reference_median_us": 1.0, "reference_iqr_us": 0.0} for n in names for s in sizes
        },
    )
    out = tmp_path / "t.csv"
    argv = ["measure", "--device", "cpu", "--strategies", "pageable", "--sizes", "1KiB,4KiB"]
    assert cli.main([*argv, "--reps", "3", "--reference", "--out", str(out), "--no-progress"]) == 0
    env = json.loads((tmp_path / "t.csv.env.json").read_text())
    rows = env["reference"]
    assert [(r["strategy"], r["size_bytes"]) for r in rows] == [("pageable", 1024), ("pageable", 4096)]
    table = pd.read_csv(out)
    for r in rows:  # the kit's figure is the table's own median (host clock on the CPU)
        t = table[(table.size_bytes == r["size_bytes"]) & ~table.warmup]
        assert r["kit_clock"] == "wall" and r["kit_median_us"] == pytest.approx(t.wall_ms.median() * 1e3)
        assert r["ratio"] == pytest.approx(r["kit_median_us"])


def test_reference_refuses_several_gpus(capsys):
    argv = ["measure", "--gpus", "2", "--reference", "--out", "x.csv"]
    assert cli.main(argv) == 2
    assert "--reference times one GPU" in capsys.readouterr().err


def test_the_plans_reference_run_times_both_ways_at_the_issues_sizes():
    (e,) = [e for e in PLAN if e.kind == "reference"]
    a = build_parser().parse_args([*e.argv(), "--out", "r.csv"])
    spec = spec_from_args(a)
    assert a.reference and spec.strategies == ("pinned_reuse", "pageable") and spec.order == "shuffled"
    assert spec.sizes == (1024, 64 * 1024, 2**20, 64 * 2**20, 2**30)
    assert spec.evidence == "light" and spec.pause_ms is None and not e.in_quick()
    assert e.seconds <= 45  # the issue's budget on the H200
