"""Plans: the rows a run will measure, in execution order, before anything is timed."""

from __future__ import annotations

import random
from typing import Any

from h2dlab.errors import UsageError
from h2dlab.measure.spec import FORUM_ORDERS, ORDERS, SweepSpec
from h2dlab.units import FORUM_SEQS, forum_nbytes

__all__ = ["FORUM_STEPS", "cells", "plan_forum", "plan_sweep", "plan_spec"]

#: The forum protocol's three timed steps per seq, in the order they run.
FORUM_STEPS = ("pin_memory", "pinned_to_cuda", "direct_to_cuda")


def plan_sweep(
    strategy_names: list[str],
    sizes: list[int],
    reps: int,
    warmup: int,
    order: str = "shuffled",
    seed: int = 0,
    reps_large: int | None = None,
    large_bytes: int = 1024**3,
) -> list[dict[str, Any]]:
    """The planned rows, in execution order.

    ``shuffled``: cells (strategy, size) in a random order drawn from ``seed``; within a
    cell the warm-ups run first, then the timed reps, back to back. ``ascending``: the
    same, cells by size. ``interleaved``: every cell's warm-ups first (cells shuffled),
    then the timed reps in rounds, each round visiting every cell once in a fresh random
    order, so that a slowdown lasting a while is spread over many sizes instead of
    filling one cell, where its median would hide it.

    Returns
    -------
    list of dict
        ``strategy``, ``size_bytes``, ``rep``, ``warmup`` and ``order`` per row.
    """
    if order not in ORDERS:
        raise UsageError(f"order must be one of {', '.join(ORDERS)}, not {order!r}")
    cell_list = [(s, n) for n in sorted(sizes) for s in strategy_names]
    rng = random.Random(seed)
    if order != "ascending":
        rng.shuffle(cell_list)

    def n_reps(n: int) -> int:
        return reps if reps_large is None or n < large_bytes else reps_large

    rows = []
    if order == "interleaved":
        for s, n in cell_list:
            rows += [{"strategy": s, "size_bytes": n, "rep": w, "warmup": True} for w in range(warmup)]
        for i in range(max(n_reps(n) for _, n in cell_list)):
            round_ = [c for c in cell_list if i < n_reps(c[1])]
            rng.shuffle(round_)
            rows += [{"strategy": s, "size_bytes": n, "rep": i, "warmup": False} for s, n in round_]
    else:
        for s, n in cell_list:
            rows += [{"strategy": s, "size_bytes": n, "rep": w, "warmup": True} for w in range(warmup)]
            rows += [{"strategy": s, "size_bytes": n, "rep": i, "warmup": False} for i in range(n_reps(n))]
    for i, row in enumerate(rows):
        row["order"] = i
    return rows


def plan_spec(spec: SweepSpec) -> list[dict[str, Any]]:
    """``plan_sweep`` for a spec whose strategies are named (see ``SweepSpec.resolved``)."""
    if spec.strategies is None:
        raise UsageError("the spec names no strategies yet: resolve it for a device first")
    return plan_sweep(
        list(spec.strategies),
        list(spec.sizes),
        spec.reps,
        spec.warmup,
        spec.order,
        spec.seed,
        spec.reps_large,
    )


def cells(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Consecutive rows of the same (strategy, size), grouped: the units a sweep prepares once."""
    groups: list[list[dict[str, Any]]] = []
    for row in rows:
        key = (row["strategy"], row["size_bytes"])
        if groups and (groups[-1][0]["strategy"], groups[-1][0]["size_bytes"]) == key:
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


def plan_forum(
    order: str = "ascending", seed: int = 0, seqs: list[int] | None = None
) -> list[dict[str, Any]]:
    """Three planned rows per seq (:data:`FORUM_STEPS`), seqs ascending or shuffled."""
    if order not in FORUM_ORDERS:
        raise UsageError(f"order must be one of {', '.join(FORUM_ORDERS)}, not {order!r}")
    seqs = list(seqs if seqs is not None else FORUM_SEQS)
    if order == "shuffled":
        random.Random(seed).shuffle(seqs)
    rows = []
    for seq in seqs:
        n = forum_nbytes(seq)
        for s in FORUM_STEPS:
            rows.append({"strategy": s, "size_bytes": n, "rep": 0, "warmup": False, "seq": seq})
    for i, r in enumerate(rows):
        r["order"] = i
    return rows
