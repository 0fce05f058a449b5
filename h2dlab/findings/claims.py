"""Every claim the notebooks make about the forum experiment, computed from a table.

Each function takes its data explicitly (DataFrames from ``datasets.load`` or a live run)
and returns a :class:`Finding`: the numbers with their spread, a ``holds`` flag and a
``verdict`` sentence whose wording follows the data (a live run on another GPU may get
the opposite sentence). Bandwidth, pinning cost and the advice table live in
:mod:`h2dlab.findings.advice`; ``clocks`` lives in :mod:`h2dlab.findings.clocks`. The :class:`Finding` type and ``spread`` live in
:mod:`h2dlab.explain.finding` and are re-exported here. No torch here.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from h2dlab.escape import md_text
from h2dlab.explain.finding import Finding, first_rows, run_names, size_text, spread
from h2dlab.explain.model import timed, value_ms
from h2dlab.findings.clocks import clocks

__all__ = [
    "ALLOCATOR_RULE",
    "EMPTY_CACHE_NOTE",
    "Finding",
    "block_bytes",
    "clocks",
    "context_startup",
    "device_alloc_cost",
    "forum_bytes",
    "host_alloc_growth",
    "spread",
]

#: PyTorch's caching host allocator (aten/src/ATen/core/CachingHostAllocator.h), stated exactly.
ALLOCATOR_RULE = (
    "PyTorch's caching host allocator rounds every pinned request up to a power of two "
    "(PowerOf2Ceil) and keeps freed blocks in one free list per power of two. A request is "
    "served only from the free list of its own class: a larger block is never split or "
    "borrowed. Only when that list is empty does it make a new block with cudaHostAlloc "
    "(or cudaHostRegister under pinned_use_cuda_host_register), counted by num_host_alloc"
)
#: What ``torch.cuda.empty_cache()`` does and does not release.
EMPTY_CACHE_NOTE = (
    "torch.cuda.empty_cache() returns the device allocator's unused segments to the driver "
    "(so the next copy waits on cudaMalloc); it leaves PyTorch's pinned host cache alone. "
    "That one is emptied by torch.accelerator.empty_host_cache() in torch 2.13, "
    "torch._C._host_emptyCache() in the torch 2.11 that recorded the bundled runs"
)
#: The forum's tensors: shape (24, 2, 1, seq, 4096), float16.
FORUM_ELEMENTS_PER_SEQ = 24 * 2 * 1 * 4096
MIB = 2**20


def forum_bytes(seq: int) -> int:
    """Bytes of the forum's float16 tensor of shape (24, 2, 1, seq, 4096)."""
    return int(seq) * FORUM_ELEMENTS_PER_SEQ * 2


def block_bytes(size_bytes: float) -> int:
    """The power-of-two block the caching host allocator gives a request of ``size_bytes``."""
    return int(2 ** math.ceil(math.log2(max(float(size_bytes), 1.0))))


def _startup_text(t: pd.DataFrame) -> str:
    """How much of each first operation CUDA's start-up took (``context_startup``'s table):
    all but a tenth, or most, naming the run whose operation itself ran long; where the
    table has no CUDA events, what the time is consistent with."""
    if not t.startup_ms.notna().any():
        return ". That looks like CUDA starting up; the table has no CUDA events to tell the two apart."
    s, share = spread(t.startup_ms), t.startup_ms / t.wall_ms
    lo, hi = f"{s['min']:.0f}", f"{s['max']:.0f}"
    head = f". Of that time, {lo if lo == hi else f'{lo}–{hi}'} ms passed before the GPU recorded the start event"
    if share.min() >= 0.9:
        return f"{head}: that is CUDA starting up, not the copy."
    worst = t.loc[share.idxmin()]
    return (
        f"{head} ({share.min():.0%}–{share.max():.0%} of each run's first operation): mostly CUDA starting up. "
        f"In run {md_text(worst['run'])} the operation itself took {worst['event_ms']:.1f} ms by CUDA events "
        f"(its next copies: {worst['typical_ms']:.2f} ms)."
    )


def context_startup(df: pd.DataFrame, *, min_excess_ms: float = 50.0) -> Finding:
    """Is the first timed operation of each run slow because CUDA starts up?

    Compares each run's first row with the median of the same strategy's next five rows,
    and (where CUDA events exist) splits the host time into start-up (host clock minus
    events) and the operation. ``holds`` when the first operation exceeds the typical one
    by ``min_excess_ms`` or more in the median run.
    """
    rows = []
    for rid, run in df.groupby("run_id", sort=False):
        first = first_rows(run).iloc[0]
        nxt = run[(run.strategy == first.strategy) & (run.order > first.order)].sort_values("order").head(5)
        rows.append(
            {
                "run": run_names(df).get(rid, rid),
                "strategy": first.strategy,
                "size_bytes": int(first.size_bytes),
                "wall_ms": float(first.wall_ms),
                "event_ms": float(first.event_ms),
                "startup_ms": float(first.wall_ms - first.event_ms),
                "typical_ms": float(nxt.wall_ms.median()),
            }
        )
    t = pd.DataFrame(rows)
    excess = t.wall_ms - t.typical_ms
    holds = bool(excess.median() >= min_excess_ms)
    w, s = spread(t.wall_ms), spread(t.startup_ms)
    span = f"{w['min']:.0f}–{w['max']:.0f} ms" if w["n"] > 1 else f"{w['min']:.0f} ms"
    if holds:
        verdict = (
            f"The first timed operation took {span} by the host clock. The next five copies of its strategy took "
            f"a typical {t.typical_ms.median():.2f} ms (whatever their size; median over runs)"
        )
        verdict += _startup_text(t) + " Warm up before you measure."
    else:
        verdict = (
            f"The first timed operation ({span}) was not markedly slower than the ones after it "
            f"(typical {t.typical_ms.median():.2f} ms): no start-up cost in the timings, the run was warm."
        )
    return Finding(verdict, holds, {"first_wall_ms": w, "startup_ms": s, "excess_ms": spread(excess)}, t)


def host_alloc_growth(
    df: pd.DataFrame,
    *,
    strategies: tuple[str, ...] = ("pin_memory", "pin_then_copy"),
    emptied_each_size: bool = False,
    min_block_bytes: int = 16 * MIB,
    reuse: pd.DataFrame | None = None,
) -> Finding:
    """Where the pinned host cache grew, against the allocator's rule, and what it cost.

    The rule (:data:`ALLOCATOR_RULE`) predicts a new block at the first request of each
    power-of-two class in execution order (with ``emptied_each_size``, at the first
    repetition of every size). ``observed`` is ``host_allocs > 0`` where the table has the
    counter. ``extra_ms`` is a growth row's time minus the median of the rows that reused
    a block of the same class; ``ms_per_mib`` that extra per MiB of new block, over blocks
    of ``min_block_bytes`` or more; ``faults_per_page`` the page faults of the whole process
    (``proc_faults``, where recorded; else the timing thread's ``minflt``) per 4 KiB page of
    the new block. ``holds`` when every observed growth is predicted and
    every predicted growth observed (without counters: when the predicted rows are the
    slow ones, i.e. their median extra is positive). Where ``df`` has no such rows (one
    repetition, cache emptied before each size), ``reuse`` (e.g. the warm run of the same
    sizes) gives the median time at the same size of its rows that made no new block.
    """
    d = df[df.strategy.isin(strategies) & (df.error == "")].sort_values(["order", "rep"], kind="stable")
    d = d.assign(_v=value_ms(d), block_bytes=d.size_bytes.map(block_bytes))
    key = ["run_id", "strategy", "size_bytes" if emptied_each_size else "block_bytes"]
    d = d.assign(predicted=~d.duplicated(key))  # first request of its class (of its size, if emptied)
    d["observed"] = np.where(d.host_allocs.notna(), d.host_allocs > 0, np.nan)
    new = pd.Series(
        np.where(d.host_allocs.notna(), d.host_allocs > 0, d.predicted), index=d.index, dtype=bool
    )
    cached = d[~new].groupby(["run_id", "strategy", "block_bytes"])["_v"].median().rename("cached_ms")
    g = d[new].join(cached, on=["run_id", "strategy", "block_bytes"])
    if reuse is not None:
        r = reuse[reuse.strategy.isin(strategies) & (reuse.error == "") & (reuse.host_allocs == 0)]
        alt = r.assign(_v=value_ms(r)).groupby(["strategy", "size_bytes"])["_v"].median().rename("_alt")
        g["cached_ms"] = g.cached_ms.fillna(g.join(alt, on=["strategy", "size_bytes"])["_alt"])
    g = g.assign(
        run=g.run_id.map(lambda r: run_names(df).get(r, r)),
        size_mib=g.size_bytes / MIB,
        block_mib=g.block_bytes / MIB,
        ms=g._v,
        extra_ms=g._v - g.cached_ms,
    )
    smallest = d.groupby(["run_id", "strategy", "block_bytes"]).size_bytes.min().rename("_min")
    g = g.join(smallest, on=["run_id", "strategy", "block_bytes"])
    g["smallest_of_class"] = g.size_bytes == g._min
    g["ms_per_mib"] = g.extra_ms / g.block_mib
    # Independent evidence where the table has it (schema v2): page faults per 4 KiB page of the new
    # block, of every thread where recorded (cudaHostRegister's worker threads fault the pages, not
    # the timing thread that minflt counts), else of the timing thread.
    whole = "proc_faults" in g and bool(g.proc_faults.notna().any())
    faults = g.proc_faults if whole else g.minflt if "minflt" in g else np.nan
    g["faults_per_page"] = faults / (g.block_bytes / 4096)
    cols = ["run", "strategy", "order", "rep", "size_mib", "block_mib", "ms", "cached_ms", "extra_ms"]
    table = g[
        cols + ["ms_per_mib", "faults_per_page", "predicted", "observed", "smallest_of_class"]
    ].reset_index(drop=True)
    counted = d[d.observed.notna()]
    mismatch = int((counted.observed.astype(bool) != counted.predicted).sum())
    big = table[table.block_mib * MIB >= min_block_bytes]
    cost = spread(big.ms_per_mib)
    values = {
        "new_blocks": len(table),
        "rows_with_counters": len(counted),
        "mismatches": mismatch,
        "ms_per_mib": cost,
        "faults_per_page": spread(table.faults_per_page),
        "smallest_of_class_share": float(table.smallest_of_class.mean()) if len(table) else float("nan"),
    }
    if len(counted):
        holds = mismatch == 0
        head = (
            f"All {len(table)} new pinned blocks (num_host_alloc went up) came at the first request of "
            f"their {'size' if emptied_each_size else 'power-of-two class'}, as the rule predicts"
            if holds
            else f"{mismatch} of {len(counted)} rows break the rule: num_host_alloc and the prediction disagree"
        )
    else:
        holds = bool(spread(table.extra_ms)["median"] > 0)
        head = (
            f"The table has no counters. The rule, applied to the sizes in their order, predicts "
            f"{len(table)} new blocks, and those rows are "
            + (
                "slower than the rows that reuse a block"
                if holds
                else "no slower than the rows that reuse a block"
            )
        )
    k = int(table.smallest_of_class.sum())
    tail = (
        f". {k} of {len(table)} were at the smallest size the run copied in their class, "
        + (
            "the first past a power of two on its grid, as sizes ascending make it"
            if k == len(table)
            else "so growth follows the order of first use, not the size alone"
        )
        if len(table) and not emptied_each_size
        else ". The cache was emptied before each size, so every size made its own block"
        if len(table)
        else ""
    )
    if cost["n"]:
        tail += (
            f". A new block of {min_block_bytes // MIB} MiB or more cost {cost['median']:.2f} ms per MiB "
            f"(IQR {cost['q1']:.2f}–{cost['q3']:.2f}, {cost['n']} blocks)"
        )
    if values["faults_per_page"]["n"]:
        tail += (
            f". The copy that made a block took {values['faults_per_page']['median']:.2f} "
            + ("page faults of the whole process" if whole else "minor page faults")
            + " per 4 KiB page of the new block"
        )
    return Finding(head + tail + ".", holds, values, table)


def device_alloc_cost(
    forum: pd.DataFrame,
    reuse: pd.DataFrame,
    *,
    strategy: str = "pinned_to_cuda",
    baseline: str = "pinned_reuse",
    min_ratio: float = 1.05,
) -> Finding:
    """What ``empty_cache()`` costs the forum protocol: its ``strategy`` steps (each after
    ``empty_cache()``, so the output needs a fresh ``cudaMalloc``) against ``baseline``
    copies into a reused device buffer at the same sizes (``reuse``, e.g. the sweep's
    ``forum-sizes`` run). Ratios are per size (``emptied_ms``, the median over runs, over
    ``kept_ms``). ``holds`` when the median ratio exceeds ``min_ratio``; the verdict names
    the sizes that did not pay where there are any."""
    f = forum[(forum.strategy == strategy) & (forum.error == "")]
    f = f[~f.index.isin(first_rows(forum).index)]
    b = timed(reuse[reuse.strategy == baseline])
    fm = f.assign(_v=value_ms(f)).groupby("size_bytes")["_v"].median()
    bm = b.assign(_v=value_ms(b)).groupby("size_bytes")["_v"].median()
    both = pd.DataFrame({"emptied_ms": fm, "kept_ms": bm}).dropna()
    if both.empty:
        raise ValueError(
            f"no size has both {strategy} rows and {baseline} rows: pass tables over the same sizes"
        )
    both["ratio"] = both.emptied_ms / both.kept_ms
    both["extra_ms"] = both.emptied_ms - both.kept_ms
    allocs = spread(f.device_allocs)
    r, x = spread(both.ratio), spread(both.extra_ms)
    holds = bool(r["median"] > min_ratio)
    segs = (
        f"Each `{strategy}` step made a median {allocs['median']:.0f} new device segment(s) after empty_cache() "
        f"(cudaMalloc; {allocs['min']:.0f}–{allocs['max']:.0f}). "
        if allocs["n"]
        else ""
    )
    head = (
        f"{segs}Over {r['n']} sizes, a `{strategy}` step after empty_cache() took "
        f"{r['median']:.2f}x (IQR {r['q1']:.2f}–{r['q3']:.2f}) the time of a `{baseline}` copy into a reused "
        f"device buffer, {x['median']:.2f} ms more per copy (median)"
    )
    paid = both.ratio > min_ratio
    if not holds:
        verdict = f"{head}: no measurable cost."
    elif paid.all():
        verdict = f"{head}: empty_cache() in the loop makes every copy pay for device allocation."
    else:  # the median hides sizes that paid nothing: say which paid and which did not
        verdict = (
            f"{head}, not at every size. {_first_up(_paid_text(both[paid], min_ratio))}. "
            f"{_first_up(_paid_text(both[~paid], None, min_ratio))}."
        )
    return Finding(verdict, holds, {"ratio": r, "extra_ms": x, "device_allocs": allocs}, both.reset_index())


def _first_up(text: str) -> str:
    """``text`` with its first letter a capital (the rest as it was)."""
    return text[:1].upper() + text[1:]


def _paid_text(part: pd.DataFrame, paid: float | None, bar: float = 0.0) -> str:
    """``device_alloc_cost``'s words for the sizes that passed ratio ``paid`` (or, ``paid``
    None, did not pass ``bar``): how many, which, their ratios, the median extra if paid."""
    n = len(part)
    a, b = size_text(part.index.min()), size_text(part.index.max())
    sizes = a if n == 1 else f"{a} to {b}"
    lo, hi = f"{part.ratio.min():.2f}", f"{part.ratio.max():.2f}"
    ratios = f"{lo}x" if lo == hi else f"{lo}–{hi}x"
    where = f"at {n} size{'s' if n != 1 else ''} ({sizes})"
    if paid is not None:
        return f"{where} it took {ratios}, a median {part.extra_ms.median():.2f} ms more"
    return f"{where} it took {ratios}, {'none' if n > 1 else 'not'} more than {bar:.2f}x"
