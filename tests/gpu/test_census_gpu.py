"""On a real GPU: a CUDA run ends with a stall census in its env.json, read back by
``datasets.read``; a run stopped before its end spins none."""

import json

import pytest

from h2dlab.explain.causes_stall import census_of, run_censuses
from h2dlab.measure.harness import sweep
from h2dlab.measure.recorder import StopFlag
from h2dlab.measure.spec import SweepSpec
from h2dlab.recording import datasets


def test_a_cuda_run_stores_its_stall_census(tmp_path, monkeypatch):
    monkeypatch.setenv("H2DLAB_CENSUS_S", "0.5")
    spec = SweepSpec(("pinned_reuse",), (4096, 65536), device="cuda", reps=3, warmup=1)
    sweep(spec, out=tmp_path / "c.csv", progress=False)
    env = json.loads((tmp_path / "c.csv.env.json").read_text())
    c = env["stall_census"]
    assert c["seconds"] == pytest.approx(0.5, abs=0.01)
    assert c["reads"] > 10_000  # a read pair well under 50 us
    assert 0 <= c["on_cpu"] <= c["stalls"]
    if c["on_cpu"]:
        assert c["threshold_us"] <= c["on_cpu_p50_us"] <= c["on_cpu_max_us"]
    assert census_of(env) == c
    df = datasets.read(tmp_path / "c.csv")
    assert run_censuses(df).map(lambda x: x["reads"]).eq(c["reads"]).all()


def test_a_stopped_run_spins_no_census(tmp_path, monkeypatch):
    monkeypatch.setenv("H2DLAB_CENSUS_S", "0.5")
    stop = StopFlag()
    spec = SweepSpec(("pinned_reuse",), (4096,), device="cuda", reps=3, warmup=0)
    sweep(spec, out=tmp_path / "s.csv", progress=False, stop=stop, on_row=lambda n: stop.request())
    env = json.loads((tmp_path / "s.csv.env.json").read_text())
    assert "stall_census" not in env
