"""One planned step of the batch, both-ways and workload loops (``measure.step.Steps``):
the rows it writes, stamped once and timed once, and what it does with a failure (kept and
returned, or the run stopped with every row of the step written). A fake run and timer."""

import math

import pytest
import torch

from h2dlab.measure import device as device_mod
from h2dlab.measure.failures import CudaFault
from h2dlab.measure.step import Steps, empty_row

PLAN = [
    dict(order=4, strategy="duplex", direction="h2d", size_bytes=4096, rep=1, warmup=False, copy=2),
    dict(order=5, strategy="duplex", direction="d2h", size_bytes=4096, rep=1, warmup=False, copy=2),
]


class FakeRun:
    def __init__(self):
        self.rows, self.clock = [], 0.0

    def elapsed(self):
        self.clock += 1.5
        return self.clock

    def write(self, row):
        self.rows.append(dict(row))


class FakeBar:
    def __init__(self):
        self.n = 0

    def update(self, n):
        self.n += n


def fake_timer(fn):
    return fn(), {"wall_ms": 2.5, "event_ms": 2.0}


def step(plan=PLAN, work=lambda: "result", **kw):
    run, bar = FakeRun(), FakeBar()
    failure = Steps(run, fake_timer, torch.device("cpu"), bar)(plan, work, **kw)
    return failure, run.rows, bar.n


def test_a_step_writes_one_row_per_planned_row_stamped_and_timed_once():
    seen = []
    failure, rows, moved = step(
        columns={"shape": "(4096,)"}, check=lambda res, out: seen.append((res, len(out)))
    )
    assert failure == "" and moved == 2 and seen == [("result", 2)]
    assert [r["order"] for r in rows] == [4, 5] and [r["direction"] for r in rows] == ["h2d", "d2h"]
    assert all(r["t_s"] == 1.5 and r["wall_ms"] == 2.5 and r["event_ms"] == 2.0 for r in rows)
    assert all(r["shape"] == "(4096,)" and r["error"] == "" and r["dtype"] == "uint8" for r in rows)
    assert "copy" not in rows[0]  # only the table's columns come from the plan


def test_columns_override_the_empty_row_and_keep_its_column_order():
    _, rows, _ = step(plan=PLAN[:1], columns={"shape": "64x3", "dtype": "float32"})
    base = list(empty_row(PLAN[0], 0.0))
    assert list(rows[0]) == [*base, "shape"]  # the table's columns in the order every run writes
    assert rows[0]["dtype"] == "float32" and math.isnan(rows[0]["host_allocs"])


def test_a_step_that_failed_before_is_written_with_its_error_and_not_run():
    ran, began = [], []
    failure, rows, moved = step(
        work=lambda: ran.append(1), error="OOM: earlier", before=lambda: began.append(1)
    )
    assert failure == "" and ran == [] and began == [] and moved == 2
    assert [r["error"] for r in rows] == ["OOM: earlier"] * 2 and all(math.isnan(r["wall_ms"]) for r in rows)


def test_before_runs_once_ahead_of_the_timed_work():
    calls = []
    step(work=lambda: calls.append("work"), before=lambda: calls.append("before"))
    assert calls == ["before", "work"]


def test_an_out_of_memory_error_is_kept_on_every_row_and_memory_released(monkeypatch):
    released = []
    monkeypatch.setattr(device_mod, "release_memory", lambda dev: released.append(dev))

    def oom():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    failure, rows, moved = step(work=oom)
    assert failure == "OOM: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert [r["error"] for r in rows] == [failure] * 2 and moved == 2 and released == [torch.device("cpu")]


def test_a_wrong_result_is_the_checks_to_set_and_a_check_that_raises_is_kept(monkeypatch):
    monkeypatch.setattr(device_mod, "release_memory", lambda dev: None)

    def wrong(res, out):
        out[1]["error"] = "wrong result: the copy differs from the source"

    failure, rows, _ = step(check=wrong)
    assert failure == "" and [r["error"] for r in rows] == [
        "",
        "wrong result: the copy differs from the source",
    ]

    def broken(res, out):
        raise RuntimeError("reading the result back failed")

    failure, rows, _ = step(check=broken)
    assert failure == "RuntimeError: reading the result back failed" and all(
        r["error"] == failure for r in rows
    )
    assert all(r["wall_ms"] == 2.5 for r in rows)  # the timing stays: the check failed, not the copy


def test_a_cuda_fault_writes_every_row_of_the_step_then_stops_the_run():
    run = FakeRun()

    def fault():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with pytest.raises(CudaFault, match="illegal memory access"):
        Steps(run, fake_timer, torch.device("cpu"))(PLAN, fault)
    assert [r["order"] for r in run.rows] == [4, 5]
    assert all(
        r["error"] == "RuntimeError: CUDA error: an illegal memory access was encountered" for r in run.rows
    )


def test_a_bug_in_the_timed_work_is_raised_and_writes_nothing():
    run = FakeRun()

    def bug():
        raise TypeError("not a tensor")

    with pytest.raises(TypeError):
        Steps(run, fake_timer, torch.device("cpu"))(PLAN, bug)
    assert run.rows == []
