"""A Ctrl-C that arrives while a garbage collection runs is not lost (hostile pass 4, issue 35).

``timing._count_gc`` catches a ``KeyboardInterrupt`` raised inside its ``try`` and asks for
it again, but a signal that arrives during the collection (in C) is acted on at the first
Python function called afterwards: the entry of ``_count_gc`` itself, before its ``try``.
Python then drops the exception ("Exception ignored in: _count_gc"). Found with
``kill -TERM`` on ``h2dlab measure``: the run went on to its end and exited 0. Here the
signal is SIGALRM handled by Python's own Ctrl-C handler, sent by an interval timer a
quarter of the way into a collection of a synthetic heap.
"""

import gc
import signal
import time

import pytest

from h2dlab.measure import timing


@pytest.mark.xfail(
    strict=True,
    reason="hostile4: a signal during a collection runs its handler at _count_gc's entry, outside its try, and is dropped",
)
def test_a_ctrl_c_during_a_garbage_collection_reaches_the_program():
    assert any(getattr(cb, "__name__", "") == "_count_gc" for cb in gc.callbacks)
    assert timing.gc_collections() >= 0
    junk = [[i] for i in range(1_500_000)]  # synthetic heap: a collection takes 0.1 s or more
    t0 = time.perf_counter()
    gc.collect()
    collect_s = time.perf_counter() - t0
    old = signal.signal(signal.SIGALRM, signal.default_int_handler)
    outcomes = []
    try:
        for _ in range(3):
            signal.setitimer(signal.ITIMER_REAL, collect_s / 4)
            try:
                gc.collect()
                time.sleep(0.3)  # a Ctrl-C asked for again from a timer thread arrives within this
                outcomes.append("lost")
            except KeyboardInterrupt:
                outcomes.append("raised")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        del junk
    assert outcomes == ["raised"] * 3
