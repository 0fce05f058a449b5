"""The fast path's settings file, ``h2dlab/transfer/fastpath.json``: its format, and reading it checked
(:func:`read_fastpath`). :mod:`h2dlab.transfer.fastpath` reads it once and runs what it says.

``fastpath.json`` (format 1; the keys marked optional may be absent, older files lack them)::

    {"format": 1, "min_bytes": int, "threads": int, "chunk_bytes": int, "huge_pages": bool,
     "engine": "numpy" | "torch" (optional, default "numpy"; see h2dlab.transfer.stager),
     "slots": int (optional, slots per thread, default 2),
     "min_step_bytes": int (optional, smallest chunk, default 1 MiB; see h2dlab.transfer.stager_plan),
     "head_split", "tail_split": 1 | 2 | 4 (optional, pieces of the first chunk and of the last
       wave, default 4; see h2dlab.transfer.stager_plan.chunk_plan),
     "waves": int (optional, chunks per thread, default 4),
     "schedule": [{"below_bytes": int, "threads": ..., "chunk_bytes": ..., "engine": ...,
       "min_step_bytes": ..., "head_split": ..., "tail_split": ..., "waves": ...}, ...]
       (optional: plans per copy size, below_bytes increasing; a copy of n bytes runs the first
       band with n < below_bytes, else the top-level plan; a band's missing keys are the
       top-level ones. Older readers ignore it and run the top-level plan at every size),
     "measured_on": {"gpu_name": ..., "cpu_affinity": ..., "date": ..., "command": ...},
     "evidence": {...}}

One ring per device runs every plan of the schedule (h2dlab.transfer.stager_plan.ring_shape sizes it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from h2dlab.transfer.copyargs import check_count
from h2dlab.transfer.stager_plan import (
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
)

__all__ = [
    "DEFAULT_MIN_BYTES",
    "FASTPATH_FILE",
    "FASTPATH_FORMAT",
    "MAX_MIN_BYTES",
    "defaults",
    "read_fastpath",
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
    except (OSError, ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested past the parser
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


def defaults() -> dict[str, Any]:
    """The settings when no fastpath.json is shipped (as :func:`read_fastpath` returns them)."""
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
