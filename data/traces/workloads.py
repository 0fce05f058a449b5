"""The workloads behind the bundled traces: one per recipe of the kit, in three families.

Each family moves the same 64 MiB per step into the same GPU compute (bf16 matrix products,
a few ms on an H200) and ends the step with ``float(y[0, 0])``, as a loss printed each step
would. A workload's ``step()`` does one step; ``resident()`` does the same step with the
batch already on the GPU (the loader families still iterate their loader), so
``step time - resident time`` is what the copy path adds to a step, measured without the
profiler.

This module is the one place the recipes' code lives for the traces. When the recipes of
issue #31 land as ``examples/`` and a package module, each ``_step_*`` below can call that
code instead of its own few lines; the names in ``RECIPE`` are the doctor's recipe ids
(``h2dlab.doctor.RECIPES``; ``pageable`` is the starting point, ``as_is`` to the doctor).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

ROWS, COLS = 4096, 4096  # float32: 64 MiB per batch
N_SMALL = 64  # the small-tensor family: 64 tensors of 1 MiB
MATMULS = 24  # compute per step: MATMULS bf16 products of 4096 x 4096


@dataclass
class Workload:
    name: str
    family: str
    recipe: str
    h2d_source: str  # what the doctor must read as the batch's source memory
    step: Callable[[], None]
    resident: Callable[[], None]


def _compute(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = x.to(torch.bfloat16)
    for _ in range(MATMULS):
        y = y @ w
    return y


def _finish(y: torch.Tensor) -> None:
    float(y[0, 0])  # the host waits for the step here, as loss.item() does


class _Chunks(torch.utils.data.Dataset):
    """A dataset whose items are whole 64 MiB batches (DataLoader(batch_size=None))."""

    def __init__(self, chunks: list[torch.Tensor]) -> None:
        self.chunks = chunks

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.chunks[i % len(self.chunks)]


def build(dev: torch.device) -> list[Workload]:
    """Every workload, set up on ``dev`` (a CUDA device)."""
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(ROWS, COLS, generator=g) / 64).to(dev, torch.bfloat16)
    host = torch.randn(ROWS, COLS, generator=g)  # pageable
    host_pinned = host.pin_memory()
    resident_x = host.to(dev)
    small = [t.contiguous() for t in host.chunk(N_SMALL)]  # 64 pageable tensors of 1 MiB
    small_pinned = [t.pin_memory() for t in small]
    flat = host_pinned.view(-1)  # one pinned buffer; its slices are the small tensors
    resident_small = [t.to(dev) for t in small]
    side = torch.cuda.Stream(dev)
    main = torch.cuda.current_stream(dev)
    out: list[Workload] = []

    def resident() -> None:
        _finish(_compute(resident_x, w))

    def resident_small_step() -> None:
        _finish(_compute(torch.cat(resident_small).view(ROWS, COLS), w))

    # -- one batch ---------------------------------------------------------------------
    def pageable() -> None:
        _finish(_compute(host.to(dev), w))

    def pin_each_step() -> None:
        _finish(_compute(host.pin_memory().to(dev, non_blocking=True), w))

    def pinned_once() -> None:
        _finish(_compute(host_pinned.to(dev, non_blocking=True), w))

    def _prefetch(state: dict, src: Callable[[], object]) -> None:
        with torch.cuda.stream(side):
            state["next"] = src()
            state["ready"] = torch.cuda.Event()
            state["ready"].record(side)

    def _take(state: dict) -> object:
        if "next" not in state:
            raise RuntimeError("prefetch state lost")
        main.wait_event(state["ready"])
        return state.pop("next")

    def batch_copy() -> torch.Tensor:
        return host_pinned.to(dev, non_blocking=True)

    batch_state: dict = {}

    def prefetch() -> None:
        if "next" not in batch_state:
            _prefetch(batch_state, batch_copy)
        x = _take(batch_state)
        x.record_stream(main)
        y = _compute(x, w)  # queued on the main stream
        _prefetch(batch_state, batch_copy)  # the next batch crosses while this step computes
        _finish(y)

    out += [
        Workload("batch_pageable", "batch", "pageable", "pageable", pageable, resident),
        Workload("batch_pin_each_step", "batch", "pin_each_step", "pinned", pin_each_step, resident),
        Workload("batch_pinned_once", "batch", "pin_once_non_blocking", "pinned", pinned_once, resident),
        Workload("batch_prefetch", "batch", "side_stream_prefetch", "pinned", prefetch, resident),
    ]

    # -- many small tensors --------------------------------------------------------------
    def small_pageable() -> None:
        xs = [t.to(dev) for t in small]
        _finish(_compute(torch.cat(xs).view(ROWS, COLS), w))

    def small_copy() -> list[torch.Tensor]:
        return [t.to(dev, non_blocking=True) for t in small_pinned]

    small_state: dict = {}

    def small_prefetch() -> None:
        if "next" not in small_state:
            _prefetch(small_state, small_copy)
        xs = _take(small_state)
        for x in xs:
            x.record_stream(main)
        y = _compute(torch.cat(xs).view(ROWS, COLS), w)
        _prefetch(small_state, small_copy)
        _finish(y)

    def small_packed() -> None:
        d = flat.to(dev, non_blocking=True)
        _finish(_compute(torch.cat(list(d.chunk(N_SMALL))).view(ROWS, COLS), w))

    out += [
        Workload("small_pageable", "small", "pageable", "pageable", small_pageable, resident_small_step),
        Workload(
            "small_prefetch", "small", "side_stream_prefetch", "pinned", small_prefetch, resident_small_step
        ),
        Workload("small_packed", "small", "pack_small_tensors", "pinned", small_packed, resident_small_step),
    ]

    # -- a DataLoader (num_workers=0) ----------------------------------------------------
    chunks = [torch.randn(ROWS, COLS, generator=g) for _ in range(2)]

    def loader(pin: bool):
        it = iter(torch.utils.data.DataLoader(_Chunks(chunks), batch_size=None, pin_memory=pin))
        return lambda: next(it)

    nxt_pageable, nxt_pinned, nxt_ahead, nxt_resident = (
        loader(False),
        loader(True),
        loader(True),
        loader(False),
    )

    def loader_pageable() -> None:
        _finish(_compute(nxt_pageable().to(dev), w))

    def loader_pinned() -> None:
        _finish(_compute(nxt_pinned().to(dev, non_blocking=True), w))

    def loader_copy() -> torch.Tensor:
        return nxt_ahead().to(dev, non_blocking=True)

    loader_state: dict = {}

    def loader_prefetch() -> None:
        if "next" not in loader_state:
            _prefetch(loader_state, loader_copy)
        x = _take(loader_state)
        x.record_stream(main)
        y = _compute(x, w)
        _prefetch(loader_state, loader_copy)  # the loader's next pinned batch crosses meanwhile
        _finish(y)

    def loader_resident() -> None:
        nxt_resident()  # the loader still runs; the batch is already on the GPU
        _finish(_compute(resident_x, w))

    out += [
        Workload("loader_pageable", "loader", "pageable", "pageable", loader_pageable, loader_resident),
        Workload(
            "loader_pinned", "loader", "dataloader_pin_memory", "pinned", loader_pinned, loader_resident
        ),
        Workload(
            "loader_prefetch", "loader", "side_stream_prefetch", "pinned", loader_prefetch, loader_resident
        ),
    ]
    return out
