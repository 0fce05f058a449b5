"""An interleaved sweep keeps each cell prepared across its rounds (issue #30): a round's
copy of a cell costs the copy and the timer's reads, not a new ``prepare``, a ``cleanup``
and a row write. Host copies on the CPU (``pageable``, and ``d2h_pageable``, whose
``prepare`` keeps a copy of the source); synthetic strategies where a failure or an
interrupt is needed. Nothing here is timed: calls are counted and rows compared.
"""

from __future__ import annotations

import gc
import itertools
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import torch

from h2dlab.measure import harness, strategies
from h2dlab.measure.plan import cells, plan_spec
from h2dlab.measure.recorder import StopFlag, partial_path
from h2dlab.measure.spec import SweepSpec
from h2dlab.recording import datasets

NAMES = ("pageable", "d2h_pageable")
SIZES = (1024, 4096, 16384)
REPS = 5


def _spec(order: str = "interleaved", **kw) -> SweepSpec:
    return SweepSpec(NAMES, SIZES, device="cpu", reps=REPS, warmup=1, order=order, seed=3, **kw)


@pytest.fixture
def calls(monkeypatch):
    """Count ``prepare`` and ``cleanup`` per (strategy, size) of every registered strategy."""
    seen = {"prepare": Counter(), "cleanup": Counter()}
    real_prepare, real_cleanup = {}, {}
    for name, cls in strategies.REGISTRY.items():
        real_prepare[name], real_cleanup[name] = cls.prepare, cls.cleanup

        def prepare(self, x, device, _name=name):
            self._counted = (_name, x.nbytes)
            seen["prepare"][self._counted] += 1
            return real_prepare[_name](self, x, device)

        def cleanup(self, _name=name):
            seen["cleanup"][getattr(self, "_counted", (_name, -1))] += 1
            return real_cleanup[_name](self)

        monkeypatch.setattr(cls, "prepare", prepare)
        monkeypatch.setattr(cls, "cleanup", cleanup)
    return seen


def _keys(df: pd.DataFrame) -> list[tuple]:
    return list(zip(df["strategy"], df["size_bytes"], df["rep"], df["warmup"], df["order"], strict=True))


def test_an_interleaved_sweep_prepares_each_cell_once_not_once_a_round(tmp_path, calls):
    spec = _spec()
    df = harness.sweep(spec, out=tmp_path / "i.csv", progress=False)
    cells_ = {(s, n) for s in NAMES for n in SIZES}
    # Before: 1 + REPS preparations per cell (the warm-up's visit, then one per round).
    assert calls["prepare"] == Counter(dict.fromkeys(cells_, 1))
    assert calls["cleanup"] == Counter(dict.fromkeys(cells_, 1))  # released once, at the end
    # The rows are those of the plan, in its order, with the table's schema and no error.
    planned = plan_spec(harness.resolve_spec(spec)[0])
    assert list(df.columns) == list(datasets.COLUMNS)
    assert _keys(df) == [(r["strategy"], r["size_bytes"], r["rep"], r["warmup"], r["order"]) for r in planned]
    assert (df["error"] == "").all() and np.isfinite(df["wall_ms"]).all()
    back = datasets.read(tmp_path / "i.csv")
    assert _keys(back) == _keys(df) and back.attrs["env"]["measured_rows"] == len(planned)


def test_the_same_sweep_shuffled_or_interleaved_gives_rows_of_one_schema_and_count(tmp_path, calls):
    shuffled = harness.sweep(_spec("shuffled"), out=tmp_path / "s.csv", progress=False)
    n_prepared = sum(calls["prepare"].values())
    interleaved = harness.sweep(_spec(), out=tmp_path / "i.csv", progress=False)
    assert n_prepared == len(NAMES) * len(SIZES)  # a shuffled sweep visits each cell once
    assert sum(calls["prepare"].values()) == 2 * n_prepared
    assert list(shuffled.columns) == list(interleaved.columns)
    assert len(shuffled) == len(interleaved) == len(NAMES) * len(SIZES) * (1 + REPS)
    for col in ("strategy", "size_bytes", "rep", "warmup", "direction", "shape", "dtype", "n_tensors"):
        a = shuffled.sort_values(["strategy", "size_bytes", "warmup", "rep"])[col].tolist()
        b = interleaved.sort_values(["strategy", "size_bytes", "warmup", "rep"])[col].tolist()
        assert a == b, col


def test_a_cell_over_the_hold_budget_is_prepared_at_each_visit_as_before(tmp_path, calls, monkeypatch):
    # d2h_pageable keeps a copy of the source (held_bytes = size): 1 KiB + 4 KiB fit in 6 KiB.
    monkeypatch.setattr(harness, "HOLD_BUDGET_BYTES", 6 * 1024)
    harness.sweep(_spec(), out=tmp_path / "b.csv", progress=False)
    p = calls["prepare"]
    assert p[("d2h_pageable", 1024)] == p[("d2h_pageable", 4096)] == 1
    assert p[("d2h_pageable", 16384)] == 1 + REPS  # its warm-up's visit, then every round
    assert all(p[("pageable", n)] == 1 for n in SIZES)  # keeps nothing: always held
    assert calls["cleanup"] == p


def test_hold_plan_smallest_first_within_the_budget_and_the_memory_left(monkeypatch):
    spec, dev = harness.resolve_spec(_spec())
    todo = cells(plan_spec(spec))
    every = {(s, n) for s in NAMES for n in SIZES}
    assert harness.hold_plan(todo, spec, dev) == every
    monkeypatch.setattr(harness, "HOLD_BUDGET_BYTES", 5 * 1024)
    assert harness.hold_plan(todo, spec, dev) == every - {("d2h_pageable", 16384)}
    # The memory left once the largest size fits bounds it too (the sweep's own check stays).
    monkeypatch.setattr(harness, "HOLD_BUDGET_BYTES", 2**30)
    monkeypatch.setattr(harness, "headroom_bytes", lambda n, dev: 1024.0)
    assert harness.hold_plan(todo, spec, dev) == every - {("d2h_pageable", 4096), ("d2h_pageable", 16384)}
    # Each cell visited once (reps back to back): nothing to hold.
    s2, _ = harness.resolve_spec(_spec("shuffled"))
    assert harness.hold_plan(cells(plan_spec(s2)), s2, dev) == set()
    # --empty-host-cache empties the cache at each visit's preparation: nothing held.
    s3, _ = harness.resolve_spec(_spec(empty_host_cache_each_size=True))
    assert harness.hold_plan(cells(plan_spec(s3)), s3, dev) == set()


def test_held_bytes_covers_what_prepare_keeps_on_the_cpu():
    """For every strategy that can be prepared here, the tensors it keeps after ``prepare``
    weigh at most ``held_bytes`` (host copies: a "device" tensor is a host tensor)."""
    cpu = torch.device("cpu")
    tried = 0
    for name in strategies.names(None):
        if strategies.available(name, cpu):
            continue
        for n in (1024, 65536):
            s = strategies.get(name)
            s.prepare(torch.zeros(n, dtype=torch.uint8), cpu)
            kept = sum(v.untyped_storage().nbytes() for v in vars(s).values() if isinstance(v, torch.Tensor))
            assert kept <= s.held_bytes(n), (name, n, kept)
            s.cleanup()
            tried += 1
    assert tried >= 4  # pageable, pageable_non_blocking, d2h_pageable at two sizes
    assert strategies.REGISTRY["d2h_pageable"].held_bytes(4096) == 4096
    assert strategies.REGISTRY["pinned_reuse"].held_bytes(4096) == 2 * 4096
    assert strategies.REGISTRY["d2h_staged"].held_bytes(64 * 2**20) == 64 * 2**20 + 2 * 8 * 2**20


class _Flaky(strategies.Strategy):
    """Synthetic: a host copy that fails with a chosen error on chosen calls (counted over
    every instance) and counts its preparations."""

    name = "flaky_test_only"
    needs_cuda = False
    allocates = False
    calls = 0
    prepared = 0
    fail_on: dict = {}

    def prepare(self, x, device):
        super().prepare(x, device)
        type(self).prepared += 1

    def copy(self, x):
        type(self).calls += 1
        exc = type(self).fail_on.get(type(self).calls)
        if exc is not None:
            raise exc
        return x.clone()


@pytest.fixture
def flaky(monkeypatch):
    monkeypatch.setitem(strategies.REGISTRY, _Flaky.name, _Flaky)
    _Flaky.calls = _Flaky.prepared = 0
    _Flaky.fail_on = {}
    return _Flaky


def _flaky_spec(reps: int = 4) -> SweepSpec:
    return SweepSpec(
        (_Flaky.name,), (1024, 2048), device="cpu", reps=reps, warmup=0, order="interleaved", seed=0
    )


def test_an_oom_in_a_held_cell_fails_its_row_only_and_the_next_round_prepares_it_again(tmp_path, flaky):
    """As when each round prepared its cells: the failing copy is a row with its error, the
    cell's next visit is prepared anew and measured."""
    flaky.fail_on = {3: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")}
    df = harness.sweep(_flaky_spec(), out=tmp_path / "o.csv", progress=False)
    assert len(df) == 8
    failed = df[df["error"] != ""]
    assert len(failed) == 1 and failed["error"].iloc[0].startswith("OOM: CUDA out of memory")
    assert failed["order"].iloc[0] == 2 and np.isnan(failed["wall_ms"].iloc[0])
    key = failed["size_bytes"].iloc[0]
    later = df[(df["size_bytes"] == key) & (df["order"] > 2)]
    assert len(later) >= 1 and (later["error"] == "").all() and np.isfinite(later["wall_ms"]).all()
    # two cells prepared once, and the failed one once more for each of its later visits
    assert flaky.prepared == 2 + len(later)


def test_an_interrupt_in_an_interleaved_sweep_keeps_every_row_measured_and_resumes(tmp_path, flaky):
    """A second Ctrl-C (``KeyboardInterrupt``) inside a copy: the rows measured before it,
    held back to keep host work out of the gaps, are on disk, in plan order."""
    flaky.fail_on = {6: KeyboardInterrupt()}
    out = tmp_path / "k.csv"
    with pytest.raises(KeyboardInterrupt) as info:
        harness.sweep(_flaky_spec(), out=out, progress=False)
    kept = datasets.read(partial_path(out))
    assert kept["order"].tolist() == [0, 1, 2, 3, 4]
    assert (kept["error"] == "").all() and np.isfinite(kept["wall_ms"]).all()
    # The interrupt's traceback holds the run's partial file open and locked (a process
    # ended by it would not): let it go before resuming in this process.
    del info
    flaky.fail_on = {}
    gc.collect()
    done = harness.sweep(_flaky_spec(), out=out, resume=True, progress=False)
    assert done["order"].tolist() == list(range(8)) and done["run_id"].nunique() == 1


def test_a_stop_in_an_interleaved_round_keeps_every_row_measured(tmp_path, flaky, monkeypatch):
    stop = StopFlag()
    real = _Flaky.copy

    def copy(self, x):
        if type(self).calls == 4:  # the fifth copy is in flight when the stop comes
            stop.request()
        return real(self, x)

    monkeypatch.setattr(_Flaky, "copy", copy)
    df = harness.sweep(_flaky_spec(), out=tmp_path / "s.csv", progress=False, stop=stop)
    assert df.attrs["stopped"] and df["order"].tolist() == [0, 1, 2, 3, 4]
    assert datasets.read(tmp_path / "s.csv")["order"].tolist() == [0, 1, 2, 3, 4]


def test_rows_waiting_flush_after_s_are_written_before_the_next_copy(tmp_path, flaky, monkeypatch):
    """FLUSH_AFTER_S bounds what a process killed outright (no ``finally``) can lose: at 0,
    every row is on disk before the next copy starts."""
    monkeypatch.setattr(harness, "FLUSH_AFTER_S", 0.0)
    out = tmp_path / "f.csv"
    on_disk = []
    real = _Flaky.copy

    def copy(self, x):
        on_disk.append(len(partial_path(out).read_text().splitlines()) - 1)
        return real(self, x)

    monkeypatch.setattr(_Flaky, "copy", copy)
    harness.sweep(_flaky_spec(), out=out, progress=False)
    assert on_disk == list(range(8))


def test_once_every_cell_is_prepared_the_rounds_rows_wait_until_the_sweep_ends(tmp_path, flaky, monkeypatch):
    """Rows are written where host work happens anyway (before a cell's first preparation),
    not between two copies of the rounds that follow."""
    monkeypatch.setattr(harness, "FLUSH_AFTER_S", 3600.0)
    out = tmp_path / "w.csv"
    on_disk = []
    real = _Flaky.copy

    def copy(self, x):
        on_disk.append(len(partial_path(out).read_text().splitlines()) - 1)
        return real(self, x)

    monkeypatch.setattr(_Flaky, "copy", copy)
    ticks = itertools.count(0.0, 1e-6)  # a copy reads 1 us: never a slow cell, whatever the load
    df = harness.sweep(_flaky_spec(), out=out, progress=False, clock=lambda: next(ticks))
    assert (
        on_disk == [0] + [1] * 7 and len(df) == 8
    )  # the first row, written before the second cell was prepared


def test_headroom_is_what_is_left_once_the_largest_size_fits(monkeypatch):
    from h2dlab.measure import device

    cpu = torch.device("cpu")
    monkeypatch.setattr(device, "mem_available_bytes", lambda: 10 * 1024)
    assert device.headroom_bytes(4096, cpu) == 2048  # source and a staging copy of 4 KiB
    assert device.headroom_bytes(8192, cpu) == 0  # never below 0 (check_memory refuses that size)
    monkeypatch.setattr(device, "mem_available_bytes", lambda: None)
    assert device.headroom_bytes(4096, cpu) == float("inf")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev=None: (5000, 10**6))
    assert device.headroom_bytes(1000, torch.device("cuda", 0)) == 4000  # the device's free memory too


def test_an_interrupt_while_waiting_rows_are_written_keeps_each_row_once(tmp_path, monkeypatch):
    """A second Ctrl-C can land in the middle of writing the rows that waited: those not yet
    written are written by the sweep's ``finally``, none is lost and none is written twice."""
    from h2dlab.measure import recorder

    real, n = recorder.RowWriter.write, {"calls": 0}

    def write(self, row, flush=True):
        n["calls"] += 1
        if n["calls"] == 2:  # the second of the first cell's three rows
            raise KeyboardInterrupt
        return real(self, row, flush)

    monkeypatch.setattr(recorder.RowWriter, "write", write)
    out = tmp_path / "w.csv"
    spec = SweepSpec(("pageable",), (1024, 4096), device="cpu", reps=3, warmup=0, order="ascending")
    with pytest.raises(KeyboardInterrupt):
        harness.sweep(spec, out=out, progress=False)
    assert datasets.read(partial_path(out))["order"].tolist() == [0, 1, 2]
