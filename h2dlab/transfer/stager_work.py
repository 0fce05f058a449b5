"""What a :class:`~h2dlab.transfer.stager.Stager` runs: a call's plan checked against the ring
(:func:`check_plan`), the ring's slots per layout (:func:`layout_slots`), a copy's chunks
(:func:`cut`), the worker threads' loop (:func:`serve`, :func:`release`) and one thread's
share of a staged copy (:func:`stage_chunks`)."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import numpy as np
import torch

from h2dlab.transfer.copyargs import check_count
from h2dlab.transfer.pinning import host_unregister
from h2dlab.transfer.stager_plan import (
    ENGINES,
    MAX_CHUNK_BYTES,
    MIN_CHUNK_BYTES,
    PLAN_KEYS,
    check_split,
    check_waves,
    chunk_plan,
    fits,
)

__all__ = ["check_plan", "cut", "layout_slots", "release", "serve", "stage_chunks"]

_PLAN_SET = frozenset(PLAN_KEYS)


def serve(inbox: queue.SimpleQueue, done: queue.SimpleQueue) -> None:
    """A worker thread: run each job from ``inbox``, put its error (or None) in ``done``; stop
    at None."""
    # A worker holds no reference to its Stager between jobs, so an unused one can be collected.
    while True:
        job = inbox.get()
        if job is None:
            return
        try:
            job()
            err = None
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            err = exc
        del job  # before saying done: the caller may drop the Stager at once
        done.put(err)
        del err


def release(inboxes: list, workers: list, streams: list, buf: torch.Tensor) -> None:
    """Stop the workers, wait for the streams, unregister the ring."""
    for box in inboxes:
        box.put(None)
    for t in workers:
        if t is not threading.current_thread():  # collected in a worker: it ends by itself
            t.join()
    for s in streams:  # no DMA may still read the ring
        s.synchronize()
    host_unregister(buf.data_ptr())


def check_plan(plan: Any, default: tuple, threads: int, chunk_bytes: int, cache: dict) -> tuple:
    """``plan`` (a dict of some of PLAN_KEYS) over ``default`` (a plan as a tuple in PLAN_KEYS
    order), checked against a ring of ``threads`` threads and ``chunk_bytes`` slots, as a tuple;
    ``cache`` keeps the plans already checked.

    Raises
    ------
    TypeError, ValueError
        If a key is unknown, a value out of range, or the plan does not fit the ring.
    """
    if plan is None:
        return default
    if not isinstance(plan, dict) or not plan.keys() <= _PLAN_SET:
        extra = sorted(map(str, set(plan) - _PLAN_SET)) if isinstance(plan, dict) else plan
        raise TypeError(f"a plan is a dict of {', '.join(PLAN_KEYS)}; got {extra!r}")
    key = tuple(map(plan.get, PLAN_KEYS))
    got = cache.get(key)
    if got is not None:
        return got
    p = {
        **dict(zip(PLAN_KEYS, default, strict=True)),
        **{k: v for k, v in plan.items() if v is not None},
    }
    got = (
        check_count("threads", p["threads"], 1, threads),
        check_count("chunk_bytes", p["chunk_bytes"], MIN_CHUNK_BYTES, MAX_CHUNK_BYTES),
        p["engine"],
        check_count("min_step_bytes", p["min_step_bytes"], MIN_CHUNK_BYTES, MAX_CHUNK_BYTES),
        check_split("head_split", p["head_split"]),
        check_split("tail_split", p["tail_split"]),
        check_waves(p["waves"]),
    )
    if got[2] not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {got[2]!r}")
    if not fits(p, threads, chunk_bytes):
        raise ValueError(
            f"a plan of {got[0]} thread(s) x {got[1]} bytes does not fit this ring of "
            f"{threads} x {chunk_bytes} bytes per slot"
        )
    if len(cache) < 256:
        cache[key] = got
    return got


def stage_chunks(w, *, streams, src, dst, counter, bounds, slots, failed, trace, engine) -> None:
    """Thread ``w``'s share of one staged copy: it takes chunk numbers from ``counter``, copies
    each chunk into its next slot of ``slots`` (a layout: slots, their NumPy views, events and
    each thread's next slot) once the slot's last DMA has finished, and queues the chunk's DMA
    into ``dst`` on ``streams[w]`` (no DMA where ``dst`` is None). Stops when the chunks run out
    or another thread appended to ``failed``; ``trace`` (a dict or None) collects timings."""
    ring, ring_np, ring_events, ring_next = slots
    slots, events, stream = ring[w], ring_events[w], streams[w]
    slots_host = slots if engine == "torch" else ring_np[w]
    copy = torch.Tensor.copy_ if engine == "torch" else np.copyto
    n_chunks, k, n_slots = len(bounds) - 1, ring_next[w], len(slots)
    clock = time.perf_counter
    try:
        with torch.cuda.stream(stream):
            while not failed:
                i = next(counter)
                if i >= n_chunks:
                    break
                off = bounds[i]
                n = bounds[i + 1] - off
                j = k % n_slots
                k += 1
                t_wait = clock() if trace else 0.0
                if not events[j].query():  # query first: no GIL round trip when done
                    events[j].synchronize()  # this slot's previous DMA has finished
                t_copy = clock() if trace else 0.0
                copy(slots_host[j][:n], src[off : off + n])
                t_copied = clock() if trace else 0.0
                if dst is None:
                    continue
                if trace:
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record(stream)
                dst[off : off + n].copy_(slots[j][:n], non_blocking=True)
                events[j].record(stream)
                if trace:
                    e1.record(stream)
                    trace["chunks"].append(
                        {"thread": w, "chunk": i, "offset": off, "bytes": n, "slot": j, "wait": t_wait,
                         "copy": t_copy, "copied": t_copied, "queued": clock(), "dma": (e0, e1)}
                    )  # fmt: skip
    except BaseException:
        failed.append(True)
        raise
    finally:
        ring_next[w] = k % n_slots


def layout_slots(buf: torch.Tensor, layout: tuple[int, int], k: int, cache: dict) -> tuple:
    """The ring ``buf`` as ``threads`` x ``k`` slots of ``chunk`` bytes (``layout`` is
    ``(threads, chunk)``): the slots, their NumPy views, an event per slot and each thread's
    next slot; made once per layout and kept in ``cache``."""
    got = cache.get(layout)
    if got is None:
        threads, chunk = layout
        flat = [buf[i * chunk : (i + 1) * chunk] for i in range(threads * k)]
        slots = [flat[w * k : (w + 1) * k] for w in range(threads)]
        got = cache[layout] = (
            slots,
            [[s.numpy() for s in ws] for ws in slots],
            [[torch.cuda.Event() for _ in range(k)] for _ in range(threads)],
            [0] * threads,  # each thread's next slot, kept across calls
        )
    return got


def cut(nbytes: int, p: tuple, cache: dict) -> list[int]:
    """chunk_plan's boundaries for ``nbytes`` with plan ``p`` (a tuple in PLAN_KEYS order),
    kept in ``cache`` (cleared at 64 entries: a loop has a few sizes, a sweep must not grow it)."""
    key = (nbytes, p)
    bounds = cache.get(key)
    if bounds is None:
        threads, chunk, _, min_step, head, tail, waves = p
        bounds = chunk_plan(nbytes, threads, chunk, min_step, head_split=head, tail_split=tail, waves=waves)
        if len(cache) >= 64:
            cache.clear()
        cache[key] = bounds
    return bounds
