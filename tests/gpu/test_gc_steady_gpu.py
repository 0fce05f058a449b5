"""On a real GPU: the forum's and the duplex loop's copies are timed with the heap that
existed before the loop frozen (``gc_steady.steady_gc``), and handed back after it."""

import gc

from h2dlab.duplex import DuplexSpec, duplex
from h2dlab.forum import forum
from h2dlab.spec import ForumSpec
from tests.test_gc_steady import freeze_counts  # noqa: F401 - the fixture, shared

MiB = 1024 * 1024


def test_forum_and_duplex_time_every_copy_with_the_heap_frozen(freeze_counts):  # noqa: F811
    before = gc.get_freeze_count()  # on the H200 machine's Python some objects were frozen already
    marker = object.__new__(type("Marker", (), {}))  # an object the collector tracks
    forum(ForumSpec(seqs=(1, 2)), progress=False)
    n_forum = len(freeze_counts)
    duplex(DuplexSpec(sizes=(MiB,), reps=2, warmup=1), progress=False)
    assert n_forum == 2 * 3 and len(freeze_counts) > n_forum
    assert min(freeze_counts) > before + 1000  # the whole heap from before the loop, not a few objects
    assert (gc.get_freeze_count() == 0) == (before == 0)
    assert any(o is marker for o in gc.get_objects()) == (before == 0)
