"""On a real GPU: the forum's and the duplex loop's copies, and the overlap timelines, are timed with the heap that
existed before the loop frozen (``gc_steady.steady_gc``), and handed back after it."""

import gc

from h2dlab.measure.duplex import DuplexSpec, duplex
from h2dlab.measure.forum import forum
from h2dlab.measure.spec import ForumSpec
from tests.measure.test_gc_steady import freeze_counts  # noqa: F401 - the fixture, shared

MiB = 1024 * 1024


def test_forum_and_duplex_time_every_copy_with_the_heap_frozen(freeze_counts):  # noqa: F811
    before = gc.get_freeze_count()  # on the H200 machine's Python some objects were frozen already
    marker = object.__new__(type("Marker", (), {}))  # an object the collector tracks
    # Objects tracked and not frozen now; earlier tests of this process may have left most of
    # the heap frozen already (steady_gc keeps a freeze it found), so count, not a constant.
    tracked = len(gc.get_objects())
    forum(ForumSpec(seqs=(1, 2)), progress=False)
    n_forum = len(freeze_counts)
    duplex(DuplexSpec(sizes=(MiB,), reps=2, warmup=1), progress=False)
    assert n_forum == 2 * 3 and len(freeze_counts) > n_forum
    assert min(freeze_counts) >= before + tracked // 2  # the heap from before the loop, not a few objects
    assert (gc.get_freeze_count() == 0) == (before == 0)
    assert any(o is marker for o in gc.get_objects()) == (before == 0)


def test_overlap_timelines_run_with_the_heap_frozen(monkeypatch):
    import time

    from h2dlab.measure import overlap as overlap_mod
    from h2dlab.measure.spec import OverlapSpec

    before = gc.get_freeze_count()
    tracked = len(gc.get_objects())  # as above: tracked and not frozen before the loop
    counts, clock = [], time.perf_counter

    def counting_clock():  # overlap reads the host clock three times per scenario, in its loop only
        counts.append(gc.get_freeze_count())
        return clock()

    monkeypatch.setattr(overlap_mod.time, "perf_counter", counting_clock)
    df = overlap_mod.overlap(OverlapSpec(size_bytes=MiB, reps=2))
    monkeypatch.undo()
    frozen = [c for c in counts if c >= before + tracked // 2]  # the heap from before the loop frozen
    assert len(df) == 2 * 2 * len(overlap_mod.SCENARIOS)  # a copy and a compute row per scenario and rep
    assert len(frozen) >= 3 * 2 * len(overlap_mod.SCENARIOS)
    assert (gc.get_freeze_count() == 0) == (before == 0)
