"""How a staged copy is cut: the ring's limits and defaults, and the chunk boundaries of one
copy (:func:`chunk_plan`). No torch, no CUDA: :mod:`h2dlab.transfer.stager` runs the plan.

A copy is cut into about ``WAVES`` chunks per thread (at most a slot each): with one chunk per
thread every thread copies at once and then every DMA runs at once, and nothing overlaps.
How finely its first chunk and its last wave are cut (``head_split``, ``tail_split``: 1, 2 or 4)
is a setting the benchmark tunes: pieces start the first DMA sooner and leave less DMA after the
last host copy, but each piece's DMA pays a fixed cost, which loses where the DMA is the bottleneck.

A *plan* (:data:`PLAN_KEYS`: threads, slot bytes, engine, smallest chunk, splits, waves) is how one
copy is run; a ring of ``threads x slots x chunk_bytes`` can run any plan that fits in it
(:func:`fits`), so the fast path keeps one ring per device and picks a plan per copy size
(:func:`ring_shape` sizes the ring for all of them).
"""

from __future__ import annotations

import os
from typing import Any

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "ENGINES",
    "MAX_CHUNK_BYTES",
    "MAX_SLOTS",
    "MAX_THREADS",
    "MAX_WAVES",
    "MIN_CHUNK_BYTES",
    "MIN_STEP_BYTES",
    "PLAN_KEYS",
    "SLOTS_PER_THREAD",
    "SPLITS",
    "TAIL_SPLIT",
    "WAVES",
    "check_split",
    "check_waves",
    "chunk_plan",
    "default_threads",
    "fits",
    "ring_shape",
]

KiB, MiB = 1024, 1024**2
DEFAULT_CHUNK_BYTES = 16 * MiB  # one staging slot; a chunk never exceeds its slot
MIN_CHUNK_BYTES, MAX_CHUNK_BYTES, MAX_THREADS = 4 * KiB, 1024 * MiB, 256  # allowed options
SLOTS_PER_THREAD = 2  # default: one being filled while the other's DMA runs
MAX_SLOTS = 8  # slots per thread allowed
WAVES = 4  # default: chunks per thread a copy is cut into, where slots allow (pipeline depth)
MAX_WAVES = 64  # allowed per plan
#: What one copy's plan is made of (the Stager runs any plan that fits its ring).
PLAN_KEYS = ("threads", "chunk_bytes", "engine", "min_step_bytes", "head_split", "tail_split", "waves")
MIN_STEP_BYTES = 1 * MiB  # default: no chunk smaller than this, below it per-chunk overhead dominates
TAIL_SPLIT = 4  # default: the first chunk and the last wave's chunks are cut this much finer
SPLITS = (1, 2, 4)  # allowed head_split / tail_split values (1: whole chunks)
ENGINES = ("numpy", "torch")  # who copies a chunk on the host (see h2dlab.transfer.stager)
_ALIGN = 4 * KiB


def default_threads() -> int:
    """Staging threads when none are given: the usable cores, at most 12."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(12, cores or 1))


def check_split(name: str, value: Any) -> int:
    """``value`` as a split (one of ``SPLITS``); TypeError if not an integer, ValueError if
    not 1, 2 or 4."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if value not in SPLITS:
        raise ValueError(f"{name} must be 1, 2 or 4, got {value}")
    return value


def check_waves(value: Any) -> int:
    """``value`` as a wave count, 1 to ``MAX_WAVES``; TypeError if not an integer, ValueError if
    out of range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"waves must be an integer, got {type(value).__name__} {value!r}")
    if not 1 <= value <= MAX_WAVES:
        raise ValueError(f"waves must be between 1 and {MAX_WAVES}, got {value}")
    return value


def fits(plan: dict[str, Any], threads: int, chunk_bytes: int) -> bool:
    """Whether ``plan`` (its ``threads`` and ``chunk_bytes``) runs in a ring of ``threads``
    threads with slots of ``chunk_bytes`` (as many slots per thread as the plan has): no more
    threads, and its slots laid end to end fit the ring."""
    return plan["threads"] <= threads and plan["threads"] * plan["chunk_bytes"] <= threads * chunk_bytes


def ring_shape(plans: list[dict[str, Any]]) -> tuple[int, int]:
    """``(threads, chunk_bytes)`` of the smallest ring of that many threads that runs every plan
    (:func:`fits`): the most threads any plan uses, and slots large enough to hold the largest
    plan's ``threads x chunk_bytes`` spread over them (in whole 4 KiB pages)."""
    threads = max(p["threads"] for p in plans)
    per_thread = max(-(-p["threads"] * p["chunk_bytes"] // threads) for p in plans)
    return threads, -(-per_thread // _ALIGN) * _ALIGN


def _piece(step: int, split: int, min_step: int) -> int:
    # A 1/split of the chunk in whole pages, or the whole chunk where that is below min_step.
    piece = step // split // _ALIGN * _ALIGN
    return step if split == 1 or piece < max(min_step, _ALIGN) else piece


def chunk_plan(
    nbytes: int,
    threads: int,
    chunk_bytes: int,
    min_step: int = MIN_STEP_BYTES,
    *,
    head_split: int = TAIL_SPLIT,
    tail_split: int = TAIL_SPLIT,
    waves: int = WAVES,
) -> list[int]:
    """Chunk boundaries for one copy of ``nbytes``.

    About ``waves`` chunks per thread (default ``WAVES``), each at least ``min_step`` (or the slot, if smaller),
    at most one slot, in multiples of 4 KiB; the last wave (a chunk per thread) is cut
    ``tail_split`` times finer where its pieces stay >= ``min_step``, so that little DMA is
    left after the last host copy and the threads finish together, and the first chunk
    ``head_split`` times, so that the first DMA starts after a piece, not a whole chunk, has
    been copied. Both 1: whole chunks only.

    Parameters
    ----------
    nbytes
        Bytes of the copy (0 gives ``[0]``).
    threads
        Staging threads.
    chunk_bytes
        Slot size: no chunk is larger.
    min_step
        Smallest chunk wanted (default ``MIN_STEP_BYTES``): larger values mean fewer,
        larger chunks and DMAs, each with its fixed cost paid fewer times.
    head_split, tail_split
        Pieces the first chunk and each chunk of the last wave are cut into: 1, 2 or 4
        (default ``TAIL_SPLIT``, 4; the cut is skipped where a piece would be below ``min_step``).
    waves
        Chunks per thread wanted, 1 to ``MAX_WAVES`` (default ``WAVES``, 4): fewer means fewer,
        larger chunks, each paying its issue and DMA costs once.

    Returns
    -------
    list of int
        ``[0, ..., nbytes]``, increasing: chunk ``i`` is ``[b[i], b[i + 1])``.
    """
    splits = check_split("head_split", head_split), check_split("tail_split", tail_split)
    check_waves(waves)
    if nbytes <= 0:
        return [0]
    step = max(min_step, -(-nbytes // (threads * waves)))
    step = min(chunk_bytes, -(-step // _ALIGN) * _ALIGN)
    tail = threads * step
    if nbytes < 2 * tail:
        return [*range(0, nbytes, step), nbytes]
    head_piece, tail_piece = (_piece(step, k, min_step) for k in splits)
    head = (nbytes - tail) // step * step  # whole chunks, then the pieces
    starts = [*range(0, head, step)]
    if head >= 2 * step and head_piece < step:  # the first chunk in pieces too
        starts[:1] = range(
            0, step // head_piece * head_piece, head_piece
        )  # any remainder joins the last piece
    return [*starts, *range(head, nbytes, tail_piece), nbytes]
