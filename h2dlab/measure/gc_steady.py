"""Python's garbage collector kept from stalling a measuring loop between copies.

A full (generation 2) collection walks every object Python tracks. In a probe process on
the H200 machine (torch, CUDA and the kit's timer loaded, no pandas: 166 000 objects) one
took 34-59 ms (``gc.collect()`` three times, kit commit b0713c3); in a run of the kit's own
CLI there (``h2dlab measure ... --pause 0``, every collection logged) the full collections
took 14, 47 and 91 ms, the 91 ms one between two copies. The loop makes enough objects to
start one such collection in each 252-copy idle run: in the recording bundled as
``data/h200`` at commit 1fb1d2d, before this module, the copy at ``order`` 52 began 82-109
ms after the previous one ended, where the loop otherwise leaves 3-13 ms, and it was the
slowest of its cell in three of the four runs (the recording at 250f304, with it: no gap
over 23 ms). That is consistent
with what a probe on the same machine showed (host clock, medians): a 64 KiB pageable copy
took 108 us after 3 ms of spinning, 186 us after 100 ms of spinning and 175 us after a
full collection (see ``causes_wake``).

:func:`steady_gc` collects once before the loop and then freezes every object that exists
(``gc.freeze()``): later collections, full ones included, walk only the objects made since
(a full collection took under 0.1 ms right after the freeze in that probe). The collector
stays on, so a collection that starts during a copy is still counted (``gc_count``,
``gc_ms``). After the loop the frozen objects are handed back to the collector
(``gc.unfreeze()``) only where nothing was frozen before it: the lent H200's Python starts
with a few hundred objects frozen, and those, the loop's heap with them, stay frozen (in a
notebook's kernel too). The copy-table loops use it (``measure``, ``forum``, ``duplex``
and ``batch``), and ``overlap``'s timeline loop.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["steady_gc"]


@contextmanager
def steady_gc() -> Iterator[None]:
    """Within the block, Python's collector walks only objects made inside it.

    On entry: one full collection, then ``gc.freeze()``, whatever was frozen before (on
    the H200 machine's Python 3.12 a few hundred objects already were when the kit's
    loops started, so a block that froze only an empty permanent generation froze
    nothing there). On exit, however the block ends: ``gc.unfreeze()`` when nothing was
    frozen on entry; otherwise everything stays frozen, the block's objects too, since
    unfreezing would hand back objects someone else froze. A nested block thus leaves the
    unfreezing to the outermost.
    """
    before = gc.get_freeze_count()
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        if before == 0:
            gc.unfreeze()
