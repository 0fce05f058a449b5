"""benchmarks/bench_evidence.py (and bench_explain.py, below) on a CPU: the figures it reports are consistent with each
other and its verdicts follow its targets. (The costs themselves are the benchmark's to
print, not a test's to time.)"""

from __future__ import annotations

import importlib.util
import json
import types

import pytest

from tests.conftest import ROOT


def _bench_module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench():
    return _bench_module("bench_evidence")


def test_verdicts_follow_the_targets(bench):
    ok = {
        "timer_light_us": 100.0,
        "sched_state_us": 29.9,
        "loop_gap_light_ms": 0.2,
        "loop_gap_interleaved_ms": 0.2,
    }
    assert [h for _, h in bench.verdicts(ok)] == [True, True, True, True]
    bad = {
        "timer_light_us": 100.1,
        "sched_state_us": 30.5,
        "loop_gap_light_ms": 0.21,
        "loop_gap_interleaved_ms": 0.21,
    }
    assert [h for _, h in bench.verdicts(bad)] == [False, False, False, False]
    assert bench.verdicts(ok)[0][0] == "timer_light_us = 100.0 us (target <= 100 us)"
    assert bench.verdicts(ok)[2][0] == "loop_gap_light_ms = 0.20 ms (target <= 0.2 ms)"


def test_per_call_us_is_the_median_of_the_block_means(bench, monkeypatch):
    ticks = iter([0.0, 1.0, 1.0, 4.0, 4.0, 6.0])  # blocks of 2 calls: 0.5, 1.5, 1.0 s per call
    # Only the benchmark's own clock: patching time.perf_counter itself also fed the ticks to
    # h2dlab.measure.timing's gc callback whenever a collection ran (a StopIteration there, or a stolen tick).
    monkeypatch.setattr(bench, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    assert bench.per_call_us(lambda: None, blocks=3, calls=2) == pytest.approx(1.0e6)


def test_a_short_run_reports_positive_costs_and_their_ratio(bench, tmp_path, capsys):
    argv = ["--blocks", "2", "--calls", "50", "--loop-reps", "40", "--device", "cpu"]
    code = bench.main([*argv, "--json", str(tmp_path / "e.json")])
    res = json.loads((tmp_path / "e.json").read_text())
    here = {"bare_clock_us", "timer_us", "timer_light_us", "sched_state_us", "torch_copy_1KiB_us",
            "timer_over_torch_copy", "getrusage_us", "others_cpu_ns_us", "others_wait_ns_us", "row_write_us",
            "row_write_pandas_us", "loop_gap_light_ms", "loop_gap_full_ms", "loop_gap_interleaved_ms"}  # fmt: skip
    cuda_only = {"host_alloc_count_us", "device_segment_count_us", "host_memory_stats_flat_us",
                 "memory_stats_flat_us", "sm_clock_mhz_us", "gpu_other_processes_us"}  # fmt: skip
    assert set(res) == here | cuda_only
    assert all(res[k] > 0 for k in here) and all(res[k] is None for k in cuda_only)  # no CUDA here
    # the light loop leaves out the thread walks the full one makes, around the same copies
    assert res["loop_gap_light_ms"] < res["loop_gap_full_ms"]
    assert res["timer_over_torch_copy"] == pytest.approx(res["timer_us"] / res["torch_copy_1KiB_us"])
    assert res["timer_us"] > res["bare_clock_us"]  # the evidence is read around the same clock pair
    out = capsys.readouterr().out
    assert code == (0 if all(h for _, h in bench.verdicts(res)) else 1)
    assert out.count("PASS ") + out.count("FAIL ") == 4


# --- benchmarks/bench_explain.py ------------------------------------------------------


@pytest.fixture(scope="module")
def bench_explain():
    return _bench_module("bench_explain")


def test_explain_verdicts_follow_the_target_and_skip_what_was_not_measured(bench_explain):
    row = {"explain_cpu_s": 3.0, "load_cpu_s": 1.0, "explain_over_load": 3.0}
    assert bench_explain.verdicts({"h200_sweep": row}) == [
        ("explain h200_sweep = 3.00 s of CPU (target <= 3 s)", True)
    ]
    assert [h for _, h in bench_explain.verdicts({"h200_sweep": {**row, "explain_cpu_s": 3.01}})] == [False]
    assert bench_explain.verdicts({"h200_forum": row}) == []


def test_explain_measure_takes_medians_alternating_the_two_commands(bench_explain, monkeypatch):
    seen, costs = [], iter([2.0, 1.0, 9.0, 0.5, 2.5, 1.5])  # explain, load, explain, load, ...
    monkeypatch.setattr(bench_explain, "child_cpu_s", lambda args: seen.append(args[1]) or next(costs))
    res = bench_explain.measure(["h200_sweep"], repeats=3)
    assert seen == ["-m", "-c"] * 3
    assert res == {"h200_sweep": {"explain_cpu_s": 2.5, "load_cpu_s": 1.0, "explain_over_load": 2.5}}


def test_explain_child_cpu_s_refuses_a_failing_command(bench_explain):
    with pytest.raises(RuntimeError, match="failed"):
        bench_explain.child_cpu_s([bench_explain.sys.executable, "-c", "raise SystemExit(3)"])


def test_explain_refuses_bad_arguments_before_measuring(bench_explain, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench_explain, "measure", lambda *a, **k: pytest.fail("measured before checking"))
    for argv, said in (
        (["--datasets", "nosuch"], "--datasets nosuch: unknown dataset 'nosuch'"),
        (["--json", str(tmp_path)], "give a file in a folder that exists"),
        (["--json", str(tmp_path / "no" / "x.json")], "give a file in a folder that exists"),
        (["--repeats", "0"], "--repeats must be at least 1"),
    ):
        with pytest.raises(SystemExit) as out:
            bench_explain.main(argv)
        assert out.value.code == 2 and said in capsys.readouterr().err


def test_explain_reads_a_relative_path_from_where_it_is_run(bench_explain, monkeypatch, tmp_path):
    from h2dlab.recording import datasets

    datasets.load(datasets.DATA_DIR / "h200" / "bidir").to_csv(tmp_path / "b.csv", index=False)
    monkeypatch.chdir(tmp_path)
    seen = []
    monkeypatch.setattr(bench_explain, "measure", lambda names, repeats: seen.extend(names) or {})
    assert bench_explain.main(["--datasets", "b.csv", "h200_bidir"]) == 0
    assert seen == [str(tmp_path / "b.csv"), "h200_bidir"]
