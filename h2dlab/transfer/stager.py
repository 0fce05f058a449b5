"""A reusable staging ring: pinned slots and worker threads kept across host-to-device copies.

A :class:`Stager` copies a pageable CPU tensor to one CUDA device in chunks. Its threads (the
caller's thread is one of them) take chunk numbers from a shared counter, copy each chunk into
one of their own pinned slots (plain ``memcpy`` through NumPy, which releases the GIL) and queue
that slot's DMA on their own CUDA stream at once, so the host copies of later chunks overlap the
PCIe transfers of earlier ones. A slot is refilled only once the event recorded behind its last
DMA has completed: that is the only wait in the loop, and no thread waits for another.

How a copy is cut into chunks is :mod:`h2dlab.transfer.stager_plan` (its names are re-exported here);
what the threads run is :mod:`h2dlab.transfer.stager_work`. One ring runs many plans (a call may pass
its own: fewer threads, smaller slots, another engine, other cuts), so the fast path keeps one
ring and picks a plan per copy size. Each plan lays its slots over the same pinned bytes; when
the layout changes after a ``non_blocking`` call, the streams are drained first.

Two engines do the host side. ``"numpy"``: each staging thread copies its chunks with NumPy;
the threads take the GIL back after every chunk to queue its DMA, and on the 16-core H200 host
a third of their time went there (see ``benchmarks/bench_staging.py``'s timeline). ``"torch"``:
the chunk is copied by ``Tensor.copy_``, which PyTorch spreads over its intra-op threads
without the GIL, so one staging thread is enough and no thread waits for the GIL.
"""

from __future__ import annotations

import itertools
import mmap
import queue
import threading
import time
import weakref
from functools import partial
from typing import Any

import torch

from h2dlab.transfer.copyargs import check_count, cuda_device, takes_plain_to
from h2dlab.transfer.pinning import host_register
from h2dlab.transfer.stager_plan import (
    DEFAULT_CHUNK_BYTES,
    ENGINES,
    MAX_CHUNK_BYTES,
    MAX_SLOTS,
    MAX_THREADS,
    MAX_WAVES,
    MIN_CHUNK_BYTES,
    MIN_STEP_BYTES,
    PLAN_KEYS,
    SLOTS_PER_THREAD,
    SPLITS,
    TAIL_SPLIT,
    WAVES,
    check_split,
    check_waves,
    chunk_plan,
    default_threads,
    fits,
    ring_shape,
)
from h2dlab.transfer.stager_work import check_plan, cut, layout_slots, release, serve, stage_chunks

__all__ = [  # the plan's names are re-exported: they imported from here before the split
    "DEFAULT_CHUNK_BYTES", "ENGINES", "MAX_CHUNK_BYTES", "MAX_SLOTS", "MAX_THREADS", "MIN_CHUNK_BYTES",
    "MIN_STEP_BYTES", "PLAN_KEYS", "SLOTS_PER_THREAD", "SPLITS", "TAIL_SPLIT", "WAVES", "Stager", "check_split",
    "chunk_plan", "default_threads", "MAX_WAVES", "check_waves", "fits", "ring_shape",
]  # fmt: skip

MiB = 1024**2


class Stager:
    """A pinned staging ring and its threads, kept for many copies to one CUDA device.

    For a loop that copies a new pageable batch every step: the ring (``threads`` x
    ``slots`` slots of ``chunk_bytes``, registered with ``cudaHostRegister``),
    the CUDA streams and the threads are made once, here.

    Parameters
    ----------
    device
        A CUDA device (``"cuda"`` is the current one, fixed at construction).
    threads
        Staging threads, the caller's included (default :func:`default_threads`).
    chunk_bytes
        Slot size (default 16 MiB), 4 KiB to 1 GiB.
    huge_pages
        Back the ring with transparent huge pages (anonymous ``mmap`` + ``MADV_HUGEPAGE``):
        fewer TLB misses while threads write it. Off by default; the benchmark measures it.
    engine
        Who copies a chunk on the host: ``"numpy"`` (each staging thread, default) or
        ``"torch"`` (``Tensor.copy_`` over PyTorch's intra-op threads; use ``threads=1``).
    slots
        Slots per thread, 2 to 8 (default 2): more let a thread copy ahead while earlier
        DMAs are still queued.
    min_step_bytes
        Smallest chunk a copy is cut into (see :func:`chunk_plan`), 4 KiB to 1 GiB
        (default 1 MiB).
    head_split, tail_split
        Pieces a copy's first chunk and last wave are cut into (:func:`chunk_plan`): 1, 2 or 4
        (default 4).
    waves
        Chunks per thread a copy is cut into (:func:`chunk_plan`), 1 to 64 (default 4).

    These are the ring's default plan; a call may pass another that fits the ring.

    Raises
    ------
    TypeError, ValueError
        For options of the wrong type or out of range, checked before CUDA is touched.
    RuntimeError
        If CUDA is unavailable.

    Examples
    --------
    >>> with Stager("cuda", threads=16) as stage:  # doctest: +SKIP
    ...     ys = [stage(batch) for batch in loader]
    """

    def __init__(
        self,
        device: str | torch.device | int = "cuda",
        *,
        threads: int | None = None,
        chunk_bytes: int | None = None,
        huge_pages: bool = False,
        engine: str = "numpy",
        slots: int = SLOTS_PER_THREAD,
        min_step_bytes: int = MIN_STEP_BYTES,
        head_split: int = TAIL_SPLIT,
        tail_split: int = TAIL_SPLIT,
        waves: int = WAVES,
    ) -> None:
        threads = default_threads() if threads is None else check_count("threads", threads, 1, MAX_THREADS)
        chunk = DEFAULT_CHUNK_BYTES if chunk_bytes is None else chunk_bytes
        chunk = check_count("chunk_bytes", chunk, MIN_CHUNK_BYTES, MAX_CHUNK_BYTES)
        if huge_pages is not False and huge_pages is not True:
            raise TypeError(f"huge_pages must be True or False, got {huge_pages!r}")
        slots = check_count("slots", slots, 2, MAX_SLOTS)
        min_step = check_count("min_step_bytes", min_step_bytes, MIN_CHUNK_BYTES, MAX_CHUNK_BYTES)
        splits = check_split("head_split", head_split), check_split("tail_split", tail_split)
        waves = check_waves(waves)
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        dev = cuda_device(device)
        if not torch.cuda.is_available():
            raise RuntimeError("staging needs CUDA, and torch.cuda.is_available() is False")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        if dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"{dev} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
        self.device, self.threads, self.chunk_bytes = dev, threads, chunk
        self.slots, self.min_step_bytes, (self.head_split, self.tail_split) = slots, min_step, splits
        self.waves = waves
        #: Set to a list to record one dict per copy with per-chunk host times and DMA events.
        self.timeline: list | None = None
        k = slots
        self.huge_pages, self.engine = huge_pages, engine
        if huge_pages:  # untouched anonymous memory: THP can back it before registration faults it in
            region = mmap.mmap(-1, threads * k * chunk)
            if hasattr(mmap, "MADV_HUGEPAGE"):
                region.madvise(mmap.MADV_HUGEPAGE)
            buf = torch.frombuffer(region, dtype=torch.uint8)  # keeps `region` alive
        else:
            buf = torch.empty(threads * k * chunk, dtype=torch.uint8)
        host_register(buf.data_ptr(), buf.numel())
        self.nbytes = buf.numel()
        self._buf = buf
        self._layouts: dict[tuple[int, int], tuple] = {}  # (threads, slot bytes) -> slots, events, next
        self._layout: tuple[int, int] = (threads, chunk)  # the layout the last call used
        self._in_flight = False  # whether the last call may have left DMAs reading the ring
        self._plans: dict[tuple, tuple] = {}  # a call's plan, checked once
        self._bounds: dict[tuple, list[int]] = {}  # chunk plans already cut, by (bytes, plan)
        self._default = (threads, chunk, engine, min_step, *splits, waves)
        layout_slots(buf, self._layout, k, self._layouts)  # the default layout, made now
        self._streams = [torch.cuda.Stream(device=dev) for _ in range(threads)]
        self._start = torch.cuda.Event()  # recorded on the caller's stream; the streams wait on it
        self._ends = [torch.cuda.Event() for _ in range(threads)]  # each stream's last DMA (non_blocking)
        self._lock = threading.Lock()
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._inboxes = [queue.SimpleQueue() for _ in range(threads - 1)]
        self._workers = [
            threading.Thread(target=serve, args=(box, self._done), name=f"h2dlab-stage-{i + 1}", daemon=True)
            for i, box in enumerate(self._inboxes)
        ]
        for t in self._workers:
            t.start()
        self._finalizer = weakref.finalize(self, release, self._inboxes, self._workers, self._streams, buf)
        self._finalizer.atexit = False  # at exit the process's memory goes anyway

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has released the ring."""
        return not self._finalizer.alive

    def close(self) -> None:
        """Stop the threads, wait for the ring's last DMA, unregister and free the ring."""
        with self._lock:
            self._finalizer()

    def __enter__(self) -> Stager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.nbytes / MiB:.0f} MiB pinned"
        return (
            f"Stager({str(self.device)!r}, threads={self.threads}, chunk_bytes={self.chunk_bytes}, "
            f"engine={self.engine!r}, slots={self.slots}, splits={self.head_split}/{self.tail_split}, "
            f"waves={self.waves}, {state})"
        )

    def plan(self, plan: dict[str, Any] | None = None) -> dict[str, Any]:
        """The plan a call with ``plan`` runs: the ring's own, with ``plan``'s keys
        (:data:`PLAN_KEYS`) in place of its own, checked against the ring.

        Raises
        ------
        TypeError, ValueError
            If a key is unknown or a value is out of range, or the plan does not fit the ring
            (more threads than it has, or ``threads x chunk_bytes`` above ``threads x chunk_bytes``
            of the ring).
        """
        return dict(zip(PLAN_KEYS, self._check(plan), strict=True))

    def _check(self, plan: dict[str, Any] | None) -> tuple:
        return check_plan(plan, self._default, self.threads, self.chunk_bytes, self._plans)

    def to_device(
        self, tensor: torch.Tensor, *, non_blocking: bool = False, plan: dict[str, Any] | None = None
    ) -> torch.Tensor:
        """Copy ``tensor`` to this stager's device; equal to ``tensor.to(device)``.

        Plain dense CPU tensors are staged (non-contiguous ones are made contiguous on the
        host first, so the result is contiguous); others take ``tensor.to()``
        (see :func:`h2dlab.transfer.copyargs.takes_plain_to`). With ``non_blocking=True`` the call returns once every
        byte has left ``tensor`` (it may be modified) and the DMAs are queued; work queued on
        the current stream sees the data. ``plan``: this call's plan (see :meth:`plan`), by
        default the ring's own.
        """
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
        if type(non_blocking) is not bool:
            raise TypeError(f"non_blocking must be True or False, got {non_blocking!r}")
        p = self._check(plan)
        if self.closed:
            raise RuntimeError("this Stager is closed")
        if takes_plain_to(tensor):
            return tensor.to(self.device, non_blocking=non_blocking)
        src = tensor.resolve_conj().resolve_neg().contiguous()
        out = torch.empty(src.shape, dtype=src.dtype, device=self.device)
        self._run(src.reshape(-1).view(torch.uint8), out.reshape(-1).view(torch.uint8), non_blocking, p)
        return out

    __call__ = to_device

    def host_copy(self, tensor: torch.Tensor, *, plan: dict[str, Any] | None = None) -> None:
        """Only the host side of :meth:`to_device`: ``tensor``'s bytes copied through the ring
        by the same threads and chunks, no DMA. For measuring what bounds a staged copy."""
        if not isinstance(tensor, torch.Tensor) or not tensor.is_cpu or tensor.layout != torch.strided:
            raise TypeError("host_copy expects a dense CPU tensor")
        p = self._check(plan)
        src = tensor.detach().resolve_conj().resolve_neg().contiguous()
        if src.numel():
            self._run(src.reshape(-1).view(torch.uint8), None, False, p)

    def _run(self, src: torch.Tensor, dst: torch.Tensor | None, non_blocking: bool, p: tuple) -> None:
        nbytes = src.numel()
        bounds = cut(nbytes, p, self._bounds)
        n_chunks = len(bounds) - 1
        threads, chunk, engine = p[0], p[1], p[2]
        users = min(threads, n_chunks)
        with self._lock:
            if self.closed:
                raise RuntimeError("this Stager is closed")
            layout = (threads, chunk)
            if layout != self._layout:  # other slots over the same bytes: none may still be read
                if self._in_flight:
                    for s in self._streams:
                        s.synchronize()
                    self._in_flight = False
                self._layout = layout
            slots = layout_slots(self._buf, layout, self.slots, self._layouts)
            current = torch.cuda.current_stream(self.device)
            streams = self._streams[:users]
            trace = None
            if self.timeline is not None:
                ref = torch.cuda.Event(enable_timing=True)
                ref.record(current)
                trace = {
                    "t0": time.perf_counter(),
                    "ref": ref,
                    "nbytes": nbytes,
                    "n_chunks": n_chunks,
                    "plan": dict(zip(PLAN_KEYS, p, strict=True)),
                    "chunks": [],
                }
                self.timeline.append(trace)
            earlier = self._in_flight  # an earlier non_blocking call's DMAs may still run
            if dst is not None:
                self._in_flight = True  # until a blocking call's end says otherwise
                self._start.record(current)  # one event, reused: no new event per stream per call
                for s in streams:
                    s.wait_event(self._start)  # `dst` may reuse memory still in use there
            counter = itertools.count()  # next() is atomic under the GIL
            failed: list = []  # a thread that fails appends to it; the others stop (a list: cheaper than an Event)
            src = src if engine == "torch" else src.numpy()  # no copy
            work = partial(
                stage_chunks,
                streams=self._streams,
                src=src,
                dst=dst,
                counter=counter,
                bounds=bounds,
                slots=slots,
            )
            work = partial(work, failed=failed, trace=trace, engine=engine)
            for w in range(1, users):
                self._inboxes[w - 1].put(partial(work, w))
            errors = []
            try:
                work(0)
            except BaseException as exc:  # noqa: BLE001 - re-raised below, after the others stop
                errors.append(exc)
            pending = users - 1
            while pending:  # wait for all, even after a failure or Ctrl-C: none may write later
                try:
                    err = self._done.get()
                    pending -= 1
                except BaseException as exc:  # noqa: BLE001
                    err = exc
                if err is not None:
                    errors.append(err)
                    failed.append(True)
            if dst is not None and (non_blocking or errors):  # the caller's stream waits for the DMAs
                for s, end in zip(streams, self._ends, strict=False):
                    end.record(s)
                    current.wait_event(end)
                    dst.record_stream(s)
            if errors:
                raise errors[0]
            if dst is not None and not non_blocking:
                # Blocking: the host waits for the DMA streams, which waited for the caller's
                # stream at the start, so every byte has landed and nothing else is pending
                # (all of them if an earlier non_blocking call may have left DMAs on others).
                for s in self._streams if earlier else streams:
                    s.synchronize()
                self._in_flight = False
