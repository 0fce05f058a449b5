"""On a real GPU: the forum's and the duplex loop's copies are timed with the heap that
existed before the loop frozen (``gc_steady.steady_gc``), and handed back after it."""

import gc

from h2dlab import timing
from h2dlab.duplex import DuplexSpec, duplex
from h2dlab.forum import forum
from h2dlab.spec import ForumSpec

MiB = 1024 * 1024


def test_forum_and_duplex_time_every_copy_with_the_heap_frozen(monkeypatch):
    seen: list[int] = []
    real = timing.Timer.__call__

    def call(self, fn):
        seen.append(gc.get_freeze_count())
        return real(self, fn)

    monkeypatch.setattr(timing.Timer, "__call__", call)
    before = gc.get_freeze_count()  # on the H200 machine's Python some objects were frozen already
    marker = object.__new__(type("Marker", (), {}))  # an object the collector tracks
    forum(ForumSpec(seqs=(1, 2)), progress=False)
    n_forum = len(seen)
    duplex(DuplexSpec(sizes=(MiB,), reps=2, warmup=1), progress=False)
    assert n_forum == 2 * 3 and len(seen) > n_forum
    assert min(seen) > before + 1000  # the whole heap from before the loop, not a few objects
    assert (gc.get_freeze_count() == 0) == (before == 0)
    assert any(o is marker for o in gc.get_objects()) == (before == 0)
