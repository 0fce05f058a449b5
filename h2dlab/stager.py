"""A reusable staging ring: pinned slots and worker threads kept across host-to-device copies.

A :class:`Stager` copies a pageable CPU tensor to one CUDA device in chunks. Its threads (the
caller's thread is one of them) take chunk numbers from a shared counter, copy each chunk into
one of their own pinned slots (plain ``memcpy`` through NumPy, which releases the GIL) and queue
that slot's DMA on their own CUDA stream at once, so the host copies of later chunks overlap the
PCIe transfers of earlier ones. A slot is refilled only once the event recorded behind its last
DMA has completed: that is the only wait in the loop, and no thread waits for another.

How a copy is cut into chunks is :mod:`h2dlab.stager_plan` (its names are re-exported here).

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

import numpy as np
import torch

from h2dlab.copyargs import check_count, cuda_device, takes_plain_to
from h2dlab.pinning import host_register, host_unregister
from h2dlab.stager_plan import (
    DEFAULT_CHUNK_BYTES,
    ENGINES,
    MAX_CHUNK_BYTES,
    MAX_SLOTS,
    MAX_THREADS,
    MIN_CHUNK_BYTES,
    MIN_STEP_BYTES,
    SLOTS_PER_THREAD,
    SPLITS,
    TAIL_SPLIT,
    WAVES,
    check_split,
    chunk_plan,
    default_threads,
)

__all__ = [  # the plan's names are re-exported: they imported from here before the split
    "DEFAULT_CHUNK_BYTES", "ENGINES", "MAX_CHUNK_BYTES", "MAX_SLOTS", "MAX_THREADS", "MIN_CHUNK_BYTES",
    "MIN_STEP_BYTES", "SLOTS_PER_THREAD", "SPLITS", "TAIL_SPLIT", "WAVES", "Stager", "check_split",
    "chunk_plan", "default_threads",
]  # fmt: skip

MiB = 1024**2


def _serve(inbox: queue.SimpleQueue, done: queue.SimpleQueue) -> None:
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


def _release(inboxes: list, workers: list, streams: list, buf: torch.Tensor) -> None:
    for box in inboxes:
        box.put(None)
    for t in workers:
        if t is not threading.current_thread():  # collected in a worker: it ends by itself
            t.join()
    for s in streams:  # no DMA may still read the ring
        s.synchronize()
    host_unregister(buf.data_ptr())


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
    ) -> None:
        threads = default_threads() if threads is None else check_count("threads", threads, 1, MAX_THREADS)
        chunk = DEFAULT_CHUNK_BYTES if chunk_bytes is None else chunk_bytes
        chunk = check_count("chunk_bytes", chunk, MIN_CHUNK_BYTES, MAX_CHUNK_BYTES)
        if huge_pages is not False and huge_pages is not True:
            raise TypeError(f"huge_pages must be True or False, got {huge_pages!r}")
        slots = check_count("slots", slots, 2, MAX_SLOTS)
        min_step = check_count("min_step_bytes", min_step_bytes, MIN_CHUNK_BYTES, MAX_CHUNK_BYTES)
        splits = check_split("head_split", head_split), check_split("tail_split", tail_split)
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
        slot = [buf[i * chunk : (i + 1) * chunk] for i in range(threads * k)]
        self._slots = [slot[w * k : (w + 1) * k] for w in range(threads)]
        self._slots_np = [[s.numpy() for s in ws] for ws in self._slots]
        self._events = [[torch.cuda.Event() for _ in range(k)] for _ in range(threads)]
        self._streams = [torch.cuda.Stream(device=dev) for _ in range(threads)]
        self._next = [0] * threads  # each thread's next slot, kept across calls
        self._lock = threading.Lock()
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._inboxes = [queue.SimpleQueue() for _ in range(threads - 1)]
        self._workers = [
            threading.Thread(target=_serve, args=(box, self._done), name=f"h2dlab-stage-{i + 1}", daemon=True)
            for i, box in enumerate(self._inboxes)
        ]
        for t in self._workers:
            t.start()
        self._finalizer = weakref.finalize(self, _release, self._inboxes, self._workers, self._streams, buf)
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
            f"engine={self.engine!r}, slots={self.slots}, splits={self.head_split}/{self.tail_split}, {state})"
        )

    def to_device(self, tensor: torch.Tensor, *, non_blocking: bool = False) -> torch.Tensor:
        """Copy ``tensor`` to this stager's device; equal to ``tensor.to(device)``.

        Plain dense CPU tensors are staged (non-contiguous ones are made contiguous on the
        host first, so the result is contiguous); others take ``tensor.to()``
        (see :func:`h2dlab.copyargs.takes_plain_to`). With ``non_blocking=True`` the call returns once every
        byte has left ``tensor`` (it may be modified) and the DMAs are queued; work queued on
        the current stream sees the data.
        """
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
        if type(non_blocking) is not bool:
            raise TypeError(f"non_blocking must be True or False, got {non_blocking!r}")
        if self.closed:
            raise RuntimeError("this Stager is closed")
        if takes_plain_to(tensor):
            return tensor.to(self.device, non_blocking=non_blocking)
        src = tensor.resolve_conj().resolve_neg().contiguous()
        out = torch.empty(src.shape, dtype=src.dtype, device=self.device)
        self._run(src.reshape(-1).view(torch.uint8).numpy(), out.reshape(-1).view(torch.uint8), non_blocking)
        return out

    __call__ = to_device

    def host_copy(self, tensor: torch.Tensor) -> None:
        """Only the host side of :meth:`to_device`: ``tensor``'s bytes copied through the ring
        by the same threads and chunks, no DMA. For measuring what bounds a staged copy."""
        if not isinstance(tensor, torch.Tensor) or not tensor.is_cpu or tensor.layout != torch.strided:
            raise TypeError("host_copy expects a dense CPU tensor")
        src = tensor.detach().resolve_conj().resolve_neg().contiguous()
        if src.numel():
            self._run(src.reshape(-1).view(torch.uint8).numpy(), None, False)

    def _run(self, src_np: np.ndarray, dst: torch.Tensor | None, non_blocking: bool) -> None:
        nbytes = src_np.size
        bounds = chunk_plan(nbytes, self.threads, self.chunk_bytes, self.min_step_bytes,
                            head_split=self.head_split, tail_split=self.tail_split)  # fmt: skip
        n_chunks = len(bounds) - 1
        users = min(self.threads, n_chunks)
        with self._lock:
            if self.closed:
                raise RuntimeError("this Stager is closed")
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
                    "chunks": [],
                }
                self.timeline.append(trace)
            if dst is not None:
                for s in streams:
                    s.wait_stream(current)  # `dst` may reuse memory still in use there
            counter = itertools.count()  # next() is atomic under the GIL
            failed = threading.Event()
            src = torch.from_numpy(src_np) if self.engine == "torch" else src_np  # no copy
            work = partial(self._work, src=src, dst=dst, counter=counter, bounds=bounds)
            work = partial(work, failed=failed, trace=trace)
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
                    failed.set()
            if dst is not None:
                for s in streams:
                    current.wait_stream(s)
                    dst.record_stream(s)
            if errors:
                raise errors[0]
            if dst is not None and not non_blocking:
                current.synchronize()

    def _work(self, w, *, src, dst, counter, bounds, failed, trace) -> None:
        # One thread's share: whole chunks into its own slots, each DMA queued on its own stream.
        slots, events, stream = self._slots[w], self._events[w], self._streams[w]
        slots_host = slots if self.engine == "torch" else self._slots_np[w]
        copy = torch.Tensor.copy_ if self.engine == "torch" else np.copyto
        n_chunks, k, n_slots = len(bounds) - 1, self._next[w], len(slots)
        clock = time.perf_counter
        try:
            with torch.cuda.stream(stream):
                while not failed.is_set():
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
            failed.set()
            raise
        finally:
            self._next[w] = k % n_slots
