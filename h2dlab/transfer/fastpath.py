"""Fast host-to-device copies from pageable memory, and pinning in place.

:func:`to_device` copies a pageable CPU tensor through a shared :class:`~h2dlab.transfer.stager.Stager`
(threads copy chunks into a pinned ring while earlier chunks' DMAs run), one per device, kept
between calls and freed by :func:`free_ring`. Below a crossover size it hands the tensor to
``tensor.to()`` before doing anything else, so small copies pay nothing for it.

The crossover, thread count and slot size come from one place, ``h2dlab/transfer/fastpath.json``,
written by ``benchmarks/bench_transfer.py --fastpath`` from medians measured on a GPU host and
read once, here (:func:`fastpath`). Without it: 32 MiB, :func:`default_threads`, 16 MiB.

The file's format and its checks are :mod:`h2dlab.transfer.fastpath_file`.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

import torch

from h2dlab.escape import terminal_text
from h2dlab.transfer.copyargs import check_count, cuda_device, takes_plain_to
from h2dlab.transfer.fastpath_file import (
    DEFAULT_MIN_BYTES,
    FASTPATH_FILE,
    FASTPATH_FORMAT,
    MAX_MIN_BYTES,
    defaults,
    read_fastpath,
)
from h2dlab.transfer.pinning import host_register, host_unregister, pinned
from h2dlab.transfer.stager import Stager
from h2dlab.transfer.stager_plan import (
    DEFAULT_CHUNK_BYTES,
    MAX_CHUNK_BYTES,
    MAX_THREADS,
    MIN_CHUNK_BYTES,
    PLAN_KEYS,
    default_threads,
    ring_shape,
)

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_MIN_BYTES",
    "FASTPATH_FILE",
    "FASTPATH_FORMAT",
    "MAX_MIN_BYTES",
    "Stager",
    "default_threads",
    "fastpath",
    "free_ring",
    "host_register",
    "host_unregister",
    "pinned",
    "plan_for",
    "read_fastpath",
    "ring_bytes",
    "to_device",
    "use_fastpath",
]


def _shipped() -> dict[str, Any]:
    if not FASTPATH_FILE.exists():
        return defaults()
    try:
        return read_fastpath(FASTPATH_FILE)
    except ValueError as exc:
        warnings.warn(terminal_text(f"{exc}; to_device uses its defaults"), stacklevel=2)  # a file's text
        return defaults()


def _routes(fp: dict[str, Any]) -> tuple:
    """What to_device reads per call, made once per settings: the top-level plan, the bands
    as ``(below_bytes, plan)``, and the ring's ``(threads, chunk_bytes)`` that runs them all."""
    top = {k: fp[k] for k in PLAN_KEYS}
    bands = tuple((b["below_bytes"], {k: b[k] for k in PLAN_KEYS}) for b in fp["schedule"])
    return top, bands, ring_shape([top, *(p for _, p in bands)])


_SETTINGS: dict[str, Any] = _shipped()  # the one place to_device reads its settings from
_ROUTES = _routes(_SETTINGS)


def plan_for(nbytes: int) -> dict[str, Any]:
    """The plan (threads, slot bytes, engine, cuts; :data:`h2dlab.transfer.stager_plan.PLAN_KEYS`) a
    staged copy of ``nbytes`` runs with the settings in use: its band of the schedule, else the
    top-level plan."""
    top, bands, _ = _ROUTES
    return dict(next((p for below, p in bands if nbytes < below), top))


def fastpath() -> dict[str, Any]:
    """The settings :func:`to_device` uses now, and where they came from."""
    return dict(_SETTINGS)


def use_fastpath(source: str | Path | dict[str, Any] | None = None) -> dict[str, Any]:
    """Make :func:`to_device` use other settings in this process: a ``fastpath.json`` path or
    dict (see :func:`read_fastpath`), or None for the shipped file. Returns the previous
    settings (pass them back to restore)."""
    global _SETTINGS, _ROUTES
    prev = dict(_SETTINGS)
    if source is None:
        new = _shipped()
    elif isinstance(source, dict) and "source" in source and "format" not in source:
        new = read_fastpath({**source, "format": FASTPATH_FORMAT})  # a dict from fastpath()
        new["source"] = source["source"]
    else:
        new = read_fastpath(source)
    _ROUTES = _routes(new)
    _SETTINGS = new
    return prev


_DEVICES: dict[Any, torch.device] = {}  # checked device arguments (str, torch.device)
_STAGERS: dict[int, Stager] = {}
_STAGERS_LOCK = threading.Lock()


def _stager(dev: torch.device, threads: int, chunk: int, fp: dict[str, Any]) -> Stager:
    with _STAGERS_LOCK:
        st = _STAGERS.get(dev.index)
        keys = ("huge_pages", "engine", "slots", "min_step_bytes", "head_split", "tail_split", "waves")
        want = (threads, chunk, *(fp[k] for k in keys))
        if st is None or st.closed or (st.threads, st.chunk_bytes, *(getattr(st, k) for k in keys)) != want:
            if st is not None:  # one ring per device at a time keeps the pinned memory bounded
                st.close()
            st = _STAGERS[dev.index] = Stager(
                dev,
                threads=threads,
                chunk_bytes=chunk,
                huge_pages=fp["huge_pages"],
                engine=fp["engine"],
                slots=fp["slots"],
                min_step_bytes=fp["min_step_bytes"],
                head_split=fp["head_split"],
                tail_split=fp["tail_split"],
                waves=fp["waves"],
            )
        return st


def _other_device(device: Any) -> torch.device | None:
    """``device`` as a ``torch.device`` when it names a real device that is not CUDA (``"cpu"``,
    ``"mps"``, ``"xpu:0"``), else None (CUDA devices and bad names go to ``cuda_device``)."""
    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str):
        try:
            dev = torch.device(device)
        except RuntimeError:
            return None
    else:
        return None
    return None if dev.type in ("cuda", "meta") else dev


def free_ring() -> int:
    """Release every ring :func:`to_device` keeps (threads stopped, memory unregistered and
    freed). Returns the bytes freed."""
    with _STAGERS_LOCK:
        freed = sum(s.nbytes for s in _STAGERS.values() if not s.closed)
        for s in _STAGERS.values():
            s.close()
        _STAGERS.clear()
    return freed


def ring_bytes() -> int:
    """Pinned bytes currently held by :func:`to_device`'s rings."""
    with _STAGERS_LOCK:
        return sum(s.nbytes for s in _STAGERS.values() if not s.closed)


def to_device(
    tensor: torch.Tensor,
    device: str | torch.device | int = "cuda",
    *,
    non_blocking: bool = False,
    num_threads: int | None = None,
    chunk_bytes: int | None = None,
    min_bytes: int | None = None,
) -> torch.Tensor:
    """Copy a CPU tensor to a CUDA device, fast from pageable memory; any other device is
    ``tensor.to(device)``, so device-agnostic code can call it in place of ``.to()``.

    Returns a tensor equal to ``tensor.to(device)``, of the same shape and dtype. Tensors of
    fewer than ``min_bytes`` bytes take ``tensor.to(device, non_blocking=...)`` at once. So do
    tensors staging cannot help: already pinned or on a GPU, sparse, quantized, a subclass,
    tracking gradients, or empty. Larger dense CPU tensors are staged (any dtype: bytes are
    copied; non-contiguous views are made contiguous on the host first, and the result is
    contiguous).

    Parameters
    ----------
    tensor
        The tensor to copy.
    device
        A CUDA device: ``"cuda"``, ``"cuda:1"``, a ``torch.device`` or an index. Another
        device (``"cpu"``, ``"mps"``, ``torch.device("cpu")``) takes ``tensor.to(device)`` untouched.
    non_blocking
        If False (default) the call returns when the data is on the device. If True, a staged
        copy returns once every chunk is staged and its DMA queued on the workers' streams,
        which the caller's current stream waits on: work queued on the current stream sees the
        data, and the source may be modified at once (every byte has left it). Synchronise
        before reading the result from another stream or the host.
    num_threads
        Staging threads, 1 to 256 (default: the plan :func:`plan_for` gives this size, from
        :func:`fastpath`'s schedule, measured per size by the benchmark).
    chunk_bytes
        Staging slot size, 4 KiB to 1 GiB (default as ``num_threads``): the ring holds
        ``slots * num_threads`` slots (``slots`` from :func:`fastpath`, default 2). Giving
        either runs one plan at every size (the schedule is not used).
    min_bytes
        The crossover, >= 0 (default from :func:`fastpath`: measured by the benchmark).

    Raises
    ------
    TypeError
        If ``tensor`` is not a tensor, ``device`` not a device, ``non_blocking`` not a bool or
        an option not an integer.
    ValueError
        If ``device`` names no device (or ``"meta"``), an option is out of range, or ``tensor`` is a meta
        tensor (no data).
    RuntimeError
        If a staged copy is needed and CUDA is not available.
    """
    # The cheap checks first: below the crossover this function adds well under 2 us to .to().
    try:
        dev = _DEVICES[device]
    except (KeyError, TypeError):
        dev = _other_device(device) or cuda_device(device)
        if isinstance(device, (str, torch.device)) and len(_DEVICES) < 64:
            _DEVICES[device] = dev
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"to_device expects a torch.Tensor, got {type(tensor).__name__}")
    if non_blocking is not False and non_blocking is not True:
        raise TypeError(f"non_blocking must be True or False, got {non_blocking!r}")
    if dev.type != "cuda":  # device-agnostic code: any other target is plain .to(), untouched
        return tensor.to(dev, non_blocking=True) if non_blocking else tensor.to(dev)
    fp = _SETTINGS
    if min_bytes is None and num_threads is None and chunk_bytes is None:
        floor = fp["min_bytes"]
    else:
        floor = (
            fp["min_bytes"] if min_bytes is None else check_count("min_bytes", min_bytes, 0, MAX_MIN_BYTES)
        )
        if num_threads is not None:
            num_threads = check_count("num_threads", num_threads, 1, MAX_THREADS)
        if chunk_bytes is not None:
            chunk_bytes = check_count("chunk_bytes", chunk_bytes, MIN_CHUNK_BYTES, MAX_CHUNK_BYTES)
    if tensor.is_meta:
        raise ValueError("to_device: a meta tensor has no data to copy")
    try:
        nbytes = tensor.nbytes
    except RuntimeError:  # sparse layouts have no nbytes: .to() is their copy
        nbytes = 0
    if nbytes < floor or nbytes == 0:  # a keyword costs .to() ~0.3 us: leave it out when False
        return tensor.to(dev, non_blocking=True) if non_blocking else tensor.to(dev)

    if not torch.cuda.is_available():
        raise RuntimeError("to_device needs CUDA to stage a copy, and torch.cuda.is_available() is False")
    if takes_plain_to(tensor):  # pinned, on a GPU, a subclass, tracking gradients: no ring needed
        return tensor.to(dev, non_blocking=non_blocking)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    top, bands, (threads, chunk) = _ROUTES
    if num_threads is None and chunk_bytes is None:  # the plan measured for this size
        plan = next((p for below, p in bands if nbytes < below), top)
    else:  # the caller's threads and slots, one plan at every size, a ring of its own
        threads = fp["threads"] if num_threads is None else num_threads
        chunk = fp["chunk_bytes"] if chunk_bytes is None else chunk_bytes
        plan = {**top, "threads": threads, "chunk_bytes": chunk}
    st = _stager(dev, threads, chunk, fp)
    return st.to_device(tensor, non_blocking=non_blocking, plan=plan)
