"""The workload experiment: its plan, its spec's checks, and a run on the CPU (plain copies)
whose every step checks the data that arrived."""

import pytest

from h2dlab import recipes
from h2dlab.errors import UsageError
from h2dlab.measure.recorder import StopFlag
from h2dlab.measure.workload import WAYS, WorkloadSpec, _Ways, plan_workload, workload
from h2dlab.recording import datasets

SMALL = dict(
    shape=(64, 1, 32, 32), steps=2, warmup=1, passes=1, compute_ms=1.0, matmuls=1, workers=0, device="cpu"
)


def test_plan_runs_each_way_as_one_block_per_pass_with_unique_keys():
    spec = WorkloadSpec(steps=3, warmup=2, passes=2, device="cpu", seed=5)
    rows = plan_workload(spec)
    assert len(rows) == 2 * len(WAYS) * 5
    assert [r["order"] for r in rows] == list(range(len(rows)))
    keys = {(r["strategy"], r["rep"], r["warmup"]) for r in rows}
    assert len(keys) == len(rows)
    blocks = [rows[i]["strategy"] for i in range(0, len(rows), 5)]
    assert all(len({r["strategy"] for r in rows[i : i + 5]}) == 1 for i in range(0, len(rows), 5))
    assert sorted(blocks[: len(WAYS)]) == sorted(WAYS) == sorted(blocks[len(WAYS) :])
    assert blocks[: len(WAYS)] != blocks[len(WAYS) :]  # each pass shuffled anew (seed 5)
    assert plan_workload(spec) == rows  # seeded
    first = rows[:5]
    assert [r["warmup"] for r in first] == [True, True, False, False, False]
    by_way = {r["strategy"]: r for r in rows}
    assert (
        by_way["results_pinned"]["direction"] == "d2h"
        and by_way["results_pinned"]["size_bytes"] == 64 * 1024 * 4
    )
    assert (
        by_way["pageable_to"]["size_bytes"] == 64 * 3 * 224 * 224 * 4
        and by_way["many_packed"]["n_tensors"] == 64
    )


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(ways=("nope",)), "unknown way 'nope'"),
        (dict(ways=()), "unknown way"),
        (dict(ways=("resident", "resident")), "named twice"),
        (dict(shape=(3, 3)), "multiple of 1024"),
        (dict(shape=(1024,)), "two dimensions"),
        (dict(steps=0), "steps must be at least 1"),
        (dict(compute_ms=0.0), "compute_ms"),
    ],
)
def test_spec_refuses_what_cannot_run(kw, match):
    with pytest.raises(UsageError, match=match):
        WorkloadSpec(**kw)


def test_every_way_runs_on_the_cpu_and_its_data_arrives_intact():
    df = workload(WorkloadSpec(**SMALL), progress=False)
    assert set(df["strategy"]) == set(WAYS)
    assert (df["error"] == "").all(), df.loc[df["error"] != "", ["strategy", "error"]]
    assert len(df) == len(WAYS) * 3 and (df["wall_ms"] > 0).all()
    assert set(df["shape"]) == {"64x1x32x32"} and set(df["dtype"]) == {"float32"}
    spec = df.attrs["env"]["spec"]
    assert spec["kind"] == "workload" and spec["matmuls"] == 1


def test_a_recipe_that_corrupts_the_batch_is_caught_in_its_rows(monkeypatch):
    one = recipes.load("one_tensor")
    monkeypatch.setattr(one, "send_once", lambda x, device: x.to(device) + 1)
    df = workload(WorkloadSpec(**{**SMALL, "ways": ("resident", "pageable_to")}), progress=False)
    bad = df[df["strategy"] == "pageable_to"]
    timed = bad[~bad["warmup"]]
    assert timed["error"].iloc[0].startswith("wrong result") and (timed["error"] != "").all()
    assert (df.loc[df["strategy"] == "resident", "error"] == "").all()


def test_a_loader_batch_that_is_not_the_pool_s_images_is_caught(monkeypatch):
    import h2dlab.measure.workload as w

    real = w._Ways.step

    def one_value_off(self, way, i):
        x, want = real(self, way, i)
        if way == "loader_pinned":
            x = x.clone()
            x.reshape(len(x), -1)[3, 1] += 1  # one value of one image changed in transit
        return x, want

    monkeypatch.setattr(w._Ways, "step", one_value_off)
    df = workload(WorkloadSpec(**{**SMALL, "ways": ("loader_pinned", "loader_pageable")}), progress=False)
    errs = df.loc[~df["warmup"]].groupby("strategy")["error"].first()
    assert errs["loader_pinned"].startswith("wrong result") and errs["loader_pageable"] == ""


def test_a_stopped_run_keeps_every_step_it_measured(monkeypatch, tmp_path):
    stop = StopFlag()
    real, calls = _Ways.step, []

    def counting(self, way, i):
        calls.append(way)
        if len(calls) == 4:
            stop.request()
        return real(self, way, i)

    monkeypatch.setattr(_Ways, "step", counting)
    out = tmp_path / "w.csv"
    df = workload(WorkloadSpec(**SMALL), out=out, progress=False, stop=stop)
    assert len(df) == 4 and df.attrs["stopped"]
    assert len(datasets.load(out)) == 4


def test_cli_writes_the_table_and_refuses_a_bad_shape_in_one_line(cli, tmp_path):
    out = tmp_path / "w.csv.gz"
    args = ["workload", "--device", "cpu", "--batch", "64x1x32x32", "--steps", "1", "--warmup", "0"]
    p = cli(*args, "--passes", "1", "--matmuls", "1", "--workers", "0", "--ways", "resident,pageable_to",
            "--out", str(out), "--no-progress")  # fmt: skip
    assert p.returncode == 0, p.stderr
    df = datasets.load(out)
    assert sorted(df["strategy"]) == ["pageable_to", "resident"] and (df["error"] == "").all()
    bad = cli("workload", "--device", "cpu", "--batch", "3x3", "--out", str(tmp_path / "b.csv"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "1024" in bad.stderr
    bad = cli("workload", "--batch", "64xA", "--out", str(tmp_path / "b.csv"))
    assert bad.returncode == 2 and "64xA" in bad.stderr


def test_a_batch_too_large_for_memory_is_refused_in_one_line_with_exit_2(monkeypatch, tmp_path, capsys):
    import torch

    from h2dlab.cli import main as cli

    def no_memory(*shape, **kw):  # what torch's CPU allocator raises (torch 2.x), without asking it
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 2560000000000 bytes. Error code 12 (Cannot allocate memory)"
        )

    monkeypatch.setattr(torch, "rand", no_memory)
    out = tmp_path / "w.csv"
    code = cli.main(
        ["workload", "--device", "cpu", "--batch", "100000x100000x64", "--out", str(out), "--no-progress"]
    )
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "100000x100000x64" in err and "--batch" in err and not out.exists()


def test_a_loader_way_s_wait_for_its_batch_is_stored_per_way(monkeypatch):
    """env.json's spec keeps, per loader way, the median host time a timed step spent in
    next(): a loader slowed by 20 ms a batch (synthetic) shows it; other ways are absent."""
    import time as _time

    slow = _Ways._loader

    def slowed(self, pin):
        it = slow(self, pin)
        inner = it.it

        class Slow:
            def __next__(self):
                _time.sleep(0.02)
                return next(inner)

        it.it = Slow()
        return it

    monkeypatch.setattr(_Ways, "_loader", slowed)
    df = workload(
        WorkloadSpec(**{**SMALL, "ways": ("resident", "loader_pinned", "loader_pageable")}), progress=False
    )
    waits = df.attrs["env"]["spec"]["loader_wait_ms"]
    assert set(waits) == {"loader_pinned", "loader_pageable"}
    assert all(20.0 <= v < 200.0 for v in waits.values()), waits
