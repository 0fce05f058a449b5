"""One naming scheme for the ways to move a tensor: the strategy registry's names, used by
tables, plots and the benchmark alike, each with one record of its facts (:class:`Record`:
the code it stands for and its colour in every figure). No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BENCHMARK", "CODE", "COLOUR", "PINNED_BEFOREHAND", "RECORDS", "Record", "canonical", "code"]


@dataclass(frozen=True)
class Record:
    """The facts about one way to move a tensor that tables, figures and the benchmark share.

    Attributes
    ----------
    code
        What it times, as a user would write it.
    colour
        Its colour in every figure (``show.plots_style.PALETTE``); None where it has none of
        its own (figures then give it a spare colour, ``plots_style.palette_for``).
    """

    code: str
    colour: str | None = None


#: Each name's record, in the order figures list them.
RECORDS: dict[str, Record] = {
    "pageable": Record("x.to('cuda')", "#d62728"),
    "pageable_non_blocking": Record("x.to('cuda', non_blocking=True)", "#ff9896"),
    "pin_then_copy": Record("x.pin_memory().to('cuda')", "#9467bd"),
    "pin_then_copy_register": Record(
        "x.pin_memory().to('cuda') with pinned_use_cuda_host_register", "#c5b0d5"
    ),
    "pinned_reuse": Record("dst.copy_(pinned_buffer, non_blocking=True)", "#2ca02c"),
    "host_register": Record("cudaHostRegister(x), copy, unregister", "#8c564b"),
    "staged": Record("h2dlab.transfer.fastpath.to_device(x)", "#1f77b4"),
    "tensordict": Record("TensorDict(...).to('cuda', non_blocking_pin=True, num_threads=8)", "#17becf"),
    "pin_memory": Record("x.pin_memory()", "#9467bd"),
    "pinned_to_cuda": Record("x_pinned.to('cuda') after empty_cache()", "#2ca02c"),
    "direct_to_cuda": Record("x.to('cuda') after empty_cache()", "#d62728"),
    # device -> host (h2dlab.measure.strategies_d2h)
    "d2h_pageable": Record("y.to('cpu')"),
    "d2h_pinned_reuse": Record("out_pinned.copy_(y, non_blocking=True); synchronize"),
    "d2h_non_blocking": Record("y.to('cpu', non_blocking=True); synchronize"),
    "d2h_staged": Record("y in 8 MiB chunks through 2 pinned slots, copied out on the host"),
    # both ways at once (h2dlab.measure.duplex)
    "alone": Record("one direction, pinned buffers"),
    "duplex": Record("both directions at once on two streams, pinned buffers"),
    # many tensors (h2dlab.measure.batch_methods)
    "loop_to": Record("[t.to('cuda') for t in batch]"),
    "loop_non_blocking": Record("[t.to('cuda', non_blocking=True) for t in batch]; synchronize"),
    "pinned_each": Record("[p.to('cuda', non_blocking=True) for p in pinned_batch]  # pinned beforehand"),
    "pinned_flat": Record("torch.cat(batch, out=flat_pinned).to('cuda', non_blocking=True), views"),
    "foreach_copy": Record(
        "torch._foreach_copy_(device_batch, pinned_batch, non_blocking=True)  # pinned beforehand"
    ),
    "to_device_packed": Record("to_device(torch.cat(batch, out=flat)), views"),
}
#: What each name times, as a user would write it (from :data:`RECORDS`).
CODE = {name: r.code for name, r in RECORDS.items()}
#: Each name's colour in every figure, where it has one (from :data:`RECORDS`).
COLOUR = {name: r.colour for name, r in RECORDS.items() if r.colour is not None}
#: Batch methods whose sources were pinned beforehand (``prepare()``, untimed): their rows
#: time the copies only; a program that pins every step pays the pinning too (issue 31).
PINNED_BEFOREHAND = ("pinned_each", "foreach_copy")
#: The benchmark's method names (benchmarks/bench_transfer.py) in the registry's names.
BENCHMARK = {
    "to": "pageable",
    "to_device": "staged",
    "pin_then_to": "pin_then_copy",
    "pin_then_to_reg": "pin_then_copy_register",
    "pinned_reuse": "pinned_reuse",
    "tensordict": "tensordict",
}


def canonical(name: str) -> str:
    """The registry name for a strategy or benchmark method name (unknown names unchanged)."""
    return BENCHMARK.get(name, name)


def code(name: str) -> str:
    """The code a name stands for (its :data:`RECORDS` entry, read at call time, so a record
    added at run time counts); the name itself if it has no entry."""
    record = RECORDS.get(canonical(name))
    return record.code if record is not None else name
