"""benchmarks/bench_transfer.py on a CPU: the crossover rule on synthetic ratios, and a dry run
of the whole script (tiny sizes, fake CUDA, copies on the CPU) so that a GPU run does not die
on a typo: every section runs, the result file has its layout, the fastpath file reads back."""

from __future__ import annotations

import importlib.util
import json
import sys
import time

import pytest
import torch

from h2dlab.transfer import fastpath as transfer
from h2dlab.transfer import stager
from tests.conftest import ROOT
from tests.transfer.test_transfer import fake_cuda  # noqa: F401 - the fixture

KiB, MiB, GiB = 1024, 1024**2, 1024**3


@pytest.fixture
def ana():
    """benchmarks/bench_analysis.py: the pure half (choices and verdicts), no CUDA."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(
        "bench_analysis_t", ROOT / "benchmarks" / "bench_analysis.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def bench():
    spec = importlib.util.spec_from_file_location("bench_transfer", ROOT / "benchmarks" / "bench_transfer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows(ratios):  # synthetic: {size: staged/.to() speed ratio}
    return [{"size_bytes": n, "ratio": r} for n, r in ratios.items()]


@pytest.mark.parametrize(
    ("ratios", "want"),
    [
        ({MiB: 0.9, 32 * MiB: 1.2, 64 * MiB: 2.0, GiB: 4.0}, 32 * MiB),
        ({MiB: 0.9, 32 * MiB: 1.2, 64 * MiB: 1.0, GiB: 4.0}, GiB),  # a dip above: take over only after it
        ({GiB: 4.0, MiB: 1.5, 32 * MiB: 1.04}, GiB),  # unsorted input; 1.04 < margin
        ({MiB: 2.0, GiB: 3.0}, MiB),
        ({MiB: 0.5, GiB: 0.9}, transfer.MAX_MIN_BYTES),  # never stage
    ],
)
def test_choose_min_bytes(bench, ratios, want):
    assert bench.choose_min_bytes(_rows(ratios)) == want


class _Timer:
    def __init__(self, dev):
        pass

    def __call__(self, fn):
        t0 = time.perf_counter()
        out = fn()
        return out, {"wall_ms": (time.perf_counter() - t0) * 1e3 + 1e-3, "event_ms": float("nan")}


def test_dry_run_writes_every_section(bench, fake_cuda, monkeypatch, tmp_path):  # noqa: F811
    real_empty, real_empty_like = torch.empty, torch.empty_like
    monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **k: real_empty(*a, **k))
    monkeypatch.setattr(torch, "empty_like", lambda *a, pin_memory=False, **k: real_empty_like(*a, **k))
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: self.clone())
    real_stager = stager.Stager

    def cpu_stager(dev, **k):
        s = real_stager("cuda", **k)
        s.device = torch.device("cpu")
        return s

    monkeypatch.setattr(stager, "Stager", cpu_stager)
    monkeypatch.setattr(transfer, "to_device", lambda x, dev, **k: x.clone())
    prev = transfer.fastpath()
    staging = sys.modules["bench_staging"]
    monkeypatch.setattr(staging, "DEV", torch.device("cpu"))
    monkeypatch.setattr(staging, "STREAM_BYTES", 256 * KiB)
    monkeypatch.setattr(staging, "TUNE_GRID", (("torch", 1, 16, 2), ("torch", 2, 16, 3), ("numpy", 2, 16, 2)))
    monkeypatch.setattr(staging, "TUNE_MIN_STEP", 4 * MiB)
    monkeypatch.setattr(staging, "GIVE_UP", 0.0)  # every setting timed at every size
    for name, value in {
        "DEV": torch.device("cpu"),
        "WallTimer": _Timer,
        "collect_env": lambda argv=None: {"gpu_name": "none (CPU dry run)", "command": "dry run"},
        "TUNE_SIZES": (128 * KiB, 256 * KiB, 512 * KiB),
        "TIMELINE_BYTES": 256 * KiB,
        "BOUND_SIZES": (256 * KiB, MiB),
        "REPEATED": ((64 * KiB, 3), (MiB, 2)),
        "PLAN_SIZES": (128 * KiB, 256 * KiB, 512 * KiB),
        "MID_TIMELINES": (256 * KiB,),
        "REF_STRATEGIES": ("pageable",),  # pinned_reuse needs CUDA
        "REF_SIZES": (KiB, 64 * KiB),
        "REF_MIN_RUN_S": 0.01,
    }.items():
        monkeypatch.setattr(bench, name, value)
    out, fp = tmp_path / "r" / "fake.json", tmp_path / "fastpath.json"
    argv = ["--out", str(out), "--fastpath", str(fp), "--min", "1KiB", "--max", "1MiB", "--reps-small", "5"]
    try:
        assert bench.main([*argv, "--others", "pin_then_to,pinned_reuse"]) == 0
    finally:
        transfer.use_fastpath(prev)
    res = json.loads(out.read_text())
    assert set(res) >= {"env", "tuning", "crossover", "settings", "rows", "fastpath_overhead_us", "bounds",
                        "repeated", "timeline_256MiB", "ceilings", "targets", "elapsed_s", "reference",
                        "reference_verdict"}  # fmt: skip
    assert [(r["strategy"], r["size_bytes"]) for r in res["reference"]] == [
        ("pageable", KiB),
        ("pageable", 64 * KiB),
    ]
    assert all(
        set(r) == {"strategy", "size_bytes", "kit_median_us", "reference_median_us"} for r in res["reference"]
    )
    assert all(r["kit_median_us"] > 0 and r["reference_median_us"] > 0 for r in res["reference"])
    sizes = [2**k for k in range(10, 21)]
    for m in ("to", "to_device", "pin_then_to", "pinned_reuse"):
        got = sorted(r["size_bytes"] for r in res["rows"] if r["method"] == m)
        assert got == sizes, m
    assert all(r["reps"] >= 5 and r["ms_q25"] <= r["ms_median"] <= r["ms_q75"] for r in res["rows"])
    assert [b["size_bytes"] for b in res["bounds"]] == [256 * KiB, MiB]
    b = res["bounds"][0]
    assert b["upper_gbps"] == min(b["host_alone_gbps"], b["dma_alone_gbps"])
    assert b["lower_gbps"] == min(b["host_under_dma_gbps"], b["dma_under_host_gbps"])
    assert b["lower_gbps"] == b[f"{b['lower_is']}_gbps"]
    assert {r["method"] for r in res["repeated"]} >= {"to", "to_device", "pin_then_to", "stager"}
    t = res["timeline_256MiB"]
    assert sum(c["bytes"] for c in t["chunks"]) == 256 * KiB
    assert all(
        c["wait_start_ms"] <= c["copy_start_ms"] <= c["copy_end_ms"] <= c["queued_ms"] for c in t["chunks"]
    )
    settings = transfer.read_fastpath(fp)
    assert settings["min_bytes"] == res["crossover"]["min_bytes"] == res["settings"]["min_bytes"]
    assert settings["measured_on"]["gpu_name"] == "none (CPU dry run)"
    assert {t["what"] for t in res["targets"]} >= {"to_device / .to() speed, whole grid (min)"}
    # The tuning: 3 settings, the best again with each other head/tail split, then with 4 MiB
    # smallest chunks, then on huge pages; what the fastpath file says is the picked row's
    # setting, and the timeline ran it.
    tuned = res["tuning"]
    n_split = len(staging.TUNE_SPLITS)
    assert len(tuned) == 3 + n_split + 2
    assert [(t["head_split"], t["tail_split"]) for t in tuned[3 : 3 + n_split]] == list(staging.TUNE_SPLITS)
    assert all({k: t[k] for k in ("engine", "threads", "chunk_bytes", "slots")} ==
               {k: tuned[3][k] for k in ("engine", "threads", "chunk_bytes", "slots")} for t in tuned[3 : 3 + n_split])  # fmt: skip
    assert tuned[-2]["min_step_bytes"] == 4 * MiB and tuned[-1]["huge_pages"]
    assert all([r["size_bytes"] for r in t["by_size"]] == [128 * KiB, 256 * KiB, 512 * KiB] for t in tuned)
    keys = (
        "threads",
        "chunk_bytes",
        "engine",
        "slots",
        "min_step_bytes",
        "huge_pages",
        "head_split",
        "tail_split",
    )
    assert {k: settings[k] for k in keys} in [{k: t[k] for k in keys} for t in tuned]
    # The per-size tuning: every candidate plan at every size; fastpath.json's schedule is the
    # one chosen from those rows, and the 256 KiB timeline ran the plan to_device runs there.
    tbs = res["tuning_by_size"]
    assert sorted({r["size_bytes"] for r in tbs["rows"]}) == [128 * KiB, 256 * KiB, 512 * KiB]
    assert (
        len(tbs["rows"]) == 3 * len(tbs["candidates"])
        and tbs["candidates"][0]["threads"] == settings["threads"]
    )
    assert settings["schedule"] == tbs["schedule"] == bench.choose_schedule(tbs["rows"], settings)
    band = next((b for b in settings["schedule"] if 256 * KiB < b["below_bytes"]), settings)
    assert res["timeline_256MiB"]["plan"] == {k: band[k] for k in stager.PLAN_KEYS}
    assert {k: res["timeline_256MiB"][k] for k in ("slots", "huge_pages")} == {
        k: settings[k] for k in ("slots", "huge_pages")
    }
    top = {k: settings[k] for k in stager.PLAN_KEYS}
    assert [t["plan"] for t in res["timeline_mid"]][0] == top
    # one timeline where the size's band runs the top plan itself (a band may repeat it), two where not
    assert len(res["timeline_mid"]) == (1 if {k: band[k] for k in stager.PLAN_KEYS} == top else 2)
    assert {k: res["bounds"][0][k] for k in keys} == {k: settings[k] for k in keys}
    assert res["bounds"][0]["reps"] >= 5
    assert res["identical_calls"]["sizes"] == sum(
        1 for r in res["rows"] if r["method"] == "to_device" and not r["staged"]
    )
    assert isinstance(res["tensordict"], str) and isinstance(res["repeated_verdict"], list)
    if res["tensordict"].startswith("absent"):
        assert "tensordict" not in {r["method"] for r in res["repeated"]}
        assert any("was not measured" in line for line in res["repeated_verdict"])


def test_refuses_bad_arguments(bench, capsys):
    assert bench.main(["--max", "lots"]) == 2
    assert bench.main(["--reps-large", "2"]) == 2
    err = capsys.readouterr().err
    assert "bench_transfer:" in err and "Traceback" not in err


def test_pick_takes_huge_pages_only_when_clearly_faster(bench):
    rows = [  # synthetic tuning rows
        {"threads": 8, "chunk_bytes": MiB, "huge_pages": False, "gbps_median": 30.0},
        {"threads": 16, "chunk_bytes": MiB, "huge_pages": False, "gbps_median": 32.0},
        {"threads": 16, "chunk_bytes": MiB, "huge_pages": True, "gbps_median": 32.5},
    ]
    assert bench.pick(rows) == rows[1]
    rows[2]["gbps_median"] = 33.0
    assert bench.pick(rows) == rows[2]
    assert bench.pick(rows[:2]) == rows[1]


# --- the pure half, on synthetic rows ------------------------------------------------------


def test_cfg_of_fills_the_defaults_and_keeps_only_stager_arguments(ana):
    c = ana.cfg_of(
        {"threads": 2, "chunk_bytes": 32 * MiB, "engine": "torch", "gbps_median": 40.0, "by_size": []}
    )
    assert c == {"threads": 2, "chunk_bytes": 32 * MiB, "engine": "torch", "huge_pages": False,
                 "slots": stager.SLOTS_PER_THREAD, "min_step_bytes": stager.MIN_STEP_BYTES,
                 "head_split": 4, "tail_split": 4, "waves": stager.WAVES}  # fmt: skip
    assert (
        "32 MiB x 2 slots" in ana.cfg_name(c)
        and "torch" in ana.cfg_name(c)
        and "split 4/4" in ana.cfg_name(c)
    )
    assert "split 4/1" in ana.cfg_name({**c, "tail_split": 1})


def test_paired_ratio_of_identical_timings_is_one_and_of_a_slower_call_below(ana):
    # synthetic: the same made-up timings twice read 1.00; to_device 10 % slower reads 1/1.1
    ms = [1.0, 1.2, 0.9, 1.1, 1.05]
    assert ana.paired_ratio(ms, ms) == {"ratio_vs_to": 1.0, "ratio_q25": 1.0, "ratio_q75": 1.0}
    r = ana.paired_ratio(ms, [1.1 * m for m in ms])
    assert r["ratio_vs_to"] == pytest.approx(1 / 1.1)


def test_identical_calls_summarises_only_the_unstaged_sizes(ana):
    rows = [  # synthetic
        {"method": "to_device", "ratio_vs_to": 0.99, "staged": False},
        {"method": "to_device", "ratio_vs_to": 1.03, "staged": False},
        {"method": "to_device", "ratio_vs_to": 5.0, "staged": True},
        {"method": "to", "ratio_vs_to": 1.0},
    ]
    assert ana.identical_calls(rows) == {
        "sizes": 2,
        "ratio_median": 1.01,
        "ratio_min": 0.99,
        "ratio_max": 1.03,
    }
    assert ana.identical_calls(rows[2:]) == {"sizes": 0}


def test_repeated_verdict_says_who_wins_and_why(ana):
    cfg = {"threads": 1, "chunk_bytes": 32 * MiB, "min_step_bytes": MiB}
    rows = [  # synthetic GB/s
        {"method": "stager", "size_bytes": 64 * MiB, "gbps_median": 23.0},
        {"method": "pin_then_to", "size_bytes": 64 * MiB, "gbps_median": 27.2},
        {"method": "stager", "size_bytes": GiB, "gbps_median": 46.2},
        {"method": "pin_then_to", "size_bytes": GiB, "gbps_median": 24.4},
    ]
    out = ana.repeated_verdict(rows, cfg, "absent: ModuleNotFoundError: No module named 'tensordict'")
    assert "not measured" in out[0]
    n64 = len(stager.chunk_plan(64 * MiB, 1, 32 * MiB, MiB)) - 1
    assert "64 MiB/step" in out[1] and "loses to pin_then_to" in out[1] and f"{n64} chunks" in out[1]
    assert "1024 MiB/step" in out[2] and "beats pin_then_to" in out[2] and "1.89x" in out[2]
    assert len(ana.repeated_verdict(rows, cfg, "0.15.3")) == 2


def _synthetic_results(frac_1g=0.9, lower_1g=1.1, big_ratio=5.0, small_ratio=0.99, added_us=0.5):
    """A made-up result (synthetic): bounds, grid rows and overhead chosen per case."""
    bounds = [{"size_bytes": n, "frac_of_upper": f, "frac_of_lower": lo}
              for n, f, lo in ((256 * MiB, 0.8, 1.2), (GiB, frac_1g, lower_1g), (4 * GiB, 0.9, 1.0))]  # fmt: skip
    rows = [{"method": "to_device", "size_bytes": KiB, "ratio_vs_to": small_ratio},
            {"method": "to_device", "size_bytes": 256 * MiB, "ratio_vs_to": big_ratio},
            {"method": "to_device", "size_bytes": 4 * GiB, "ratio_vs_to": big_ratio + 1},
            {"method": "to", "size_bytes": KiB, "ratio_vs_to": 1.0}]  # fmt: skip
    return {"bounds": bounds, "rows": rows, "fastpath_overhead_us": {"added_us_median": added_us}}


def test_targets_pass_when_every_figure_meets_its_target(ana):
    t = ana.targets(_synthetic_results())
    assert len(t) == 8 and all(x["ok"] for x in t)


@pytest.mark.parametrize(
    ("kw", "what"),
    [
        ({"frac_1g": 0.84}, "to_device / upper bound at 1024 MiB"),
        ({"lower_1g": 0.99}, "to_device / lower bound (min of host under DMA, DMA under host) at 1024 MiB"),
        ({"big_ratio": 4.4}, "to_device / .to() speed, 256 MiB-4 GiB (min)"),
        ({"small_ratio": 0.96}, "to_device / .to() speed, whole grid (min)"),
        ({"added_us": 2.1}, "us added to .to() below the threshold (median)"),
    ],
)
def test_each_target_can_miss(ana, kw, what):
    t = {x["what"]: x for x in ana.targets(_synthetic_results(**kw))}
    assert not t[what]["ok"]
    assert sum(not x["ok"] for x in t.values()) == 1  # and only that one


def test_wall_timer_times_the_call_alone(bench):
    import bench_staging

    t = bench_staging.WallTimer(torch.device("cpu"))
    out, rec = t(lambda: time.sleep(0.02) or 7)
    assert out == 7 and set(rec) == {"wall_ms"} and 20 <= rec["wall_ms"] < 200


# --- the bounds and the paired timing, on synthetic figures ----------------------------------


@pytest.mark.parametrize(
    ("g", "lower", "lower_is"),
    [
        # synthetic GB/s shaped like the 32-core host at 1 GiB: the host copy outruns the DMA
        # even under DMA, so the DMA under host copies is the lower bound, not the host copy
        ({"host_alone": 93.4, "dma_alone": 55.3, "host_under_dma": 78.8, "dma_under_host": 50.5}, 50.5,
         "dma_under_host"),
        # synthetic, shaped like the 16-core host: the host copy under DMA is the slower half
        ({"host_alone": 42.6, "dma_alone": 55.4, "host_under_dma": 30.0, "dma_under_host": 50.7}, 30.0,
         "host_under_dma"),
    ],
)  # fmt: skip
def test_bound_figures_lower_is_the_slower_contended_half(ana, g, lower, lower_is):
    f = ana.bound_figures({**g, "to_device": 45.0})
    assert f["upper_gbps"] == min(g["host_alone"], g["dma_alone"])
    assert (f["lower_gbps"], f["lower_is"]) == (lower, lower_is)
    assert f["lower_gbps"] <= f["upper_gbps"]
    assert f["frac_of_lower"] == pytest.approx(45.0 / lower) and f["frac_of_upper"] == pytest.approx(
        45.0 / f["upper_gbps"]
    )


def test_timed_primes_each_call_with_itself(bench):
    import bench_staging

    calls = []

    def timer(fn):
        calls.append(("timed", fn()))
        return None, {"wall_ms": 1.0}

    fns = {"a": lambda: calls.append("a") or "a", "b": lambda: calls.append("b") or "b"}
    out = bench_staging.timed(fns, 2, 1, timer, prime=True)
    assert out == {"a": [1.0, 1.0], "b": [1.0, 1.0]}
    timed_at = [i for i, c in enumerate(calls) if isinstance(c, tuple)]
    assert len(timed_at) == 6
    for i in timed_at:  # the call right before each timed call is the same fn, untimed
        assert calls[i - 2] == calls[i][1] and calls[i - 1] == calls[i][1]
    calls.clear()
    bench_staging.timed(fns, 2, 1, timer)  # unprimed: only timed calls, alternating a b / b a
    assert [c[1] for c in calls if isinstance(c, tuple)] == ["a", "b", "b", "a", "a", "b"]


# --- section 9, the reference check: what it writes ------------------------------------------


def test_reference_only_writes_the_issues_entries_and_keeps_the_other_keys(
    bench,
    fake_cuda,  # noqa: F811
    monkeypatch,
    tmp_path,
):
    """--reference-only on synthetic medians: one entry per strategy x size with the kit's and
    the reference's median in us, the verdict on their ratios, the results' other keys kept."""
    import h2dlab.measure.harness

    kit = {(s, n): (1.1 * n / KiB, "event") for s in bench.REF_STRATEGIES for n in bench.REF_SIZES}
    ref = {(s, n): {"reference_median_us": n / KiB, "reference_iqr_us": 0.0} for (s, n) in kit}
    specs = []
    monkeypatch.setattr(h2dlab.measure.harness, "sweep", lambda spec, **k: specs.append(spec))
    monkeypatch.setattr(bench.reference, "kit_medians_us", lambda df: kit)
    monkeypatch.setattr(bench.reference, "reference_medians_us", lambda names, sizes, dev, **k: ref)
    monkeypatch.setattr(bench, "collect_env", lambda argv=None: {"gpu_name": "synthetic"})
    monkeypatch.setattr(bench, "DEV", torch.device("cpu"))
    monkeypatch.setattr(bench, "WallTimer", _Timer)
    out = tmp_path / "h200.json"
    out.write_text(json.dumps({"format": 2, "rows": [{"method": "to"}]}))
    assert bench.main(["--reference-only", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["rows"] == [{"method": "to"}] and res["format"] == 2  # kept
    got = {(r["strategy"], r["size_bytes"]): r for r in res["reference"]}
    assert set(got) == {
        (s, n) for s in ("pinned_reuse", "pageable") for n in (KiB, 64 * KiB, MiB, 64 * MiB, GiB)
    }
    for (_, n), r in got.items():
        assert list(r) == ["strategy", "size_bytes", "kit_median_us", "reference_median_us"]
        assert r["kit_median_us"] == pytest.approx(1.1 * n / KiB) and r["reference_median_us"] == n / KiB
    assert res["reference_verdict"]["within"] is True and res["reference_env"] == {"gpu_name": "synthetic"}
    (spec,) = specs  # the kit's own loop, its default evidence, reps back to back
    assert spec.evidence == "light" and spec.order == "shuffled" and spec.pause_ms is None


@pytest.mark.parametrize(("ratio", "within"), [(0.8, True), (1.25, True), (0.79, False), (4.1, False)])
def test_the_reference_verdict_holds_only_within_the_issues_bounds(bench, ratio, within):
    rows = [{"kit_median_us": 10.0, "reference_median_us": 10.0},
            {"kit_median_us": 10.0 * ratio, "reference_median_us": 10.0}]  # fmt: skip
    assert bench.reference_verdict(rows)["within"] is within
    assert bench.reference_verdict([])["within"] is False  # nothing compared is no pass
