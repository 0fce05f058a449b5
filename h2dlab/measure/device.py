"""The device and host memory a run uses: which device, will it fit, fresh source bytes."""

from __future__ import annotations

import gc

import torch

from h2dlab.errors import Unavailable, UsageError
from h2dlab.recording.env import meminfo_bytes
from h2dlab.units import fmt_bytes

__all__ = [
    "check_memory",
    "empty_host_cache",
    "headroom_bytes",
    "mem_available_bytes",
    "random_source",
    "release_memory",
    "resolve_device",
    "tile",
]


def mem_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo, or None where there is no such file."""
    return meminfo_bytes("MemAvailable")


def resolve_device(device: str | torch.device) -> torch.device:
    """A ``torch.device`` for ``'cpu'``, ``'cuda'`` or ``'cuda:N'``, checked.

    Raises ``UsageError`` (a ``ValueError``) for a bad name or index, or for CUDA on a
    machine without it, with one line saying what to do.
    """
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise UsageError(f"unknown device {device!r}: use cpu, cuda or cuda:N") from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise UsageError(f"h2dlab measures copies to cuda (or host copies with cpu), not {dev.type}")
    if not torch.cuda.is_available():
        raise Unavailable(
            "CUDA is not available on this machine: time host copies on device cpu, "
            "or replay the recorded data (e.g. the dataset h200_sweep)"
        )
    n = torch.cuda.device_count()
    idx = 0 if dev.index is None else dev.index
    if idx >= n:
        raise UsageError(f"there is no {dev.type}:{idx}: this machine has {n} CUDA device(s), 0..{n - 1}")
    return torch.device("cuda", idx)


def check_memory(max_bytes: int, dev: torch.device, copies_host: int = 2, gpu: bool = True) -> None:
    """Refuse, before allocating, a size that cannot fit in host or GPU memory.

    Raises ``UsageError`` naming the size, the need and what is available.
    """
    avail = mem_available_bytes()
    need = copies_host * max_bytes
    if avail is not None and need > avail:
        raise UsageError(
            f"the largest size, {fmt_bytes(max_bytes)}, needs about {fmt_bytes(need)} of host memory "
            f"(source and a staging copy) but only {fmt_bytes(avail)} is available: choose smaller sizes"
        )
    if gpu and dev.type == "cuda":
        free, total = torch.cuda.mem_get_info(dev)
        if max_bytes > free:
            raise UsageError(
                f"the largest size, {fmt_bytes(max_bytes)}, does not fit in the {fmt_bytes(free)} free "
                f"of {fmt_bytes(total)} on {dev}: choose smaller sizes"
            )


def headroom_bytes(max_bytes: int, dev: torch.device, copies_host: int = 2) -> float:
    """Memory left once :func:`check_memory`'s need for the largest size is met.

    Parameters
    ----------
    max_bytes
        The largest size the run copies.
    dev
        The device copied to (on CUDA its free memory counts too).
    copies_host
        How many host buffers of ``max_bytes`` the run needs (as ``check_memory``).

    Returns
    -------
    float
        Bytes: the smaller of host memory (MemAvailable less ``copies_host`` times
        ``max_bytes``) and, on CUDA, free device memory less ``max_bytes``; ``inf`` where
        neither can be read; never below 0.
    """
    left = float("inf")
    avail = mem_available_bytes()
    if avail is not None:
        left = min(left, avail - copies_host * max_bytes)
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        left = min(left, free - max_bytes)
    return max(left, 0.0)


def release_memory(dev: torch.device) -> None:
    """Collect garbage and, on CUDA, return cached device blocks (after an OOM)."""
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()


def empty_host_cache() -> None:
    """Free every cached pinned block of PyTorch's caching host allocator."""
    fn = getattr(torch._C, "_host_emptyCache", None)
    if fn is None:
        raise RuntimeError("this PyTorch has no torch._C._host_emptyCache()")
    fn()


def tile(block: torch.Tensor, n: int) -> torch.Tensor:
    """A new tensor of ``n`` elements filled with ``block`` repeated: every page touched,
    random-looking content, at memcpy speed."""
    out = torch.empty(n, dtype=block.dtype)
    for off in range(0, n, block.numel()):
        k = min(block.numel(), n - off)
        out[off : off + k].copy_(block[:k])
    return out


def random_source(nbytes: int, seed: int) -> torch.Tensor:
    """A pageable buffer of random bytes (a random 16 MiB block tiled: fast, and every page touched)."""
    gen = torch.Generator().manual_seed(seed)
    return tile(torch.randint(0, 256, (min(nbytes, 16 * 1024**2),), dtype=torch.uint8, generator=gen), nbytes)
