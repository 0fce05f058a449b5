"""The doctor against ground truth measured without the profiler, on the bundled real traces.

The traces and ``ground_truth.csv`` come from ``data/traces/record_traces.py`` (run on a
GPU; ``H2DLAB_TRACES`` names its ``--out`` folder, default ``data/traces``). Reading them
needs no GPU, so this runs on CPU wherever they are bundled; it skips where they are not. For every
workload: the doctor's exposed copy time per step is within 25 % (or 0.5 ms) of
``step_ms - resident_ms``; every host-to-device copy of the batch is read as the memory the
workload copies from; and, among the recipes measured in the workload's family, the one
the doctor ranks first measured fastest (ties within 0.5 ms count as fastest).
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from h2dlab.doctor import diagnose, load_machine

ROOT = Path(__file__).resolve().parents[1]
FOLDER = Path(os.environ.get("H2DLAB_TRACES") or ROOT / "data" / "traces")
TABLE = FOLDER / "ground_truth.csv"
TIE_MS = 0.5


def _truth() -> pd.DataFrame:
    if not TABLE.is_file():
        pytest.skip(f"no {TABLE}: run data/traces/record_traces.py --out {FOLDER} first")
    t = pd.read_csv(TABLE)
    t["error"] = t["error"].fillna("").astype(str)
    return t[t["error"] == ""].reset_index(drop=True)


@pytest.fixture(scope="module")
def results():
    t = _truth()
    machine = load_machine("h200")
    return t, {r.workload: diagnose(FOLDER / r.trace, machine=machine) for r in t.itertuples()}


def _names():
    return list(pd.read_csv(TABLE)["workload"]) if TABLE.is_file() else ["none"]


@pytest.mark.parametrize("name", _names())
def test_exposed_copy_time_agrees_with_the_step_time_measured_without_the_profiler(results, name):
    t, dx = results
    row = t[t["workload"] == name]
    if row.empty:
        pytest.fail(f"{name}: its recording failed (ground_truth.csv's error column): no ground truth")
    truth = float(row["exposed_ms"].iat[0])
    got = dx[name].exposed_copy_ms_per_step
    assert abs(got - truth) <= max(0.5, 0.25 * abs(truth)), (
        f"{name}: doctor {got:.3f} ms, measured {truth:.3f} ms"
    )


@pytest.mark.parametrize("name", _names())
def test_every_batch_copy_is_read_as_the_memory_it_comes_from(results, name):
    t, dx = results
    row = t[t["workload"] == name]
    if row.empty:
        pytest.fail(f"{name}: its recording failed (ground_truth.csv's error column): no ground truth")
    c = dx[name].analysis.copies
    h2d = c[(c["direction"] == "h2d") & (c["step"] >= 0)]
    assert len(h2d) >= 3, f"{name}: {len(h2d)} host-to-device copies in the traced steps"
    assert set(h2d["source_memory"]) == {row["h2d_source"].iat[0]}


@pytest.mark.parametrize("name", _names())
def test_the_first_recipe_measured_fastest_in_its_family(results, name):
    t, dx = results
    row = t[t["workload"] == name]
    if row.empty:
        pytest.fail(f"{name}: its recording failed (ground_truth.csv's error column): no ground truth")
    fam = t[t["family"] == row["family"].iat[0]]
    measured = dict(zip(fam["recipe"], fam["exposed_ms"], strict=True))
    own = row["recipe"].iat[0]
    d = dx[name].to_dict()
    site = max((s for s in d["sites"] if s["direction"] == "h2d"), key=lambda s: s["exposed_ms_per_step"])
    ranked = [own if a["recipe"] == "as_is" else a["recipe"] for a in site["alternatives"]] or [own]
    first = next(r for r in ranked if r in measured)
    assert measured[first] <= min(measured.values()) + TIE_MS, (
        f"{name}: the doctor ranks {first} first ({measured[first]:.2f} ms measured); "
        f"fastest measured: {min(measured, key=measured.get)} ({min(measured.values()):.2f} ms)"
    )
