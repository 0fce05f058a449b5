"""One naming scheme for the ways to move a tensor: the strategy registry's names, used by
tables, plots and the benchmark alike, with the code each name stands for. No torch here.
"""

from __future__ import annotations

__all__ = ["BENCHMARK", "CODE", "PINNED_BEFOREHAND", "canonical", "code"]

#: What each name times, as a user would write it.
CODE = {
    "pageable": "x.to('cuda')",
    "pageable_non_blocking": "x.to('cuda', non_blocking=True)",
    "pin_then_copy": "x.pin_memory().to('cuda')",
    "pin_then_copy_register": "x.pin_memory().to('cuda') with pinned_use_cuda_host_register",
    "pinned_reuse": "dst.copy_(pinned_buffer, non_blocking=True)",
    "host_register": "cudaHostRegister(x), copy, unregister",
    "staged": "h2dlab.transfer.fastpath.to_device(x)",
    "tensordict": "TensorDict(...).to('cuda', non_blocking_pin=True, num_threads=8)",
    "pin_memory": "x.pin_memory()",
    "pinned_to_cuda": "x_pinned.to('cuda') after empty_cache()",
    "direct_to_cuda": "x.to('cuda') after empty_cache()",
    # device -> host (h2dlab.measure.strategies_d2h)
    "d2h_pageable": "y.to('cpu')",
    "d2h_pinned_reuse": "out_pinned.copy_(y, non_blocking=True); synchronize",
    "d2h_non_blocking": "y.to('cpu', non_blocking=True); synchronize",
    "d2h_staged": "y in 8 MiB chunks through 2 pinned slots, copied out on the host",
    # both ways at once (h2dlab.measure.duplex)
    "alone": "one direction, pinned buffers",
    "duplex": "both directions at once on two streams, pinned buffers",
    # many tensors (h2dlab.measure.batch_methods)
    "loop_to": "[t.to('cuda') for t in batch]",
    "loop_non_blocking": "[t.to('cuda', non_blocking=True) for t in batch]; synchronize",
    "pinned_each": "[p.to('cuda', non_blocking=True) for p in pinned_batch]  # pinned beforehand",
    "pinned_flat": "torch.cat(batch, out=flat_pinned).to('cuda', non_blocking=True), views",
    "foreach_copy": "torch._foreach_copy_(device_batch, pinned_batch, non_blocking=True)  # pinned beforehand",
    "to_device_packed": "to_device(torch.cat(batch, out=flat)), views",
}
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
    """The code a name stands for; the name itself if it has no entry."""
    return CODE.get(canonical(name), name)
