"""benchmarks/bench_evidence.py on a CPU: the figures it reports are consistent with each
other and its verdicts follow its targets. (The costs themselves are the benchmark's to
print, not a test's to time.)"""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_evidence", ROOT / "benchmarks" / "bench_evidence.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_verdicts_follow_the_targets(bench):
    ok = {"timer_us": 100.0, "sched_state_us": 29.9}
    assert [h for _, h in bench.verdicts(ok)] == [True, True]
    assert [h for _, h in bench.verdicts({"timer_us": 100.1, "sched_state_us": 30.5})] == [False, False]
    assert bench.verdicts(ok)[0][0] == "timer_us = 100.0 us (target <= 100 us)"


def test_per_call_us_is_the_median_of_the_block_means(bench, monkeypatch):
    ticks = iter([0.0, 1.0, 1.0, 4.0, 4.0, 6.0])  # blocks of 2 calls: 0.5, 1.5, 1.0 s per call
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(ticks))
    assert bench.per_call_us(lambda: None, blocks=3, calls=2) == pytest.approx(1.0e6)


def test_a_short_run_reports_positive_costs_and_their_ratio(bench, tmp_path, capsys):
    code = bench.main(["--blocks", "2", "--calls", "50", "--json", str(tmp_path / "e.json")])
    res = json.loads((tmp_path / "e.json").read_text())
    assert set(res) == {
        "bare_clock_us",
        "timer_us",
        "sched_state_us",
        "torch_copy_1KiB_us",
        "timer_over_torch_copy",
    }
    assert all(v > 0 for v in res.values())
    assert res["timer_over_torch_copy"] == pytest.approx(res["timer_us"] / res["torch_copy_1KiB_us"])
    assert res["timer_us"] > res["bare_clock_us"]  # the evidence is read around the same clock pair
    out = capsys.readouterr().out
    assert code == (0 if all(h for _, h in bench.verdicts(res)) else 1)
    assert out.count("PASS ") + out.count("FAIL ") == 2
