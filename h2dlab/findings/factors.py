"""The factors the forum's experiment could not see, computed from a recording: the
machine's limits on pinned memory, NUMA and CPU affinity, GPU clocks during the copies,
``non_blocking=True`` from pageable memory, what overlapping a copy with compute gains,
and several GPUs copying at once.

Each function takes its data explicitly (a table, a timeline or an env.json dict) and
returns a :class:`h2dlab.findings.claims.Finding` whose sentence says plainly when the data
needed is not in the recording. No torch here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from h2dlab.explain.finding import extra_text
from h2dlab.explain.idle import idle_wake
from h2dlab.explain.model import concurrency as concurrency_table
from h2dlab.explain.model import medians, timed, value_ms
from h2dlab.findings.claims import Finding, spread
from h2dlab.findings.openmp import host_parallel, openmp_wait
from h2dlab.units import fmt_bytes

__all__ = [
    "ON_CPU_SHARE",
    "concurrency",
    "gpu_clocks",
    "host_parallel",
    "idle_wake",
    "machine",
    "non_blocking_pageable",
    "on_cpu_throughout",
    "openmp_wait",
    "overlap",
    "unexplained",
]


def _limit(v: Any) -> str | None:
    """A recorded limit in words: bytes, 'unlimited', or None when not recorded."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return None
    if isinstance(v, str):
        return v
    return "unlimited" if int(v) < 0 else fmt_bytes(int(v))


def machine(env: dict[str, Any], *, failed_rows: int | None = None) -> Finding:
    """What the run's env.json says about the limits of pinned memory and where the
    copying threads ran: ``RLIMIT_MEMLOCK``, the container's memory limit (cgroup
    ``memory.max``), the machine's memory, NUMA nodes, and the CPUs the process could use
    against the machine's. ``failed_rows`` (rows with an error, e.g. a pin that failed)
    is quoted when given. ``holds`` when the process could use every CPU of a single
    NUMA node machine (nothing to place), i.e. affinity cannot have mattered here."""
    mem = env.get("mem_total_gib")
    numa, cpus, allowed = env.get("numa_nodes"), env.get("cpu_count"), env.get("cpu_affinity")
    memlock = _limit(env.get("rlimit_memlock_bytes"))
    cgroup = _limit(env.get("cgroup_memory_max_bytes"))
    parts = [
        f"Pinned pages cannot be swapped out, so they come out of the machine's {mem:.0f} GiB of memory"
        if mem
        else "Pinned pages cannot be swapped out (this recording does not say how much memory the machine had)"
    ]
    parts.append(
        f"; RLIMIT_MEMLOCK was {memlock}"
        if memlock
        else "; RLIMIT_MEMLOCK is not in this recording's env.json"
    )
    parts.append(
        f" and the container's memory limit {cgroup}"
        if cgroup
        else (
            " (nor is a container memory limit)" if not memlock else "; no container memory limit is recorded"
        )
    )
    if failed_rows is not None:
        parts.append(
            f". {failed_rows} copies in these runs failed and were kept as rows with their error"
            if failed_rows
            else ". No copy in these runs failed: the recording shows no failed pin, so none is shown here"
        )
    single = numa == 1
    all_cpus = bool(cpus) and allowed == cpus
    if numa is None:
        parts.append(". The NUMA layout is not recorded.")
    else:
        parts.append(
            f". The machine had {numa} NUMA (non-uniform memory access) node{'s' if numa != 1 else ''}, "
            "a socket's CPUs and their memory, and the process could run on "
            f"{allowed if allowed is not None else 'an unrecorded number of'} of its {cpus} CPUs: "
            + (
                "one node, so every host buffer was local to the CPUs that copied it."
                if single
                else "on several nodes a pinned buffer on the node far from the GPU crosses the socket link; "
                "pin the process near its GPU (`numactl --cpunodebind`, `taskset`) and compare."
            )
        )
    values = {
        "mem_total_gib": mem,
        "memlock": memlock,
        "cgroup_memory": cgroup,
        "numa_nodes": numa,
        "cpu_count": cpus,
        "cpu_affinity": allowed,
        "failed_rows": failed_rows,
    }
    return Finding("".join(parts), bool(single and all_cpus), values)


def _span(lo: float, hi: float) -> str:
    """``'4.1–4.8'``, or one value where both read the same to 0.1."""
    a, b = f"{lo:.1f}", f"{hi:.1f}"
    return a if a == b else f"{a}–{b}"


def gpu_clocks(df: pd.DataFrame, *, low: float = 0.8) -> Finding:
    """The GPU's SM clock after each copy (NVML, ``sm_clock_mhz``): its spread, the share
    of copies that ended with the clock below ``low`` x its highest reading, and how much
    slower those copies were than their (strategy, size) cell's median. ``holds`` when
    low-clock copies were slower than their cells by over 10 % (median)."""
    t = timed(df)
    if "sm_clock_mhz" not in t or t.sm_clock_mhz.isna().all():
        return Finding(
            "This table has no GPU clock readings: it was measured with `--evidence light` "
            "(`h2dlab measure`'s default, which does not read the clock), without NVML, or before the kit "
            "stored `sm_clock_mhz`. Whether an idle GPU's lowered clock slowed the first copies "
            "cannot be told from it.",
            False,
            {"rows": 0},
        )
    t = t[t.sm_clock_mhz.notna()]
    v = value_ms(t)
    rel = v / v.groupby([t.strategy, t.size_bytes]).transform("median")
    top = float(t.sm_clock_mhz.max())
    is_low = t.sm_clock_mhz < low * top
    c, r = spread(t.sm_clock_mhz), spread(rel[is_low])
    holds = bool(r["n"] and r["median"] > 1.1)
    verdict = (
        f"The SM clock after a copy read {c['min']:.0f}–{c['max']:.0f} MHz (median {c['median']:.0f}); "
        f"{is_low.mean():.0%} of copies ended below {low:.0%} of the highest reading"
        + (
            f", and those took {r['median']:.2f}x their size's median time: "
            + (
                "a GPU that idled between copies ran them slower; warm it up with work, not just one copy."
                if holds
                else "the clock did not slow them measurably (copies run on the copy engines, not the SMs)."
            )
            if r["n"]
            else ": the clock stayed up throughout."
        )
    )
    return Finding(verdict, holds, {"sm_clock_mhz": c, "low_share": float(is_low.mean()), "low_ratio": r})


def non_blocking_pageable(df: pd.DataFrame, *, min_bytes: int = 2**20) -> Finding:
    """``x.to('cuda', non_blocking=True)`` from pageable memory against plain ``x.to()``:
    per size (``min_bytes`` and up) the ratio of median times. ``holds`` when
    ``non_blocking`` made the pageable copy faster by over 5 % (median over sizes)."""
    m = medians(df[df.strategy.isin(["pageable", "pageable_non_blocking"])])
    p = m.pivot(index="size_bytes", columns="strategy", values="median_ms").dropna()
    p = p[p.index >= min_bytes]
    if p.empty or p.shape[1] < 2:
        raise ValueError(
            "non_blocking_pageable needs pageable and pageable_non_blocking rows at the same sizes"
        )
    ratio = spread(p.pageable_non_blocking / p.pageable)
    holds = bool(ratio["median"] < 0.95)
    verdict = (
        f"From pageable memory, `non_blocking=True` took {ratio['median']:.2f}x the time of a plain `x.to('cuda')` "
        f"(median over {ratio['n']} sizes from {fmt_bytes(min_bytes)}, range {ratio['min']:.2f}–{ratio['max']:.2f}x): "
        + (
            "faster here."
            if holds
            else "no gain. The driver must stage pageable memory through its own pinned buffer with the CPU, so "
            "the call cannot return before the data has left the source."
        )
    )
    return Finding(verdict, holds, {"ratio": ratio})


def overlap(tl: pd.DataFrame) -> Finding:
    """From an overlap timeline (``h2dlab overlap``): when the copy call returned against
    when the copy ended, pinned and pageable source (medians over repetitions); how long
    a pinned copy stayed in flight after its call returned; the end of the last
    operation with one stream (``serial_pinned``) and two (``overlap_pinned``,
    ``overlap_pageable``). ``holds`` when two streams with a pinned source beat one."""
    need = {"serial_pinned", "overlap_pinned", "overlap_pageable"}
    if not need <= set(tl.scenario):
        raise ValueError(f"the timeline lacks scenario(s) {', '.join(sorted(need - set(tl.scenario)))}")
    cp = tl[tl.op == "copy"].groupby("scenario")[["host_return_ms", "end_ms"]].median()
    end = tl.groupby(["scenario", "rep"]).end_ms.max().groupby("scenario").median()
    w = tl[(tl.scenario == "overlap_pinned") & (tl.op == "copy")]
    window = spread(w.end_ms - w.host_return_ms)
    gain = float(end["serial_pinned"] / end["overlap_pinned"])
    holds = bool(gain > 1.05)
    verdict = (
        f"With a pinned source the copy call returned after {cp.loc['overlap_pinned', 'host_return_ms']:.2f} ms "
        f"while the copy ran until {cp.loc['overlap_pinned', 'end_ms']:.1f} ms; from a pageable source, with the same "
        f"`non_blocking=True`, the call returned only at {cp.loc['overlap_pageable', 'host_return_ms']:.1f} ms, when "
        f"its copy was over ({cp.loc['overlap_pageable', 'end_ms']:.1f} ms). Copy then compute on one stream ended at "
        f"{end['serial_pinned']:.1f} ms; on two streams from pinned memory at {end['overlap_pinned']:.1f} ms "
        f"({gain:.2f}x), from pageable memory at {end['overlap_pageable']:.1f} ms. Over {window['n']} repetitions a "
        f"pinned copy was still in flight {_span(window['min'], window['max'])} ms after its call returned: that "
        "long the source must stay untouched and the result unread."
    )
    values = {
        "pinned_return_ms": float(cp.loc["overlap_pinned", "host_return_ms"]),
        "pageable_return_ms": float(cp.loc["overlap_pageable", "host_return_ms"]),
        "end_ms": end.to_dict(),
        "gain": gain,
        "in_flight_ms": window,
    }
    return Finding(verdict, holds, values)


def concurrency(df: pd.DataFrame, size_bytes: int = 2**30) -> Finding:
    """Several GPUs copying at once (a ``--gpus`` run) at ``size_bytes``: per strategy the
    aggregate GB/s of the most GPUs and its scaling over one GPU. ``holds`` when pinned
    copies scale by over 1.9x per doubling-free host (no shared bottleneck for DMA). The
    verdict names the strategies that scaled less and places their shortfall on the host
    side without naming a resource: the table has no per-copy CPU or memory counters."""
    c = concurrency_table(df)
    c = c[(c.size_bytes == size_bytes) & (c.world == c.world.max())].set_index("strategy")
    if c.empty:
        raise ValueError(f"the concurrent run has no rows at {fmt_bytes(size_bytes)}")
    n = int(c.gpus.max())
    parts = " ".join(
        f"`{s}`: {r.aggregate_gbps:.1f} GB/s together ({r.scaling:.2f}x one GPU, {r.per_gpu_gbps:.1f} per GPU)."
        for s, r in c.iterrows()
    )
    pinned = float(c.scaling.get("pinned_reuse", np.nan))
    holds = bool(pinned > 0.95 * n)
    short = [f"`{s}` ({r.scaling:.2f}x)" for s, r in c.iterrows() if r.scaling <= 0.95 * n]
    host = [
        f"`{s}` {r.scaling:.2f}x" for s, r in c.iterrows() if s != "pinned_reuse" and r.scaling > 0.95 * n
    ]
    tail = (
        f" {', '.join(short)} scaled less. The DMA did not run short, so the shortfall lies in the host-side "
        "work the path adds, which the processes share"
        + (f". Yet a path the driver stages on the host did scale ({', '.join(host)})" if host else "")
        + ". This table records no per-copy CPU or memory counters to say which host resource ran short."
        if short
        else ""
    )
    verdict = f"{n} GPUs copying {fmt_bytes(size_bytes)} at once. {parts} " + (
        f"Pinned DMA found no shared bottleneck on the host these {n} GPUs share." + tail
        if holds
        else "Even pinned copies shared a bottleneck (the host's PCIe switch or memory)."
    )
    return Finding(verdict, holds, {"gpus": n, "by_strategy": c.to_dict("index")}, c.reset_index())


#: ``on_cpu_throughout``: the timing thread's CPU time is at least this share of wall time.
ON_CPU_SHARE = 0.9


def on_cpu_throughout(rows: pd.DataFrame) -> pd.Series:
    """Per row, whether the timing thread stayed on its CPU for at least
    :data:`ON_CPU_SHARE` of the wall time (``cpu_ms``; False where unmeasured)."""
    if "cpu_ms" not in rows.columns:
        return pd.Series(False, index=rows.index)
    return (rows["cpu_ms"].astype(float) >= ON_CPU_SHARE * rows["wall_ms"].astype(float)).fillna(False)


def unexplained(explained: pd.DataFrame) -> Finding:
    """The flagged copies ``outliers.explain()`` left ``unexplained``: how many of the
    flagged, per strategy, and their evidence (which says what was ruled out). ``holds``
    when at most 20 % of flagged copies are unexplained."""
    f = explained[explained.is_outlier]
    u = f[f.cause == "unexplained"]
    share = len(u) / len(f) if len(f) else 0.0
    holds = bool(share <= 0.2)
    by = u.groupby("strategy").size()
    on_cpu = int(on_cpu_throughout(u).sum())
    extra = value_ms(u) - u["expected_ms"].astype(float)
    verdict = (
        f"{len(u)} of {len(f)} flagged copies ({share:.0%}) {'has' if len(u) == 1 else 'have'} no cause the data supports"
        + (f" ({', '.join(f'`{s}` {n}' for s, n in by.items())})" if len(u) else "")
        + (
            ". Each one's evidence names what was ruled out and what its table could not check: a "
            "counter the run lacks is where to look next."
            if len(u)
            else "."
        )
        + (f" {extra_text(extra, u['size_bytes'])}" if len(u) else "")
        + (
            f" {'It' if len(u) == 1 else f'{on_cpu} of the {len(u)}'} kept the timing thread on its CPU for at least "
            f"{ON_CPU_SHARE:.0%} of the copy: it hardly waited to run or slept. So the extra time "
            "was spent on that CPU, in PyTorch, in the CUDA driver, or spinning while CUDA waited "
            "for the GPU. CUDA spins by default when a process has no more CUDA contexts than logical "
            "CPUs; then the delay was on the GPU's side of the copy. No recorded column tells "
            "these apart."
            if on_cpu
            else ""
        )
    )
    table = u.assign(ms=value_ms(u))[["order", "strategy", "size_bytes", "ms", "expected_ms", "evidence"]]
    return Finding(verdict, holds, {"unexplained": len(u), "flagged": len(f), "share": share}, table)
