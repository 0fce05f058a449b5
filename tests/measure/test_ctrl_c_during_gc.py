"""A Ctrl-C that lands while Python's garbage collector runs the kit's GC counter (hostile
pass 3 of issue #35). Python prints and drops any exception raised in a GC callback
("Exception ignored in"): a ``KeyboardInterrupt`` from the SIGINT handler that runs inside
``timing._count_gc`` was lost, so the Ctrl-C was ignored (seen: ``measure`` interrupted
while it builds a large plan ran to its end, exit 0, with a traceback on stderr). The
counter is now in ``gc.callbacks`` only within a timer's window, whose
``sys.unraisablehook`` keeps such an interrupt, and the timer raises it when the window ends."""

from __future__ import annotations

import gc
import sys
import time

import pytest
import torch

from h2dlab.measure import timing


class _InterruptedClock:
    """``time`` for ``_count_gc``: once armed, its first ``perf_counter`` call is where the
    SIGINT handler runs and raises, as Python runs a signal handler between two bytecodes."""

    def __init__(self) -> None:
        self.armed = False
        self.fired = False

    def __getattr__(self, name: str):
        return getattr(time, name)

    def perf_counter(self) -> float:
        if self.armed and not self.fired:
            self.fired = True
            raise KeyboardInterrupt
        return time.perf_counter()


def test_a_ctrl_c_during_a_garbage_collection_in_a_copy_still_interrupts(monkeypatch):
    clock = _InterruptedClock()
    monkeypatch.setattr(timing, "time", clock)
    monkeypatch.setattr(timing, "_GC_TIME", [0.0, 0.0])
    timer = timing.Timer(torch.device("cpu"), evidence="light")
    after = []

    def copy():
        clock.armed = True
        gc.collect()
        after.append("the copy went on")  # the collection itself does not raise

    hook = sys.unraisablehook
    with pytest.raises(KeyboardInterrupt):
        timer(copy)
    assert clock.fired
    assert after == ["the copy went on"]
    assert sys.unraisablehook is hook
    assert timing._GC_DROPPED == []


def test_another_exception_dropped_from_a_gc_callback_goes_to_the_hook_in_place(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(type(u.exc_value)))

    def faulty(phase, info):  # noqa: ARG001
        raise ValueError("synthetic")

    gc.callbacks.append(faulty)
    try:
        _, rec = timing.Timer(torch.device("cpu"), evidence="light")(gc.collect)
    finally:
        gc.callbacks.remove(faulty)
    assert rec["gc_count"] == 1.0
    assert seen == [ValueError, ValueError]  # start and stop, passed on, nothing raised
