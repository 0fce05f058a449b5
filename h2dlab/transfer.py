"""Fast host-to-device copies from pageable memory, and pinning in place.

``to_device`` splits a pageable CPU tensor into chunks. A pool of threads, each with two
pinned staging slots and a CUDA stream of its own, copies chunks into its slots (plain
``memcpy`` through NumPy, which releases the GIL) and queues each chunk's DMA as soon as
it is staged, so the host copies of later chunks overlap the PCIe transfers of earlier
ones.
Why not just pin the tensor? Pinning 1 GiB costs far more than one copy saves, and
``x.to("cuda")`` from pageable memory is staged by the driver through a small pinned
buffer with one thread. The ring is kept between calls (bounded) and freed by
:func:`free_ring`.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import torch

KiB, MiB = 1024, 1024**2

#: Below this many bytes ``to_device`` uses ``tensor.to()``: on the H200 we measured,
#: the driver's own staging was as fast below 32 MiB (benchmarks/results/h200.json).
DEFAULT_MIN_BYTES = 32 * MiB
#: Size of one staging slot; a chunk never exceeds it.
DEFAULT_CHUNK_BYTES = 16 * MiB
#: Smallest chunk a mid-sized tensor is split into, so that every thread gets work.
MIN_CHUNK_BYTES = 1 * MiB


def default_threads() -> int:
    """Threads for host staging copies: the usable cores, at most 12 (more gained
    nothing on the 16-core H200 host we measured)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(12, cores or 1))


def _cuda_check(err, what: str) -> None:
    code = int(getattr(err, "value", err))
    if code != 0:
        raise RuntimeError(f"{what} failed with CUDA error {code} ({err})")


def _register(ptr: int, nbytes: int) -> None:
    _cuda_check(torch.cuda.cudart().cudaHostRegister(ptr, nbytes, 0), "cudaHostRegister")


def _unregister(ptr: int) -> None:
    _cuda_check(torch.cuda.cudart().cudaHostUnregister(ptr), "cudaHostUnregister")


class _Ring:
    """Per worker thread: two pinned staging slots, their DMA-done events and a stream."""

    SLOTS_PER_THREAD = 2  # one being filled while the other's DMA runs

    def __init__(self, device: torch.device, threads: int, chunk_bytes: int) -> None:
        self.device, self.threads, self.chunk_bytes = device, threads, chunk_bytes
        self.n_slots = self.SLOTS_PER_THREAD * threads
        # Plain host memory registered with CUDA: it stays out of PyTorch's caching
        # host allocator, so freeing the ring really returns the memory.
        self.buf = torch.empty(self.n_slots * chunk_bytes, dtype=torch.uint8)
        _register(self.buf.data_ptr(), self.buf.numel())
        self.registered = True
        slots = [self.buf[i * chunk_bytes : (i + 1) * chunk_bytes] for i in range(self.n_slots)]
        k = self.SLOTS_PER_THREAD
        self.slots = [slots[w * k : (w + 1) * k] for w in range(threads)]
        self.slots_np = [[s.numpy() for s in ws] for ws in self.slots]
        self.events = [[torch.cuda.Event() for _ in range(k)] for _ in range(threads)]
        self.streams = [torch.cuda.Stream(device=device) for _ in range(threads)]
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="h2dlab-stage")
        self.lock = threading.Lock()

    def close(self) -> None:
        with self.lock:
            self.pool.shutdown(wait=True)
            if self.registered:
                for s in self.streams:  # no DMA may still read the ring
                    s.synchronize()
                _unregister(self.buf.data_ptr())
                self.registered = False
            self.slots = self.slots_np = []
            self.buf = None


_RINGS: dict[tuple, _Ring] = {}
_RINGS_LOCK = threading.Lock()


def _ring(device: torch.device, threads: int, chunk_bytes: int) -> _Ring:
    key = (device.index, threads, chunk_bytes)
    with _RINGS_LOCK:
        ring = _RINGS.get(key)
        if ring is None:
            # One ring per device at a time keeps the pinned footprint bounded.
            for k in [k for k in _RINGS if k[0] == device.index]:
                _RINGS.pop(k).close()
            ring = _RINGS[key] = _Ring(device, threads, chunk_bytes)
        return ring


def free_ring() -> int:
    """Release every staging ring (unregister and free it). Returns the bytes freed."""
    with _RINGS_LOCK:
        freed = sum(r.n_slots * r.chunk_bytes for r in _RINGS.values())
        for r in _RINGS.values():
            r.close()
        _RINGS.clear()
    return freed


def ring_bytes() -> int:
    """Pinned bytes currently held by staging rings."""
    with _RINGS_LOCK:
        return sum(r.n_slots * r.chunk_bytes for r in _RINGS.values())


def to_device(
    tensor: torch.Tensor,
    device: str | torch.device = "cuda",
    *,
    non_blocking: bool = False,
    num_threads: int | None = None,
    chunk_bytes: int | None = None,
    min_bytes: int | None = None,
) -> torch.Tensor:
    """Copy a CPU tensor to a CUDA device, fast from pageable memory.

    Returns a tensor equal to ``tensor.to(device)``, contiguous, of the same shape
    and dtype.

    Parameters
    ----------
    tensor
        Any dense CPU tensor (any dtype and shape; non-contiguous views are made
        contiguous on the host first). Tensors already pinned, already on a GPU,
        non-strided, or smaller than ``min_bytes`` take ``tensor.to()`` directly.
    device
        A CUDA device.
    non_blocking
        If False (default) the call returns when the data is on the device. If True
        it returns once every chunk is staged and its DMA queued on the workers'
        streams, which the caller's current stream waits on: work queued on the
        current stream sees the data, and the source tensor may be modified as soon
        as the call returns (every byte has been copied out of it by then).
        Synchronise before reading the result from another stream or the host.
    num_threads
        Host staging threads, each with its own CUDA stream and two pinned slots
        (default :func:`default_threads`).
    chunk_bytes
        Staging slot size (default 16 MiB): the ring holds ``2 * num_threads`` slots.
    min_bytes
        Smaller tensors take ``tensor.to()`` (default 32 MiB: below it the driver's
        own staging was as fast on the H200 we measured; see benchmarks/).

    Raises
    ------
    TypeError
        If ``tensor`` is not a tensor.
    ValueError
        If ``device`` is not a CUDA device, or the options are out of range.
    RuntimeError
        If CUDA is not available.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"to_device expects a torch.Tensor, got {type(tensor).__name__}")
    floor = DEFAULT_MIN_BYTES if min_bytes is None else int(min_bytes)
    nbytes = tensor.numel() * tensor.element_size()
    dev = torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"to_device copies to a CUDA device, got {str(dev)!r}; use tensor.to() for others")
    if nbytes < max(floor, 1) and floor >= 0:  # the cheap test first: small copies pay no overhead
        return tensor.to(dev, non_blocking=non_blocking)
    threads = default_threads() if num_threads is None else int(num_threads)
    chunk = DEFAULT_CHUNK_BYTES if chunk_bytes is None else int(chunk_bytes)
    if threads < 1 or chunk < 4 * KiB or floor < 0:
        raise ValueError("num_threads must be >= 1, chunk_bytes >= 4096 and min_bytes >= 0")
    if not torch.cuda.is_available():
        raise RuntimeError("to_device needs CUDA, and torch.cuda.is_available() is False")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if tensor.device.type != "cpu" or tensor.layout != torch.strided or tensor.is_pinned():
        return tensor.to(dev, non_blocking=non_blocking)

    src = tensor.contiguous()
    out = torch.empty(src.shape, dtype=src.dtype, device=dev)
    src_np = src.reshape(-1).view(torch.uint8).numpy()
    dst = out.reshape(-1).view(torch.uint8)
    ring = _ring(dev, threads, chunk)
    # Mid-sized tensors are cut finer so that every thread has a chunk to copy.
    step = min(chunk, max(MIN_CHUNK_BYTES, -(-nbytes // threads)))
    step = -(-step // (4 * KiB)) * 4 * KiB
    n_chunks = -(-nbytes // step)

    with ring.lock:
        current = torch.cuda.current_stream(dev)
        for s in ring.streams:
            s.wait_stream(current)  # `out` may reuse memory still in use there
        counter = itertools.count()  # next() is atomic under the GIL
        failed = threading.Event()

        def work(w: int) -> None:
            # Each worker copies whole chunks into its own two slots and queues their
            # DMA on its own stream: no hand-off between threads per chunk.
            slots, slots_np, events, stream = ring.slots[w], ring.slots_np[w], ring.events[w], ring.streams[w]
            k = 0
            try:
                while not failed.is_set():
                    i = next(counter)
                    if i >= n_chunks:
                        return
                    off = i * step
                    n = min(step, nbytes - off)
                    j = k % len(slots)
                    k += 1
                    events[j].synchronize()  # this slot's previous DMA has finished
                    np.copyto(slots_np[j][:n], src_np[off : off + n])
                    with torch.cuda.stream(stream):
                        dst[off : off + n].copy_(slots[j][:n], non_blocking=True)
                        events[j].record(stream)
            except BaseException:
                failed.set()
                raise

        futures = [ring.pool.submit(work, w) for w in range(min(threads, n_chunks))]
        errors = []
        for f in futures:  # wait for all, even after a failure: no thread may write later
            try:
                f.result()
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
        for s in ring.streams:
            current.wait_stream(s)
            out.record_stream(s)
        if errors:
            raise errors[0]
        if not non_blocking:
            current.synchronize()
    return out


@contextmanager
def pinned(tensor: torch.Tensor) -> Iterator[torch.Tensor]:
    """Pin an existing contiguous CPU tensor in place for the ``with`` block.

    Uses ``cudaHostRegister``, so no copy is made: inside the block
    ``tensor.is_pinned()`` is True and ``tensor.to("cuda", non_blocking=True)`` is a
    true asynchronous DMA. On exit the device is synchronised (no DMA may still read
    the memory) and the memory is unregistered, also when the block raises.

    Raises
    ------
    TypeError, ValueError
        For what cannot be pinned in place: not a tensor, not on the CPU, not
        contiguous, empty, or already pinned.
    RuntimeError
        If CUDA is unavailable or the driver refuses the registration.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"pinned() expects a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"pinned() pins CPU memory; this tensor is on {tensor.device}")
    if not tensor.is_contiguous():
        raise ValueError("pinned() needs a contiguous tensor: call .contiguous() first (that copies)")
    if tensor.numel() == 0:
        raise ValueError("pinned() cannot pin an empty tensor")
    if not torch.cuda.is_available():
        raise RuntimeError("pinned() needs CUDA, and torch.cuda.is_available() is False")
    if tensor.is_pinned():
        raise ValueError("this tensor is already pinned; use it as it is")
    ptr, nbytes = tensor.data_ptr(), tensor.numel() * tensor.element_size()
    _register(ptr, nbytes)
    try:
        yield tensor
    finally:
        torch.cuda.synchronize()
        _unregister(ptr)
