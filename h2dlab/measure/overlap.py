"""Timelines of a host-to-device copy beside compute, for the primer: ``overlap(spec)``.

A timeline is not the measurement table: one row per operation (copy or compute) per
scenario and rep, with its own small schema (:data:`TIMELINE_COLUMNS`), checked by
:func:`validate_timeline` and written whole or not at all by :func:`save_timeline`.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from h2dlab.errors import Unavailable, UsageError
from h2dlab.measure.device import random_source, resolve_device
from h2dlab.measure.gc_steady import steady_gc
from h2dlab.measure.spec import OverlapSpec
from h2dlab.recording import datasets
from h2dlab.recording.env import collect_env

__all__ = [
    "SCENARIOS",
    "TIMELINE_COLUMNS",
    "TIMELINE_SUFFIXES",
    "overlap",
    "save_timeline",
    "validate_timeline",
]

#: Columns of an overlap timeline and their types (one row per operation).
TIMELINE_COLUMNS: dict[str, str] = {
    "run_id": "str",
    "scenario": "str",
    "rep": "int",
    "op": "str",
    "stream": "str",
    "start_ms": "float",
    "end_ms": "float",
    "host_return_ms": "float",
}
#: File types a timeline is written as.
TIMELINE_SUFFIXES = (".csv", ".csv.gz")

SCENARIOS = {
    "serial_pinned": "pinned copy, then compute, both on the default stream",
    "overlap_pinned": "pinned copy on a side stream (non_blocking) while compute runs on the default stream",
    "overlap_pageable": "pageable copy on a side stream (non_blocking=True) while compute runs on the default stream",
}


def validate_timeline(df: pd.DataFrame, *, source: str = "timeline") -> pd.DataFrame:
    """The timeline with its columns in order and typed; ``datasets.SchemaError`` if it is not one.

    Checks: every column present, numbers where numbers belong, known scenarios and
    ops, and no operation that ends before it starts.
    """
    missing = [c for c in TIMELINE_COLUMNS if c not in df.columns]
    if missing:
        raise datasets.SchemaError(f"{source}: not an overlap timeline (missing {', '.join(missing)})")
    out = df[list(TIMELINE_COLUMNS)].copy()
    try:
        for col, kind in TIMELINE_COLUMNS.items():
            out[col] = out[col].astype({"str": str, "int": "int64", "float": "float64"}[kind])
    except (TypeError, ValueError) as exc:
        raise datasets.SchemaError(f"{source}: a column holds values of the wrong type ({exc})") from None
    unknown = set(out["scenario"]) - set(SCENARIOS)
    if unknown:
        raise datasets.SchemaError(f"{source}: unknown scenario {sorted(unknown)[0]!r}")
    if not set(out["op"]) <= {"copy", "compute"}:
        raise datasets.SchemaError(f"{source}: op must be copy or compute")
    if (out["end_ms"] < out["start_ms"]).any():
        raise datasets.SchemaError(f"{source}: an operation ends before it starts")
    return out


def save_timeline(df: pd.DataFrame, path: str | Path, env: dict[str, Any] | None = None) -> Path:
    """Validate a timeline and write it (temporary file, then rename), with its env.json.

    ``env`` defaults to ``df.attrs['env']``.
    """
    path = Path(path)
    if not path.name.endswith(TIMELINE_SUFFIXES):
        raise UsageError(f"cannot write {path.name!r}: a timeline is a {' or '.join(TIMELINE_SUFFIXES)} file")
    table = validate_timeline(df, source=str(path))
    gz = path.name.endswith(".gz")
    datasets.atomic_write(path, lambda p: table.to_csv(p, index=False, compression="gzip" if gz else None))
    env = env if env is not None else df.attrs.get("env")
    if env is not None:
        datasets.write_env(env, datasets.env_path(path))
    return path


def overlap(spec: OverlapSpec | None = None, *, argv: list[str] | None = None) -> pd.DataFrame:
    """Timelines of a host-to-device copy beside independent compute, per scenario.

    Every operation is bracketed by CUDA events; times are ms after a start event
    recorded on the default stream once the device is idle, and ``host_return_ms``
    is when the launching call returned to Python (host clock, same origin). A
    pageable copy with ``non_blocking=True`` is staged by the driver, so its call
    returns late and the compute launched after it cannot overlap it: the timelines
    show this rather than assert it.

    Returns
    -------
    pandas.DataFrame
        :data:`TIMELINE_COLUMNS`; ``attrs['env']`` the fingerprint with the spec.
    """
    spec = spec if spec is not None else OverlapSpec()
    size_bytes, reps = spec.size_bytes, spec.reps
    if str(spec.device).partition(":")[0] == "cuda" and not torch.cuda.is_available():
        raise Unavailable(
            "overlap timelines need CUDA, which this machine lacks: replay the recorded timeline "
            "instead (the dataset h200_overlap)"
        )
    dev = resolve_device(spec.device)
    if dev.type != "cuda":
        raise UsageError("overlap timelines need CUDA: use a cuda device, or replay the dataset h200_overlap")
    torch.cuda.set_device(dev)
    pageable = random_source(size_bytes, 1)
    pinned_src = torch.empty(size_bytes, dtype=torch.uint8, pin_memory=True)
    pinned_src.copy_(pageable)
    dst = torch.empty(size_bytes, dtype=torch.uint8, device=dev)
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    side = torch.cuda.Stream(dev)
    main = torch.cuda.current_stream(dev)

    def compute(k: int) -> None:
        for _ in range(k):
            torch.mm(a, a)

    # Calibrate the compute to take about as long as one pinned copy.
    for _ in range(3):
        compute(5)
        dst.copy_(pinned_src, non_blocking=True)
    torch.cuda.synchronize(dev)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    dst.copy_(pinned_src, non_blocking=True)
    e1.record()
    torch.cuda.synchronize(dev)
    copy_ms = e0.elapsed_time(e1)
    e0.record()
    compute(10)
    e1.record()
    torch.cuda.synchronize(dev)
    k = max(1, round(10 * copy_ms / max(e0.elapsed_time(e1), 1e-3)))

    run_id = uuid.uuid4().hex[:12]
    rows = []
    with steady_gc():  # no collection of the setup's objects between reps (gc_steady)
        for rep in range(reps):
            for scenario in SCENARIOS:
                torch.cuda.synchronize(dev)
                ev = {n: torch.cuda.Event(enable_timing=True) for n in ("t0", "c0", "c1", "k0", "k1")}
                copy_stream = main if scenario == "serial_pinned" else side
                src = pageable if scenario == "overlap_pageable" else pinned_src
                h0 = time.perf_counter()
                ev["t0"].record(main)
                copy_stream.wait_stream(main)
                with torch.cuda.stream(copy_stream):
                    ev["c0"].record(copy_stream)
                    dst.copy_(src, non_blocking=True)
                    ev["c1"].record(copy_stream)
                h_copy = time.perf_counter()
                with torch.cuda.stream(main):
                    ev["k0"].record(main)
                    compute(k)
                    ev["k1"].record(main)
                h_comp = time.perf_counter()
                torch.cuda.synchronize(dev)
                t0 = ev["t0"]
                # A host-clock offset between the start event and the host origin is
                # negligible here: the device is idle when t0 is recorded.
                for op, s0, s1, stream, hret in (
                    ("copy", "c0", "c1", "default" if copy_stream is main else "side", h_copy),
                    ("compute", "k0", "k1", "default", h_comp),
                ):
                    rows.append(
                        {
                            "run_id": run_id,
                            "scenario": scenario,
                            "rep": rep,
                            "op": op,
                            "stream": stream,
                            "start_ms": t0.elapsed_time(ev[s0]),
                            "end_ms": t0.elapsed_time(ev[s1]),
                            "host_return_ms": (hret - h0) * 1e3,
                        }
                    )
    df = validate_timeline(pd.DataFrame(rows, columns=list(TIMELINE_COLUMNS)))
    env = collect_env(argv=argv)
    env.update(
        spec={**spec.to_dict(), "matmuls": k, "matmul": "4096x4096 bf16"},
        run_id=run_id,
        scenarios=SCENARIOS,
    )
    df.attrs["env"] = env
    return df
