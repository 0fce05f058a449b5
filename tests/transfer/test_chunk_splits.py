"""How finely a staged copy's first chunk and last wave are cut (head_split, tail_split): the
chunk plan with each split (by hypothesis), the checks of the two settings in a Stager and in
fastpath.json (older files keep the old 4/4), and a copy with each split run for real against
a fake CUDA, its bytes and chunks compared."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.transfer import fastpath as transfer
from h2dlab.transfer import stager
from tests.transfer.test_transfer import fake_cuda, made_stagers  # noqa: F401 - the fixtures

KiB, MiB, GiB = 1024, 1024**2, 1024**3
SPLIT_PAIRS = list(itertools.product(stager.SPLITS, repeat=2))


def _sizes(bounds):
    return [b - a for a, b in zip(bounds, bounds[1:], strict=False)]


@pytest.mark.parametrize(
    ("head", "tail", "sizes"),
    [  # 256 MiB on one thread with 32 MiB slots: the shipped shape (torch engine)
        (4, 4, [8 * MiB] * 4 + [32 * MiB] * 6 + [8 * MiB] * 4),  # before these settings: the same plan
        (4, 2, [8 * MiB] * 4 + [32 * MiB] * 6 + [16 * MiB] * 2),
        (4, 1, [8 * MiB] * 4 + [32 * MiB] * 7),  # a small first chunk, then whole slots
        (2, 1, [16 * MiB] * 2 + [32 * MiB] * 7),
        (1, 2, [32 * MiB] * 7 + [16 * MiB] * 2),
        (1, 1, [32 * MiB] * 8),  # whole slots only
    ],
)
def test_chunk_plan_with_each_split(head, tail, sizes):
    assert _sizes(stager.chunk_plan(256 * MiB, 1, 32 * MiB, head_split=head, tail_split=tail)) == sizes


def test_default_splits_are_the_old_plan():
    for n, t, c in ((256 * MiB, 16, 16 * MiB), (GiB + 5, 3, 32 * MiB), (5 * MiB, 1, 4 * MiB + 4 * KiB)):
        assert stager.chunk_plan(n, t, c) == stager.chunk_plan(n, t, c, head_split=4, tail_split=4)
    assert stager.TAIL_SPLIT == 4 and stager.SPLITS == (1, 2, 4)


@settings(max_examples=300, deadline=None)
@given(
    nbytes=st.integers(1, 2**33),
    threads=st.integers(1, 64),
    chunk=st.integers(1, 64 * 1024).map(lambda p: p * 4 * KiB),  # slots in whole pages
    min_step=st.sampled_from([4 * KiB, 64 * KiB, MiB, 3 * MiB + 5, 8 * MiB]),
    splits=st.sampled_from(SPLIT_PAIRS),
)
def test_chunk_plan_properties_with_each_split(nbytes, threads, chunk, min_step, splits):
    head, tail = splits
    if nbytes // min(chunk, min_step) > 400_000:
        return  # a plan of millions of chunks says nothing more and costs seconds
    b = stager.chunk_plan(nbytes, threads, chunk, min_step, head_split=head, tail_split=tail)
    sizes = _sizes(b)
    assert b[0] == 0 and b[-1] == nbytes
    assert all(n > 0 for n in sizes)  # strictly increasing: no empty chunk
    assert all(x % (4 * KiB) == 0 for x in b[:-1])  # every chunk starts on a page
    assert max(sizes) <= chunk  # each fits its slot
    # No piece below the smallest chunk asked for (or the slot, if smaller), but the last
    assert all(n >= min(min_step, chunk) for n in sizes[:-1])
    # Whole chunks when both splits are 1: the plain plan, one slot-sized step after another
    if (head, tail) == (1, 1):
        step = sizes[0]
        assert all(n == step for n in sizes[:-1]) and sizes[-1] <= step


@settings(max_examples=100, deadline=None)
@given(extra=st.integers(0, 2**31), threads=st.integers(1, 16), splits=st.sampled_from(SPLIT_PAIRS))
def test_finer_splits_only_cut_the_ends(extra, threads, splits):
    # Copies of >= 4 slots per thread (steps of a whole 32 MiB slot): the middle is the same
    # whole chunks whatever the splits, only the first chunk and the last wave are cut, so
    # every boundary of the whole-chunk plan is still one.
    nbytes = threads * 4 * 32 * MiB + extra
    whole = stager.chunk_plan(nbytes, threads, 32 * MiB, head_split=1, tail_split=1)
    cut = stager.chunk_plan(nbytes, threads, 32 * MiB, head_split=splits[0], tail_split=splits[1])
    assert set(whole) <= set(cut)
    assert len(cut) - len(whole) <= (splits[0] - 1) + (threads + 1) * (splits[1] - 1)
    head, tail = splits
    assert _sizes(cut)[0] == 32 * MiB // head
    assert _sizes(cut)[-threads * tail - 1 :].count(32 * MiB // tail) >= threads * tail - 1


@pytest.mark.parametrize(
    ("value", "exc", "msg"),
    [
        (3, ValueError, "tail_split must be 1, 2 or 4, got 3"),
        (0, ValueError, "tail_split must be 1, 2 or 4, got 0"),
        (8, ValueError, "tail_split must be 1, 2 or 4, got 8"),
        (2.0, TypeError, "tail_split must be an integer"),
        (True, TypeError, "tail_split must be an integer"),
        ("4", TypeError, "tail_split must be an integer"),
    ],
)
def test_bad_split_is_refused_in_one_line(value, exc, msg):
    with pytest.raises(exc, match=msg) as info:
        stager.chunk_plan(MiB, 1, MiB, tail_split=value)
    assert "\n" not in str(info.value)
    with pytest.raises(exc, match=msg.replace("tail", "head")):
        stager.chunk_plan(0, 1, MiB, head_split=value)  # checked even for an empty copy
    with pytest.raises(exc, match=msg):
        stager.Stager("cuda", tail_split=value)  # before CUDA is touched (none here)


# --- fastpath.json -----------------------------------------------------------------------


def _fp(**kw):
    return {"format": 1, "min_bytes": 64 * MiB, "threads": 1, "chunk_bytes": 8 * MiB, "measured_on": {}, **kw}


def test_fastpath_splits_default_to_the_old_cut_for_older_files():
    old = transfer.read_fastpath(_fp())
    assert (old["head_split"], old["tail_split"]) == (4, 4)
    new = transfer.read_fastpath(_fp(head_split=2, tail_split=1))
    assert (new["head_split"], new["tail_split"]) == (2, 1)


@pytest.mark.parametrize(
    ("bad", "msg"),
    [
        ({"tail_split": 3}, "the given settings: tail_split must be 1, 2 or 4, got 3"),
        ({"head_split": 16}, "the given settings: head_split must be 1, 2 or 4, got 16"),
        ({"tail_split": "1"}, "the given settings: tail_split must be an integer"),
        ({"head_split": None}, "the given settings: head_split must be an integer"),
    ],
)
def test_fastpath_refuses_bad_splits_in_one_line(bad, msg):
    with pytest.raises(ValueError, match=msg) as info:
        transfer.read_fastpath(_fp(**bad))
    assert "\n" not in str(info.value)


# --- a copy with each split, run for real against a fake CUDA -----------------------------


@pytest.mark.parametrize(("head", "tail"), SPLIT_PAIRS)
@pytest.mark.parametrize("engine", ["numpy", "torch"])
def test_stager_copies_every_byte_with_each_split(fake_cuda, head, tail, engine):  # noqa: F811
    x = torch.arange(3 * MiB // 4 + 5, dtype=torch.int32)  # 3 MiB + 20 bytes
    kw = {"threads": 2, "chunk_bytes": 256 * KiB, "min_step_bytes": 16 * KiB, "head_split": head}
    s = stager.Stager("cuda", engine=engine, tail_split=tail, **kw)
    s.device = torch.device("cpu")  # results land on the CPU: the loop is what is tested
    with s:
        assert f"splits={head}/{tail}" in repr(s)
        s.timeline = []
        assert torch.equal(s(x), x)
        got = sorted((c["offset"], c["bytes"]) for c in s.timeline[0]["chunks"])
    want = stager.chunk_plan(x.nbytes, 2, 256 * KiB, 16 * KiB, head_split=head, tail_split=tail)
    assert got == [(a, b - a) for a, b in zip(want, want[1:], strict=False)]


def test_to_device_rebuilds_the_ring_when_the_splits_change(made_stagers):  # noqa: F811
    made = made_stagers
    x = torch.arange(300_000.0)
    base = {
        "min_bytes": 0,
        "threads": 1,
        "chunk_bytes": 64 * KiB,
        "engine": "torch",
        "min_step_bytes": 4 * KiB,
    }
    prev = transfer.use_fastpath(_fp(**base))
    try:
        assert torch.equal(transfer.to_device(x, "cuda"), x)
        assert (made[-1].head_split, made[-1].tail_split) == (4, 4)
        transfer.use_fastpath(_fp(**base, head_split=4, tail_split=1))
        assert torch.equal(transfer.to_device(x, "cuda"), x)
        assert len(made) == 2 and made[0].closed and (made[1].head_split, made[1].tail_split) == (4, 1)
        assert transfer.fastpath()["tail_split"] == 1
    finally:
        transfer.use_fastpath(prev)
        transfer.free_ring()
