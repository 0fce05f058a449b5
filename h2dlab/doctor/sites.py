"""From a trace's events to its copy sites: what each copy cost the step.

For every GPU copy (``gpu_memcpy``) the doctor finds the API call that launched it (same
``correlation``), the host ranges around that call (the outermost ``cpu_op``, the innermost
user ``python_function`` and ``record_function`` range), the ``ProfilerStep#`` it belongs to,
and four times (ms):

- ``gpu_ms``: the copy's own duration on the GPU;
- ``exposed_ms``: the part of it that no kernel on another stream of that GPU overlaps;
- ``idle_wait_ms``: GPU idle time (no kernel, copy or memset on any stream) while the host
  was in the op that issued the copy, or in a ``pin_memory`` op just before it on that thread;
- ``synchronous``: the host waited for the copy (a pageable source, a blocking ``cudaMemcpy``,
  or a synchronize inside the issuing op that covers the copy's end).

A site groups the copies of one issuing place, direction, source memory and stream.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from h2dlab.doctor.intervals import covered, merge
from h2dlab.doctor.trace import Trace
from h2dlab.errors import UsageError

__all__ = ["Analysis", "analyse", "parse_copy_name"]

_COPY = re.compile(r"^Memcpy (\w+)(?: \(([^)]*?) -> ([^)]*?)\))?")
DIRECTIONS = {"HtoD": "h2d", "DtoH": "d2h", "DtoD": "d2d", "HtoH": "h2h", "PtoP": "p2p"}
PIN_OPS = frozenset({"aten::pin_memory", "aten::_pin_memory"})
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cuStreamSynchronize")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def parse_copy_name(name: str) -> tuple[str, str, str]:
    """``(direction, source, destination)`` of a Kineto copy name; memory kinds in lower case
    (``pageable``, ``pinned``, ``device``, ...), ``unknown`` where the name has none."""
    m = _COPY.match(name)
    if not m:
        return "unknown", "unknown", "unknown"
    kind, src, dst = m.groups()
    d = DIRECTIONS.get(kind, kind.lower())
    return d, (src or "unknown").strip().lower(), (dst or "unknown").strip().lower()


@dataclass
class Analysis:
    """What :func:`analyse` found: one row per copy, one per site, the steps, the GPU lanes."""

    path: str
    steps: int
    has_steps: bool
    copies: pd.DataFrame
    sites: pd.DataFrame
    kernel_ms_per_step: float
    step_windows: list[tuple[float, float]]
    gpu: pd.DataFrame = field(repr=False)
    has_dataloader: bool = False
    notes: list[str] = field(default_factory=list)


def _user_frame(name: str) -> bool:
    return not any(s in name for s in ("site-packages", "torch/", "<built-in", "/lib/python", "threading.py"))


def _host_context(trace: Trace, launches: dict[int, int]) -> dict[int, dict]:
    """For each launching runtime call (by index): its enclosing host ranges; pin ops too."""
    by_thread: dict[tuple, list] = {}
    for i, (pid, tid, ts, end, _name, _cat) in enumerate(trace.host):
        by_thread.setdefault((pid, tid), []).append((ts, -end, 0, i))  # a host range first at a tie
    wanted = set(launches.values())
    for j, (pid, tid, ts, end, name, _corr) in enumerate(trace.runtime):
        if j in wanted or name.startswith(SYNC_CALLS):
            by_thread.setdefault((pid, tid), []).append((ts, -end, 1, j))
    ctx: dict[int, dict] = {}
    pins: dict[tuple, list] = {}
    for key, evs in by_thread.items():
        evs.sort()
        stack: list[tuple[float, int]] = []
        for ts, _neg_end, is_call, i in evs:
            while stack and stack[-1][0] <= ts:
                stack.pop()
            if not is_call:
                _, _, _, end, name, cat = trace.host[i]
                if (
                    cat == "cpu_op"
                    and name in PIN_OPS
                    and not any(trace.host[k][5] == "cpu_op" for _, k in stack)
                ):
                    pins.setdefault(key, []).append((ts, end))
                stack.append((end, i))
                continue
            outer = frame = note = None
            chain = []
            for _, k in stack:
                _, _, hts, hend, hname, hcat = trace.host[k]
                if hcat == "cpu_op":
                    chain.append(hname)
                    if outer is None:
                        outer = (hts, hend)
                elif hcat == "python_function" and _user_frame(hname):
                    frame = hname
                elif (
                    hcat == "user_annotation"
                    and not _STEP.match(hname)
                    and not hname.startswith("enumerate(")
                ):
                    note = hname
            ctx[i] = {"thread": key, "outer": outer, "chain": chain, "frame": frame, "note": note}
    ctx[-1] = {"pins": pins}
    return ctx


def analyse(trace: Trace) -> Analysis:
    """The copies and copy sites of ``trace``.

    Raises
    ------
    UsageError
        The trace holds no GPU activity (a CPU-only run), or GPU activity but no copy.
    """
    name = trace.path.rsplit("/", 1)[-1]
    if not trace.gpu:
        what = "CUDA calls but no GPU events" if trace.runtime else "no GPU activity"
        raise UsageError(
            f"{name} holds {what} (a CPU-only run, or torch.profiler without "
            "ProfilerActivity.CUDA): record it on a CUDA machine with activities=[CPU, CUDA]"
        )
    gpu = pd.DataFrame(
        trace.gpu, columns=["cat", "ts", "end", "device", "stream", "correlation", "name", "bytes"]
    )
    cp = gpu[gpu["cat"] == "gpu_memcpy"].reset_index(drop=True)
    if cp.empty:
        bad = (
            f" ({trace.n_bad_times} events with a time that is not a finite number, or a negative "
            "duration, were left out)"
            if trace.n_bad_times
            else ""
        )
        raise UsageError(
            f"{name} holds GPU activity but no copies (no Memcpy events): nothing to diagnose{bad}"
        )
    notes: list[str] = []

    # the launching call of each copy, by correlation id
    by_corr = {c: j for j, c in ((j, r[5]) for j, r in enumerate(trace.runtime)) if c >= 0}
    launch = {int(i): by_corr.get(int(c), -1) for i, c in enumerate(cp["correlation"])}
    ctx = _host_context(trace, {i: j for i, j in launch.items() if j >= 0})
    pins = ctx.pop(-1)["pins"]

    parsed = [parse_copy_name(n) for n in cp["name"]]
    cp["direction"] = [p[0] for p in parsed]
    cp["source_memory"] = [p[1] for p in parsed]
    cp["dest_memory"] = [p[2] for p in parsed]
    cp["host_memory"] = [p[1] if p[0] == "h2d" else p[2] if p[0] == "d2h" else "none" for p in parsed]
    cp["gpu_ms"] = (cp["end"] - cp["ts"]) / 1e3

    # exposed: the part no kernel on another stream of the same GPU overlaps
    k = gpu[gpu["cat"] == "kernel"]
    exposed = np.zeros(len(cp))
    for (dev, stream), g in cp.groupby(["device", "stream"]):
        other = k[(k["device"] == dev) & (k["stream"] != stream)]
        u = merge(other["ts"].to_numpy(), other["end"].to_numpy())
        idx = g.index.to_numpy()
        exposed[idx] = (g["end"] - g["ts"]).to_numpy() - covered(u, g["ts"].to_numpy(), g["end"].to_numpy())
    cp["exposed_ms"] = exposed / 1e3

    # the host side: site label, synchronous, host work intervals
    rows = []
    for i in range(len(cp)):
        j = launch[i]
        if j < 0:
            rows.append(("(no launching call in the trace)", None, None, None, np.nan, np.nan, None))
            continue
        pid, tid, rts, rend, rname, _ = trace.runtime[j]
        c = ctx.get(j, {})
        chain = c.get("chain") or []
        site = c.get("frame") or c.get("note") or (" > ".join(chain[:3]) if chain else rname)
        outer = c.get("outer") or (rts, rend)
        rows.append((site, rname, c.get("thread"), outer, rts, rend, " > ".join(chain)))
    cp["site"] = [r[0] for r in rows]
    cp["call"] = [r[1] for r in rows]
    cp["call_ts"] = [r[4] for r in rows]
    cp["call_end"] = [r[5] for r in rows]
    cp["op_chain"] = [r[6] for r in rows]
    cp["op_ts"] = [r[3][0] if r[3] else np.nan for r in rows]
    cp["op_end"] = [r[3][1] if r[3] else np.nan for r in rows]
    cp["thread"] = [r[2] for r in rows]
    cp["synchronous"] = _synchronous(trace, cp)

    # steps: the ProfilerStep# ranges; a copy belongs to the step its call was made in
    # a range twice (a trace merged or saved twice) is one step, not two of half the cost
    steps = sorted({(h[2], h[3]) for h in trace.host if h[5] == "user_annotation" and _STEP.match(h[4])})
    has_steps = bool(steps)
    if has_steps:
        st = np.array([s for s, _ in steps])
        en = np.array([e for _, e in steps])
        t = cp["call_ts"].fillna(cp["ts"]).to_numpy()
        pos = np.searchsorted(st, t, side="right") - 1
        inside = (pos >= 0) & (t < en[np.maximum(pos, 0)])
        cp["step"] = np.where(inside, pos, -1)
        outside = int((~inside).sum())
        if outside:
            notes.append(f"{outside} copies were issued outside the ProfilerStep# ranges and are left out")
    else:
        cp["step"] = 0
        steps = [(float(gpu["ts"].min()), float(gpu["end"].max()))]
        notes.append(
            "the trace has no ProfilerStep# ranges: figures are for the whole trace, counted as one step"
        )
    n_steps = len(steps)

    # GPU idle while the host issued the copy (or pinned its source just before)
    cp["idle_wait_ms"] = _idle_wait(cp, gpu, pins)

    kept = cp[cp["step"] >= 0]
    kernel_u = merge(k["ts"].to_numpy(), k["end"].to_numpy())
    kernel_ms = float((kernel_u[1] - kernel_u[0]).sum()) / 1e3
    sites = _sites(kept, n_steps)
    has_loader = any(
        h[4].startswith("enumerate(DataLoader)") for h in trace.host if h[5] == "user_annotation"
    )
    if (cp["bytes"] < 0).any():
        notes.append("some copies carry no bytes in the trace: their sites get no estimate")
    if trace.n_bad_times:
        notes.append(
            f"{trace.n_bad_times} events with a time that is not a finite number, or a negative "
            "duration, were left out"
        )
    return Analysis(
        path=trace.path,
        steps=n_steps,
        has_steps=has_steps,
        copies=cp,
        sites=sites,
        kernel_ms_per_step=kernel_ms / n_steps,
        step_windows=steps,
        gpu=gpu,
        has_dataloader=has_loader,
        notes=notes,
    )


def _synchronous(trace: Trace, cp: pd.DataFrame) -> list:
    syncs: dict[tuple, list] = {}
    for pid, tid, ts, end, name, _ in trace.runtime:
        if name.startswith(SYNC_CALLS):
            syncs.setdefault((pid, tid), []).append((ts, end))
    arrs = {k: np.array(sorted(v)) for k, v in syncs.items()}
    out = []
    for call, thread, src, dst, direction, ots, oend, end in zip(
        cp["call"],
        cp["thread"],
        cp["source_memory"],
        cp["dest_memory"],
        cp["direction"],
        cp["op_ts"],
        cp["op_end"],
        cp["end"],
        strict=True,
    ):
        if not isinstance(call, str):  # no launching call: None, or NaN once pandas holds the column
            out.append(None)
            continue
        host_side = src if direction == "h2d" else dst if direction == "d2h" else "device"
        if not call.endswith("Async") or host_side == "pageable":
            out.append(True)  # a blocking call, or a pageable host buffer (CUDA stages it)
            continue
        s = arrs.get(thread)
        if s is None:
            out.append(False)
            continue
        lo = int(np.searchsorted(s[:, 0], ots, side="left"))
        hi = int(np.searchsorted(s[:, 0], min(oend, end), side="right"))
        out.append(bool(np.any(s[lo:hi, 1] >= end)))
    return out


def _idle_wait(cp: pd.DataFrame, gpu: pd.DataFrame, pins: dict[tuple, list]) -> np.ndarray:
    # host work per copy: the issuing op, plus the top-level pin ops on that thread since
    # the previous copy call there (DataLoader(pin_memory=True), x.pin_memory().to(...))
    work: list[list[tuple[float, float]]] = [[] for _ in range(len(cp))]
    for i, (a, b) in enumerate(zip(cp["op_ts"], cp["op_end"], strict=True)):
        if np.isfinite(a):
            work[i].append((a, b))
    for thread, g in cp[cp["thread"].notna()].groupby("thread", sort=False):
        p = pins.get(thread)
        if not p:
            continue
        g = g.sort_values("call_ts")
        calls = g["call_ts"].to_numpy()
        for ps, pe in p:
            n = int(np.searchsorted(calls, pe, side="left"))
            if n < len(calls):
                work[g.index[n]].append((ps, pe))
    # a host range shared by several copies (one op, many copies) counts once, for its first copy
    seen: set = set()
    owner, starts, ends = [], [], []
    for i, w in enumerate(work):
        w = sorted(x for x in w if x not in seen)
        seen.update(w)
        for a, b in _merged(w):
            owner.append(i)
            starts.append(a)
            ends.append(b)
    out = np.zeros(len(cp))
    if not owner:
        return out
    owner_a, s_a, e_a = np.array(owner), np.array(starts), np.array(ends)
    dev = cp["device"].to_numpy()[owner_a]
    for d, g in gpu.groupby("device"):
        m = dev == d
        busy = merge(g["ts"].to_numpy(), g["end"].to_numpy())
        idle = (e_a[m] - s_a[m]) - covered(busy, s_a[m], e_a[m])
        out += np.bincount(owner_a[m], weights=idle, minlength=len(cp))
    return out / 1e3


def _merged(w: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in w:  # sorted by start
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _sites(cp: pd.DataFrame, n_steps: int) -> pd.DataFrame:
    cols = ["site", "direction", "source_memory", "dest_memory", "host_memory", "stream"]
    if cp.empty:
        return pd.DataFrame(columns=[*cols, "count", "bytes"])
    g = cp.assign(sync=cp["synchronous"].map({True: 1.0, False: 0.0})).groupby(cols, sort=False, dropna=False)
    s = g.agg(
        count=("gpu_ms", "size"),
        bytes=("bytes", lambda b: int(b.sum()) if (b >= 0).all() else -1),
        bytes_per_copy=("bytes", "median"),
        gpu_ms=("gpu_ms", "sum"),
        exposed_ms=("exposed_ms", "sum"),
        idle_wait_ms=("idle_wait_ms", "sum"),
        synchronous_share=("sync", "mean"),
        op_chain=("op_chain", "first"),
        device=("device", "first"),
    ).reset_index()
    s["cost_ms_per_step"] = (s["exposed_ms"] + s["idle_wait_ms"]) / n_steps
    return s.sort_values("cost_ms_per_step", ascending=False, kind="stable").reset_index(drop=True)
