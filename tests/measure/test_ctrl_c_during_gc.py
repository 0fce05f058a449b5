"""A Ctrl-C that lands while Python's garbage collector runs the kit's GC counter (hostile
pass 3 of issue #35). ``timing._count_gc`` is a ``gc.callbacks`` entry from import on, and
Python prints and drops any exception raised in a GC callback ("Exception ignored in"):
a ``KeyboardInterrupt`` from the SIGINT handler that runs inside it was lost, so the Ctrl-C
was ignored (seen: ``measure`` interrupted while it builds a large plan ran to its end, exit 0,
with a traceback on stderr). The callback now asks for the interrupt again
(``_thread.interrupt_main``), which acts once the collection is over."""

from __future__ import annotations

import gc
import time

import pytest

from h2dlab.measure import timing


class _InterruptedClock:
    """``time`` for ``_count_gc``: its first ``perf_counter`` call is where the SIGINT
    handler runs and raises, as Python runs a signal handler between two bytecodes."""

    def __init__(self) -> None:
        self.fired = False

    def perf_counter(self) -> float:
        if not self.fired:
            self.fired = True
            raise KeyboardInterrupt
        return 0.0


def test_a_ctrl_c_during_a_garbage_collection_still_interrupts(monkeypatch):
    clock = _InterruptedClock()
    monkeypatch.setattr(timing, "time", clock)
    monkeypatch.setattr(timing, "_GC_TIME", [0.0, 0.0])
    with pytest.raises(KeyboardInterrupt):
        gc.collect()
        # the interrupt comes a moment later, from a timer thread, which a loaded machine may
        # start late: wait for it up to 10 s, allocating nothing (no collection to land in)
        until = time.monotonic() + 10
        while time.monotonic() < until:
            pass
    assert clock.fired
