"""Python's garbage collector kept from stalling a measuring loop between copies.

A full (generation 2) collection walks every object Python tracks. In a process with
torch, CUDA and pandas loaded that is some 170 000 objects, and on the H200 machine one
collection took 34-59 ms (``gc.collect()`` three times, kit commit b0713c3). The loop makes
enough objects per row to start one every few hundred copies: in the recorded ``idle``
runs of ``data/h200`` the copy after such a stall (82-109 ms between two copies where the
loop usually leaves 3-13 ms) was the slowest of its cell in three of the four runs, because
a copy after a long spell without copies is slow whatever filled the spell (a probe on the
same machine: a 64 KiB pageable copy took a median 108 us after 3 ms of spinning, 186 us
after 100 ms of spinning and 175 us after a full collection).

:func:`steady_gc` collects once before the loop and then freezes every object that exists
(``gc.freeze()``): later collections, full ones included, walk only the objects made since,
which took under 0.1 ms on that machine. The collector stays on, so a collection that
starts during a copy is still counted (``gc_count``, ``gc_ms``). After the loop the frozen
objects are handed back to the collector (``gc.unfreeze()``), so a notebook's kernel that
measured keeps collecting as before.
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
