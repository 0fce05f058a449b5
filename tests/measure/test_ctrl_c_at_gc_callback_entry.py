"""A Ctrl-C that arrives while a garbage collection runs is not lost (hostile pass 4, issue 35).

A signal that arrives during a collection (in C) is acted on at the first Python function
called afterwards. When that was the kit's GC counter (``timing._count_gc``, then in
``gc.callbacks`` from import on), its handler ran at the counter's entry, before its
``try``, and Python dropped the exception ("Exception ignored in: _count_gc"). Found with
``kill -TERM`` on ``h2dlab measure``: the run went on to its end and exited 0. The counter
is now in ``gc.callbacks`` only within a timer's window, and an interrupt dropped there is
raised when the window ends. Here the signal is SIGALRM handled by Python's own Ctrl-C
handler, sent by an interval timer a quarter of the way into a collection of a synthetic
heap.
"""

import gc
import signal
import time

import pytest
import torch

from h2dlab.measure import timing


def _is_counter(cb) -> bool:
    return getattr(cb, "__name__", "") == "_count_gc"


@pytest.fixture
def synthetic_heap_collect_s():
    """A synthetic heap whose full collection takes 0.1 s or more; yields that time. Other
    libraries' GC callbacks are set aside meanwhile: hypothesis, loaded by other test files in
    the same pytest worker, adds one, and an interrupt landing at its entry is dropped there
    (the kit's own callback is what these tests are about)."""
    foreign = [cb for cb in gc.callbacks if "hypothesis" in getattr(cb, "__module__", "")]
    for cb in foreign:  # in place: the interpreter calls the list it made, not the attribute
        gc.callbacks.remove(cb)
    junk = [[i] for i in range(1_500_000)]
    t0 = time.perf_counter()
    gc.collect()
    yield time.perf_counter() - t0
    del junk
    gc.callbacks.extend(foreign)


def _three_collections_interrupted(collect_s: float, collect) -> list[str]:
    old = signal.signal(signal.SIGALRM, signal.default_int_handler)
    outcomes = []
    try:
        for _ in range(3):
            signal.setitimer(signal.ITIMER_REAL, collect_s / 4)
            try:
                collect()
                time.sleep(0.3)  # an interrupt asked for again would arrive within this
                outcomes.append("lost")
            except KeyboardInterrupt:
                outcomes.append("raised")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return outcomes


def test_a_ctrl_c_during_a_garbage_collection_outside_a_copy_reaches_the_program(synthetic_heap_collect_s):
    assert not any(_is_counter(cb) for cb in gc.callbacks)
    assert _three_collections_interrupted(synthetic_heap_collect_s, gc.collect) == ["raised"] * 3


def test_a_ctrl_c_during_a_garbage_collection_inside_a_timed_copy_reaches_the_program(
    synthetic_heap_collect_s,
):
    timer = timing.Timer(torch.device("cpu"), evidence="light")
    seen = []

    def copy_that_collects():
        seen.append(any(_is_counter(cb) for cb in gc.callbacks))
        gc.collect()

    def timed():
        timer(copy_that_collects)

    assert _three_collections_interrupted(synthetic_heap_collect_s, timed) == ["raised"] * 3
    assert seen == [True] * 3  # the counter was there, and Python dropped the interrupt at its entry
    assert not any(_is_counter(cb) for cb in gc.callbacks)
    assert timing._GC_DROPPED == []


def test_the_gc_counter_counts_collections_within_the_window_only():
    timer = timing.Timer(torch.device("cpu"), evidence="light")
    before = timing.gc_collections()
    gc.collect()
    gc.collect()
    assert timing.gc_collections() == before  # outside a window: not counted, nothing called
    _, rec = timer(gc.collect)
    assert rec["gc_count"] == 1.0
    assert rec["gc_ms"] > 0.0
    _, rec = timer(lambda: None)
    assert rec["gc_count"] == 0.0
    assert rec["gc_ms"] == 0.0
    assert timing.gc_collections() == before + 1


def test_an_exception_from_the_copy_leaves_no_counter_and_no_hook_behind():
    import sys

    hook = sys.unraisablehook
    timer = timing.Timer(torch.device("cpu"), evidence="light")

    def failing():
        raise RuntimeError("synthetic failure")

    with pytest.raises(RuntimeError, match="synthetic failure"):
        timer(failing)
    assert not any(_is_counter(cb) for cb in gc.callbacks)
    assert sys.unraisablehook is hook


def test_a_timed_copy_inside_a_timed_copy_counts_and_leaves_nothing_behind():
    import sys

    hook = sys.unraisablehook
    timer = timing.Timer(torch.device("cpu"), evidence="light")
    _, outer = timer(lambda: timer(gc.collect))
    assert outer["gc_count"] == 1.0
    assert not any(_is_counter(cb) for cb in gc.callbacks)
    assert sys.unraisablehook is hook
