"""A plan per copy size (issue 34): fastpath.json's optional schedule is read and checked,
to_device runs the band a size falls in on one ring that fits every band, the Stager runs
other plans on its ring byte for byte (draining in-flight DMAs when the slot layout changes),
chunk_plan's waves, and the benchmark's choice of a schedule from synthetic timings."""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.transfer import fastpath as transfer
from h2dlab.transfer import stager
from tests.conftest import ROOT
from tests.fake_cuda import FakeStream
from tests.transfer.test_transfer import _cpu_stager, _fp, fake_cuda, made_stagers  # noqa: F401 - fixtures

KiB, MiB, GiB = 1024, 1024**2, 1024**3
KEYS = stager.PLAN_KEYS


def _sizes(bounds):
    return [b - a for a, b in zip(bounds, bounds[1:], strict=False)]


@pytest.fixture
def ana():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(
        "bench_analysis_s", ROOT / "benchmarks" / "bench_analysis.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- chunk_plan's waves -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("waves", "head", "sizes"),
    [  # 16 MiB on one thread with 16 MiB slots and 1 MiB smallest chunks
        (4, 1, [4 * MiB] * 4),  # the old plan's chunks, whole
        (4, 4, [MiB] * 4 + [4 * MiB] * 3),  # a small first chunk, then whole chunks
        (2, 1, [8 * MiB] * 2),
        (1, 1, [16 * MiB]),  # one chunk: no overlap at all
        (8, 1, [2 * MiB] * 8),
    ],
)
def test_waves_set_how_many_chunks_a_thread_gets(waves, head, sizes):
    got = stager.chunk_plan(16 * MiB, 1, 16 * MiB, MiB, head_split=head, tail_split=1, waves=waves)
    assert _sizes(got) == sizes


def test_the_shipped_plan_cut_16_MiB_into_ten_chunks():
    # The settings of the 2026-11-30 run (1 thread, 16 MiB slots, 1 MiB, splits 4/4, 4 waves):
    # ten chunks, eight of them 1 MiB, each paying its DMA issue (46 us traced at 256 MiB).
    sizes = _sizes(stager.chunk_plan(16 * MiB, 1, 16 * MiB, MiB))
    assert sizes == [MiB] * 4 + [4 * MiB] * 2 + [MiB] * 4


@settings(max_examples=200, deadline=None)
@given(
    nbytes=st.integers(1, 2**32),
    threads=st.integers(1, 32),
    chunk=st.integers(1, 16 * 1024).map(lambda p: p * 4 * KiB),
    waves=st.integers(1, stager.MAX_WAVES),
    splits=st.sampled_from([(1, 1), (4, 1), (4, 4), (2, 2)]),
)
def test_chunk_plan_with_any_waves_tiles_the_copy(nbytes, threads, chunk, waves, splits):
    if nbytes // min(chunk, MiB) > 100_000:
        return  # millions of chunks say nothing more
    b = stager.chunk_plan(
        nbytes, threads, chunk, MiB, head_split=splits[0], tail_split=splits[1], waves=waves
    )
    sizes = _sizes(b)
    assert b[0] == 0 and b[-1] == nbytes and all(s > 0 for s in sizes) and max(sizes) <= chunk
    fewer = stager.chunk_plan(nbytes, threads, chunk, MiB, head_split=1, tail_split=1, waves=waves)
    more = stager.chunk_plan(
        nbytes, threads, chunk, MiB, head_split=1, tail_split=1, waves=min(64, 2 * waves)
    )
    assert len(fewer) <= len(more)  # more waves never mean fewer chunks


@pytest.mark.parametrize(
    ("bad", "exc"), [(0, ValueError), (65, ValueError), (2.0, TypeError), (True, TypeError)]
)
def test_bad_waves_are_refused(bad, exc):
    with pytest.raises(exc, match="waves must be"):
        stager.chunk_plan(MiB, 1, MiB, waves=bad)


# --- the ring that runs every plan ---------------------------------------------------------------


plans = st.lists(
    st.fixed_dictionaries(
        {"threads": st.integers(1, 32), "chunk_bytes": st.integers(1, 4096).map(lambda p: p * 4 * KiB)}
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(plans=plans)
def test_ring_shape_fits_every_plan_and_no_smaller_ring_does(plans):
    threads, chunk = stager.ring_shape(plans)
    assert threads == max(p["threads"] for p in plans) and chunk % (4 * KiB) == 0
    assert all(stager.fits(p, threads, chunk) for p in plans)
    if chunk > 4 * KiB:  # a page less per slot and the largest plan no longer fits
        assert not all(stager.fits(p, threads, chunk - 4 * KiB) for p in plans)


# --- fastpath.json's schedule ----------------------------------------------------------------------


def test_a_file_without_schedule_runs_one_plan_at_every_size():
    s = transfer.read_fastpath(_fp(engine="torch"))
    assert s["schedule"] == [] and s["waves"] == stager.WAVES


def test_schedule_bands_are_read_whole_with_the_top_level_for_missing_keys():
    s = transfer.read_fastpath(
        _fp(
            engine="torch",
            slots=3,
            schedule=[
                {"below_bytes": 8 * MiB, "waves": 1},
                {"below_bytes": 64 * MiB, "threads": 1, "chunk_bytes": 4 * MiB},
            ],
        )  # fmt: skip
    )
    top = {k: s[k] for k in KEYS}
    assert s["schedule"] == [
        {"below_bytes": 8 * MiB, **{**top, "waves": 1}},
        {"below_bytes": 64 * MiB, **{**top, "chunk_bytes": 4 * MiB}},
    ]


@pytest.mark.parametrize(
    ("schedule", "msg"),
    [
        ({"below_bytes": MiB}, "schedule must be a list"),
        ([[MiB]], r"schedule\[0\] must be an object"),
        ([{"threads": 2}], r"schedule\[0\] has no 'below_bytes'"),
        ([{"below_bytes": 0}], r"schedule\[0\].below_bytes must be between"),
        ([{"below_bytes": 4 * MiB}, {"below_bytes": 4 * MiB}], "must be above the band before it"),
        ([{"below_bytes": MiB, "slots": 3}], "unknown keys"),
        ([{"below_bytes": MiB, "engine": "cuda"}], "engine must be one of"),
        ([{"below_bytes": MiB, "waves": 0}], "waves must be between"),
        ([{"below_bytes": MiB, "chunk_bytes": 10}], r"schedule\[0\].chunk_bytes must be between"),
        ([{"below_bytes": MiB, "head_split": 3}], "must be 1, 2 or 4"),
    ],
)
def test_bad_schedules_are_refused_with_the_band_named(schedule, msg):
    with pytest.raises(ValueError, match=msg):
        transfer.read_fastpath(_fp(schedule=schedule))


band = st.fixed_dictionaries(
    {"below_bytes": st.integers(-5, 2**40)},
    optional={
        "threads": st.one_of(st.integers(-1, 300), st.just("2")),
        "chunk_bytes": st.integers(0, 2 * GiB),
        "engine": st.sampled_from(["numpy", "torch", "gpu"]),
        "waves": st.integers(-1, 70),
        "tail_split": st.sampled_from([1, 2, 3, 4]),
    },
)


@settings(max_examples=300, deadline=None)
@given(bands=st.lists(band, max_size=5))
def test_any_schedule_is_read_whole_or_refused_with_a_value_error(bands):
    try:
        s = transfer.read_fastpath(_fp(schedule=bands))
    except ValueError as exc:
        assert "Traceback" not in str(exc) and str(exc)
        return
    got = s["schedule"]
    assert [b["below_bytes"] for b in got] == [b["below_bytes"] for b in bands]
    assert all(
        x < y
        for x, y in zip([b["below_bytes"] for b in got], [b["below_bytes"] for b in got][1:], strict=False)
    )
    cores = len(os.sched_getaffinity(0))
    assert all(set(b) == {"below_bytes", *KEYS} and 1 <= b["threads"] <= cores for b in got)
    assert all(b["engine"] in stager.ENGINES and 1 <= b["waves"] <= stager.MAX_WAVES for b in got)


# --- to_device runs the band of its size, on one ring ------------------------------------------


SCHEDULE = [  # synthetic settings: three plans by size on one ring
    {
        "below_bytes": 64 * KiB,
        "threads": 1,
        "chunk_bytes": 16 * KiB,
        "waves": 1,
        "head_split": 1,
        "tail_split": 1,
    },
    {"below_bytes": 512 * KiB, "threads": 2, "chunk_bytes": 8 * KiB, "engine": "numpy", "waves": 2},
]


def test_to_device_runs_the_plan_of_its_size_on_one_ring(made_stagers):  # noqa: F811
    prev = transfer.use_fastpath(_fp(min_bytes=0, threads=1, chunk_bytes=32 * KiB, engine="torch", slots=2,
                                     schedule=SCHEDULE))  # fmt: skip
    try:
        g = torch.Generator().manual_seed(3)
        xs = [
            torch.randint(0, 255, (n,), dtype=torch.uint8, generator=g)
            for n in (40 * KiB + 3, 300 * KiB, 2 * MiB)
        ]
        for x in xs:
            assert torch.equal(transfer.to_device(x, "cuda"), x)
        (ring,) = made_stagers  # one ring for all three plans, kept
        # 2 threads (the most a band uses); 16 KiB slots hold the top plan's 1 x 32 KiB over 2
        assert (ring.threads, ring.chunk_bytes) == (2, 16 * KiB)
        assert transfer.ring_bytes() == ring.nbytes == 2 * 2 * 16 * KiB
        ring.timeline = []
        for x in xs:
            assert torch.equal(transfer.to_device(x, "cuda"), x)
        plans = [t["plan"] for t in ring.timeline]
        assert [p["threads"] for p in plans] == [1, 2, 1]
        assert [p["engine"] for p in plans] == ["torch", "numpy", "torch"]
        assert plans[0] == transfer.plan_for(40 * KiB) and plans[2] == transfer.plan_for(2 * MiB)
        assert plans[2]["chunk_bytes"] == 32 * KiB and plans[2]["waves"] == stager.WAVES  # the top plan
        assert [len(t["chunks"]) for t in ring.timeline[:1]] == [3]  # 40 KiB in 16 KiB slots, one wave
        assert max(c["bytes"] for c in ring.timeline[1]["chunks"]) <= 8 * KiB
        assert {c["thread"] for c in ring.timeline[1]["chunks"]} <= {0, 1}
        assert len(made_stagers) == 1  # sizes changed plans, never the ring
    finally:
        transfer.use_fastpath(prev)
        transfer.free_ring()


def test_explicit_threads_and_slots_still_run_one_plan_at_every_size(made_stagers):  # noqa: F811
    prev = transfer.use_fastpath(_fp(min_bytes=0, threads=1, chunk_bytes=32 * KiB, engine="torch",
                                     schedule=SCHEDULE))  # fmt: skip
    try:
        x = torch.arange(10_000, dtype=torch.int32)
        assert torch.equal(transfer.to_device(x, "cuda", num_threads=2, chunk_bytes=8 * KiB), x)
        ring = made_stagers[-1]
        assert (ring.threads, ring.chunk_bytes) == (2, 8 * KiB)
        ring.timeline = []
        transfer.to_device(x, "cuda", num_threads=2, chunk_bytes=8 * KiB)
        assert ring.timeline[0]["plan"]["threads"] == 2 and ring.timeline[0]["plan"]["engine"] == "torch"
    finally:
        transfer.use_fastpath(prev)
        transfer.free_ring()


# --- the Stager runs other plans on its ring ---------------------------------------------------


def test_plans_on_one_ring_copy_every_byte_and_drain_only_after_non_blocking(fake_cuda, monkeypatch):  # noqa: F811
    drains = []
    monkeypatch.setattr(FakeStream, "synchronize", lambda self: drains.append(self))
    g = torch.Generator().manual_seed(5)
    x = torch.randn(50_000, generator=g)  # 200,000 bytes
    a = {"threads": 4, "chunk_bytes": 8 * KiB, "engine": "numpy"}
    b = {"threads": 1, "chunk_bytes": 32 * KiB, "engine": "torch", "waves": 1, "head_split": 1}
    with _cpu_stager(threads=4, chunk_bytes=8 * KiB, slots=3) as s:
        assert s.plan(b)["min_step_bytes"] == s.min_step_bytes  # the ring's own where not given
        ring = set(map(id, s._streams))
        seen = []
        for plan, nb in ((a, False), (b, False), (a, True), (a, True), (b, True), (b, False), (a, False)):
            before = len(drains)
            y = s.to_device(x[::2] if nb else x, plan=plan, non_blocking=nb)
            assert torch.equal(y, x[::2] if nb else x)
            seen.append(sum(id(d) in ring for d in drains[before:]))
        # A blocking call ends by waiting for the streams it used (4 for a, 1 for b), for all
        # of them after a non_blocking call (the 6th: b uses one, the others may still run a's
        # DMAs); a non_blocking one waits for none, except where the layout changed after a
        # non_blocking call (the 5th): then every stream is drained first.
        assert seen == [4, 1, 0, 0, 4, 4, 4]
    assert fake_cuda.registered == {}


@pytest.mark.parametrize(
    ("plan", "exc", "msg"),
    [
        ({"threads": 5}, ValueError, "threads must be between 1 and 4"),
        ({"threads": 1, "chunk_bytes": 16 * KiB + 4 * KiB}, ValueError, "does not fit this ring"),
        ({"engine": "cuda"}, ValueError, "engine must be one of"),
        ({"waves": 0}, ValueError, "waves must be between"),
        ({"slots": 3}, TypeError, "a plan is a dict of"),
        ([("threads", 1)], TypeError, "a plan is a dict of"),
    ],
)
def test_a_plan_that_does_not_fit_the_ring_is_refused_before_any_copy(fake_cuda, monkeypatch, plan, exc, msg):  # noqa: F811
    copies = []
    monkeypatch.setattr(np, "copyto", lambda d, s: copies.append(1))
    with _cpu_stager(threads=4, chunk_bytes=4 * KiB) as s:  # 4 x 4 KiB a slot row
        with pytest.raises(exc, match=msg):
            s.to_device(torch.ones(10_000), plan=plan)
        assert s.plan({"threads": 1, "chunk_bytes": 16 * KiB})["chunk_bytes"] == 16 * KiB  # 1 x 16 fits 4 x 4
    assert copies == []


# --- the benchmark's choice, on synthetic timings ----------------------------------------------


TOP = {"threads": 1, "chunk_bytes": 16 * MiB, "engine": "torch", "slots": 3, "min_step_bytes": MiB,
       "head_split": 4, "tail_split": 4, "huge_pages": False}  # fmt: skip


def _row(n, plan, ms):  # synthetic
    return {"size_bytes": n, "plan": {**{k: TOP.get(k, stager.WAVES) for k in KEYS}, **plan}, "ms_median": ms}


def test_choose_schedule_keeps_the_fastest_plan_per_size_and_merges_neighbours(ana):
    few = {"waves": 1, "head_split": 1, "tail_split": 1}
    threaded = {"engine": "numpy", "threads": 2, "chunk_bytes": 8 * MiB, "waves": 2}  # 2: CI has 2 cores
    rows = [
        _row(4 * MiB, {}, 0.30), _row(4 * MiB, few, 0.20), _row(4 * MiB, threaded, 0.25),
        _row(8 * MiB, {}, 0.60), _row(8 * MiB, few, 0.40), _row(8 * MiB, threaded, 0.45),
        _row(16 * MiB, {}, 1.00), _row(16 * MiB, few, 0.80), _row(16 * MiB, threaded, 0.55),
        _row(32 * MiB, {}, 1.00), _row(32 * MiB, few, 0.99), _row(32 * MiB, threaded, 1.2),  # within 2 %: top
        _row(64 * MiB, {}, 2.00), _row(64 * MiB, few, 2.5), _row(64 * MiB, threaded, 1.5),
        _row(128 * MiB, {}, 3.00), _row(128 * MiB, few, 3.5), _row(128 * MiB, threaded, 4.0),
    ]  # fmt: skip
    bands = ana.choose_schedule(rows, TOP)
    plan = lambda b: {k: b[k] for k in KEYS}  # noqa: E731
    assert [b["below_bytes"] for b in bands] == [16 * MiB, 32 * MiB, 64 * MiB, 128 * MiB]
    assert plan(bands[0]) == _row(0, few, 0)["plan"]  # 4 and 8 MiB merged
    assert plan(bands[1]) == _row(0, threaded, 0)["plan"]
    assert plan(bands[2]) == _row(0, {}, 0)["plan"]  # top kept inside: 64 MiB's band follows
    assert plan(bands[3]) == _row(0, threaded, 0)["plan"]  # 128 MiB runs top: no band at the end
    # read back as fastpath.json's schedule, each size runs the plan chosen for it
    s = transfer.read_fastpath({**_fp(**{k: TOP[k] for k in KEYS if k in TOP}), "schedule": bands})
    prev = transfer.use_fastpath(s)
    try:
        for n, want in ((MiB, few), (8 * MiB, few), (16 * MiB, threaded), (40 * MiB, {}), (100 * MiB, threaded),
                        (128 * MiB, {}), (GiB, {})):  # fmt: skip
            assert transfer.plan_for(n) == _row(0, want, 0)["plan"], n
    finally:
        transfer.use_fastpath(prev)


def test_choose_schedule_is_empty_where_the_tuned_plan_wins_everywhere(ana):
    rows = [_row(n, {}, 1.0) for n in (2 * MiB, 4 * MiB)] + [
        _row(n, {"waves": 2}, 1.01) for n in (2 * MiB, 4 * MiB)
    ]
    assert ana.choose_schedule(rows, TOP) == []


@pytest.mark.parametrize("cores", [1, 2, 16, 64])
def test_plan_candidates_start_with_the_tuned_plan_and_need_no_larger_ring(ana, cores):
    cands = ana.plan_candidates(TOP, cores)
    assert cands[0] == {k: ana.cfg_of(TOP)[k] for k in KEYS}
    assert len({tuple(p[k] for k in KEYS) for p in cands}) == len(cands)
    assert all(p["threads"] <= max(cores, 1) and set(p) == set(KEYS) for p in cands)
    assert (
        stager.ring_shape(cands)[0] * stager.ring_shape(cands)[1]
        <= TOP["threads"] * TOP["chunk_bytes"] * 1.01
    )
    assert any(p["waves"] == 1 for p in cands) and any(
        p["head_split"] == 4 and p["tail_split"] == 1 for p in cands
    )


@pytest.mark.parametrize(
    "content",
    [
        b'{"format": 1, "schedule": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # nested past the parser
        b'\xff\xfe{"format": 1}',  # not UTF-8
    ],
)
def test_a_fastpath_json_that_cannot_be_parsed_is_the_documented_value_error(tmp_path, content):
    p = tmp_path / "fastpath.json"
    p.write_bytes(content)
    with pytest.raises(ValueError, match="cannot read fast-path settings"):
        transfer.read_fastpath(p)
