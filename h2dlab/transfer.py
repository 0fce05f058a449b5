"""Fast host-to-device copies from pageable memory, and pinning in place.

:func:`to_device` copies a pageable CPU tensor through a shared :class:`~h2dlab.stager.Stager`
(threads copy chunks into a pinned ring while earlier chunks' DMAs run), one per device, kept
between calls and freed by :func:`free_ring`. Below a crossover size it hands the tensor to
``tensor.to()`` before doing anything else, so small copies pay nothing for it.

The crossover, thread count and slot size come from one place, ``h2dlab/fastpath.json``,
written by ``benchmarks/bench_transfer.py --fastpath`` from medians measured on a GPU host and
read once, here (:func:`fastpath`). Without it: 32 MiB, :func:`default_threads`, 16 MiB.

``fastpath.json`` (format 1; the keys marked optional may be absent, older files lack them)::

    {"format": 1, "min_bytes": int, "threads": int, "chunk_bytes": int, "huge_pages": bool,
     "engine": "numpy" | "torch" (optional, default "numpy"; see h2dlab.stager),
     "slots": int (optional, slots per thread, default 2),
     "min_step_bytes": int (optional, smallest chunk, default 1 MiB; see h2dlab.stager_plan),
     "head_split", "tail_split": 1 | 2 | 4 (optional, pieces of the first chunk and of the last
       wave, default 4; see h2dlab.stager_plan.chunk_plan),
     "waves": int (optional, chunks per thread, default 4),
     "schedule": [{"below_bytes": int, "threads": ..., "chunk_bytes": ..., "engine": ...,
       "min_step_bytes": ..., "head_split": ..., "tail_split": ..., "waves": ...}, ...]
       (optional: plans per copy size, below_bytes increasing; a copy of n bytes runs the first
       band with n < below_bytes, else the top-level plan; a band's missing keys are the
       top-level ones. Older readers ignore it and run the top-level plan at every size),
     "measured_on": {"gpu_name": ..., "cpu_affinity": ..., "date": ..., "command": ...},
     "evidence": {...}}

One ring per device runs every plan of the schedule (h2dlab.stager_plan.ring_shape sizes it).
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from pathlib import Path
from typing import Any

import torch

from h2dlab.copyargs import check_count, cuda_device, takes_plain_to
from h2dlab.pinning import host_register, host_unregister, pinned
from h2dlab.stager import Stager
from h2dlab.stager_plan import (
    DEFAULT_CHUNK_BYTES,
    ENGINES,
    MAX_CHUNK_BYTES,
    MAX_SLOTS,
    MAX_THREADS,
    MIN_CHUNK_BYTES,
    MIN_STEP_BYTES,
    PLAN_KEYS,
    SLOTS_PER_THREAD,
    TAIL_SPLIT,
    WAVES,
    check_split,
    check_waves,
    default_threads,
    ring_shape,
)

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_MIN_BYTES",
    "FASTPATH_FILE",
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

MiB = 1024**2
#: Crossover when no fastpath.json is shipped: below it ``to_device`` calls ``tensor.to()``.
DEFAULT_MIN_BYTES = 32 * MiB
FASTPATH_FILE = Path(__file__).with_name("fastpath.json")
FASTPATH_FORMAT = 1
MAX_MIN_BYTES = 2**62  # "never stage" is written as this


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def read_fastpath(source: str | Path | dict[str, Any]) -> dict[str, Any]:
    """Fast-path settings from a ``fastpath.json`` file (or its parsed dict), checked.

    Returns ``{"min_bytes", "threads", "chunk_bytes", "huge_pages", "engine", "slots",
    "min_step_bytes", "head_split", "tail_split", "waves", "schedule", "source", "measured_on"}``,
    threads capped at this machine's usable cores (``huge_pages`` may be absent: False;
    ``engine`` may be absent: ``"numpy"``; ``slots``: 2; ``min_step_bytes``: 1 MiB;
    ``head_split``, ``tail_split``: 4; ``waves``: 4; ``schedule``: ``[]``). Each band of
    ``schedule`` comes back whole: ``below_bytes`` and every key of a plan.

    Raises
    ------
    ValueError
        If the file cannot be read as format 1 or a setting is missing or out of range.
    """
    where = "the given settings" if isinstance(source, dict) else str(source)
    try:
        d = source if isinstance(source, dict) else json.loads(Path(source).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read fast-path settings {where}: {exc}") from None
    if not isinstance(d, dict) or d.get("format") != FASTPATH_FORMAT:
        raise ValueError(f"{where} is not a fastpath.json of format {FASTPATH_FORMAT}")
    try:
        out = {
            "min_bytes": check_count("min_bytes", d["min_bytes"], 0, MAX_MIN_BYTES),
            "threads": min(check_count("threads", d["threads"], 1, MAX_THREADS), _cores()),
            "chunk_bytes": check_count("chunk_bytes", d["chunk_bytes"], MIN_CHUNK_BYTES, MAX_CHUNK_BYTES),
            "huge_pages": _flag(d.get("huge_pages", False)),
            "engine": _engine(d.get("engine", "numpy")),
            "slots": check_count("slots", d.get("slots", SLOTS_PER_THREAD), 2, MAX_SLOTS),
            "min_step_bytes": check_count(
                "min_step_bytes", d.get("min_step_bytes", MIN_STEP_BYTES), MIN_CHUNK_BYTES, MAX_CHUNK_BYTES
            ),
            "head_split": check_split("head_split", d.get("head_split", TAIL_SPLIT)),
            "tail_split": check_split("tail_split", d.get("tail_split", TAIL_SPLIT)),
            "waves": check_waves(d.get("waves", WAVES)),
            "source": where,
            "measured_on": d.get("measured_on", {}),
        }
        out["schedule"] = _schedule(d.get("schedule", []), out)
        return out
    except KeyError as exc:
        raise ValueError(f"{where} has no {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def _schedule(bands: Any, top: dict[str, Any]) -> list[dict[str, Any]]:
    """A fastpath.json's ``schedule`` checked: whole bands, ``below_bytes`` increasing."""
    if not isinstance(bands, list):
        raise TypeError(f"schedule must be a list of bands, got {type(bands).__name__}")
    out, last = [], 0
    for i, b in enumerate(bands):
        if not isinstance(b, dict):
            raise TypeError(f"schedule[{i}] must be an object, got {type(b).__name__}")
        extra = set(b) - {"below_bytes", *PLAN_KEYS}
        if extra:
            raise ValueError(f"schedule[{i}] has unknown keys {sorted(extra)}")
        if "below_bytes" not in b:
            raise ValueError(f"schedule[{i}] has no 'below_bytes'")
        below = check_count(f"schedule[{i}].below_bytes", b["below_bytes"], 1, MAX_MIN_BYTES)
        if below <= last:
            raise ValueError(
                f"schedule[{i}].below_bytes must be above the band before it ({last}), got {below}"
            )
        last = below
        p = {**{k: top[k] for k in PLAN_KEYS}, **{k: b[k] for k in PLAN_KEYS if k in b}}
        out.append({
            "below_bytes": below,
            "threads": min(check_count(f"schedule[{i}].threads", p["threads"], 1, MAX_THREADS), _cores()),
            "chunk_bytes": check_count(f"schedule[{i}].chunk_bytes", p["chunk_bytes"], MIN_CHUNK_BYTES, MAX_CHUNK_BYTES),
            "engine": _engine(p["engine"]),
            "min_step_bytes": check_count(
                f"schedule[{i}].min_step_bytes", p["min_step_bytes"], MIN_CHUNK_BYTES, MAX_CHUNK_BYTES
            ),
            "head_split": check_split(f"schedule[{i}].head_split", p["head_split"]),
            "tail_split": check_split(f"schedule[{i}].tail_split", p["tail_split"]),
            "waves": check_waves(p["waves"]),
        })  # fmt: skip
    return out


def _flag(value: Any) -> bool:
    if value is not True and value is not False:
        raise TypeError(f"huge_pages must be true or false, got {value!r}")
    return value


def _engine(value: Any) -> str:
    if value not in ENGINES:
        raise TypeError(f"engine must be one of {', '.join(ENGINES)}, got {value!r}")
    return value


def _defaults() -> dict[str, Any]:
    return {
        "min_bytes": DEFAULT_MIN_BYTES,
        "threads": default_threads(),
        "chunk_bytes": DEFAULT_CHUNK_BYTES,
        "huge_pages": False,
        "engine": "numpy",
        "slots": SLOTS_PER_THREAD,
        "min_step_bytes": MIN_STEP_BYTES,
        "head_split": TAIL_SPLIT,
        "tail_split": TAIL_SPLIT,
        "waves": WAVES,
        "schedule": [],
        "source": "defaults (no fastpath.json)",
        "measured_on": {},
    }


def _shipped() -> dict[str, Any]:
    if not FASTPATH_FILE.exists():
        return _defaults()
    try:
        return read_fastpath(FASTPATH_FILE)
    except ValueError as exc:
        warnings.warn(f"{exc}; to_device uses its defaults", stacklevel=2)
        return _defaults()


def _routes(fp: dict[str, Any]) -> tuple:
    """What to_device reads per call, made once per settings: the top-level plan, the bands
    as ``(below_bytes, plan)``, and the ring's ``(threads, chunk_bytes)`` that runs them all."""
    top = {k: fp[k] for k in PLAN_KEYS}
    bands = tuple((b["below_bytes"], {k: b[k] for k in PLAN_KEYS}) for b in fp["schedule"])
    return top, bands, ring_shape([top, *(p for _, p in bands)])


_SETTINGS: dict[str, Any] = _shipped()  # the one place to_device reads its settings from
_ROUTES = _routes(_SETTINGS)


def plan_for(nbytes: int) -> dict[str, Any]:
    """The plan (threads, slot bytes, engine, cuts; :data:`h2dlab.stager_plan.PLAN_KEYS`) a
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
