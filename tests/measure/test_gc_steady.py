"""The measuring loops keep Python's collector from walking the whole heap between copies
(``gc_steady.steady_gc``): objects made before the loop are frozen while it runs and
handed back after it."""

from __future__ import annotations

import gc

import pytest

from h2dlab.measure import timing
from h2dlab.measure.batch import BatchSpec, batch
from h2dlab.measure.gc_steady import steady_gc
from h2dlab.measure.harness import sweep
from h2dlab.measure.spec import SweepSpec


class _Marker:
    """An object made before a block, to see whether the collector still walks it."""


def _tracked(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects())  # the permanent generation is not listed


def test_objects_from_before_are_frozen_inside_and_handed_back_after():
    before = _Marker()
    assert gc.get_freeze_count() == 0 and _tracked(before)
    with steady_gc():
        inside = _Marker()
        assert gc.get_freeze_count() > 0
        assert not _tracked(before)  # a full collection no longer walks it
        assert _tracked(inside)  # what the loop makes is collected as usual
        gc.collect()
        assert not _tracked(before)
    assert gc.get_freeze_count() == 0 and _tracked(before) and _tracked(inside)


def test_an_error_inside_still_hands_objects_back():
    before = _Marker()
    with pytest.raises(KeyError), steady_gc():
        raise KeyError("x")
    assert gc.get_freeze_count() == 0 and _tracked(before)


def test_nested_blocks_leave_it_to_the_outermost_and_a_freeze_from_outside_stays():
    with steady_gc():
        frozen = gc.get_freeze_count()
        inner_made = _Marker()
        with steady_gc():
            assert not _tracked(inner_made)  # the inner block froze what the outer made since
        assert gc.get_freeze_count() > frozen  # and did not unfreeze
    assert gc.get_freeze_count() == 0 and _tracked(inner_made)
    mine = _Marker()
    gc.freeze()
    try:
        made_after = _Marker()
        with steady_gc():
            assert not _tracked(made_after)  # frozen although something was frozen already
        assert gc.get_freeze_count() > 0 and not _tracked(mine) and not _tracked(made_after)
    finally:
        gc.unfreeze()


@pytest.fixture
def freeze_counts(monkeypatch):
    """The collector's frozen-object count at each timed call of any measuring loop."""
    seen: list[int] = []
    real = timing.Timer.__call__

    def call(self, fn, *a, **k):
        seen.append(gc.get_freeze_count())
        return real(self, fn, *a, **k)

    monkeypatch.setattr(timing.Timer, "__call__", call)
    return seen


def test_sweep_and_batch_time_every_copy_with_the_heap_frozen(freeze_counts):
    """(The forum and duplex loops need CUDA: tests/gpu/test_gc_steady_gpu.py.)"""
    sweep(SweepSpec(("pageable",), (4096, 65536), device="cpu", reps=3, warmup=1), progress=False)
    n_sweep = len(freeze_counts)
    batch(BatchSpec(counts=(1, 4), totals=(4096,), reps=2, warmup=1, device="cpu"), progress=False)
    assert n_sweep == 2 * 4 and len(freeze_counts) > n_sweep
    assert min(freeze_counts) > 0  # every copy ran with the objects from before the loop frozen
    assert gc.get_freeze_count() == 0  # and each loop handed them back
