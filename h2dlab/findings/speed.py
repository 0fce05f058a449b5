"""What a sweep says about speed: GB/s per strategy (``bandwidth``), pinned against pageable at one
size (``memory_kind``), what the smallest copy costs whatever the strategy (``small_copy_floor``), and
whether the host memcpy is a ceiling for the staged path and what bounds it (``host_copy_ceiling``,
``staged_bounds``, from a benchmark run). Each takes its table explicitly and returns a
:class:`h2dlab.explain.finding.Finding`; :mod:`h2dlab.findings.advice` re-exports them. No torch here."""

from __future__ import annotations

from typing import Any

import pandas as pd

from h2dlab.escape import md_code
from h2dlab.explain.finding import Finding, copies, size_text
from h2dlab.explain.model import medians
from h2dlab.explain.spacing import small_copy_floor  # moved there (issue #30); re-exported
from h2dlab.units import fmt_bytes

__all__ = [
    "bandwidth",
    "host_copy_ceiling",
    "memory_kind",
    "small_copy_floor",
    "staged_bounds",
    "staged_timeline",
]


def _some(t: pd.DataFrame, what: str) -> pd.DataFrame:
    """``t`` (timed rows or medians), or a ValueError saying that ``what`` has nothing to read."""
    if t.empty:
        raise ValueError(f"{what} needs timed copies that succeeded: the table has none (warm-up, errors)")
    return t


def _ms_text(ms: float) -> str:  # 0.055 -> '55 µs', 19.47 -> '19.5 ms'
    return f"{ms * 1e3:.0f} µs" if ms < 1 else f"{ms:.3g} ms"


def bandwidth(df: pd.DataFrame) -> Finding:
    """GB/s per (strategy, size) from the median time, with the interquartile range (``gbps_lo``
    from the slow quartile, ``gbps_hi`` from the fast one; ``plots.bandwidth`` draws these).
    ``holds`` when ``pinned_reuse`` is the fastest at the largest size measured.

    Parameters
    ----------
    df
        A sweep run (several strategies and sizes).

    Returns
    -------
    Finding
        ``values``: ``peak_gbps``, ``at_largest`` (GB/s per strategy at the largest size); ``table``:
        :func:`h2dlab.explain.model.medians` with ``gbps_lo``/``gbps_hi``. ValueError if no timed copy succeeded.
    """
    m = _some(medians(df), "bandwidth")
    m["gbps_lo"] = m.size_bytes / m.q3_ms / 1e6
    m["gbps_hi"] = m.size_bytes / m.q1_ms / 1e6
    top = int(m.size_bytes.max())
    at = m[m.size_bytes == top].set_index("strategy").gbps.sort_values(ascending=False)
    pk = m.loc[m.gbps.idxmax()]
    holds = bool(at.index[0] == "pinned_reuse")
    order = ", ".join(f"`{s}` {g:.1f}" for s, g in at.items())
    lo, hi = (int(f(m.loc[m.size_bytes == top, "n"])) for f in (min, max))
    basis = f"{copies(lo)} each" if lo == hi else f"{lo} to {copies(hi)}"
    verdict = (
        f"At {size_text(top)} (GB/s of the median time, {basis}): {order}. The peak is {pk.gbps:.1f} GB/s "
        f"(`{pk.strategy}` at {size_text(pk.size_bytes)})."
    )
    return Finding(verdict, holds, {"peak_gbps": float(pk.gbps), "at_largest": at.to_dict()}, m)


def memory_kind(df: pd.DataFrame, size_bytes: int, *, margin: float = 1.1) -> Finding:
    """Pinned against pageable at one size: the ratio of median times, with the range the quartiles
    allow. ``holds`` (the memory kind matters) when pinned is over ``margin`` x faster (the verdict
    says so where the quartiles allow 1x or less).

    Parameters
    ----------
    df
        A sweep run with ``pageable`` and ``pinned_reuse`` rows at ``size_bytes``.
    size_bytes
        The size to compare at.
    margin
        How much faster pinned must be for the memory kind to matter.

    Returns
    -------
    Finding
        ``values``: ``ratio`` (pageable over pinned median time), ``ratio_lo``, ``ratio_hi``.

    Raises
    ------
    ValueError
        ``df`` lacks either strategy at ``size_bytes``.
    """
    m = medians(df).set_index(["strategy", "size_bytes"])
    try:
        p, q = m.loc[("pageable", size_bytes)], m.loc[("pinned_reuse", size_bytes)]
    except KeyError:
        raise ValueError(
            f"memory_kind needs pageable and pinned_reuse rows at {size_text(size_bytes)}"
        ) from None
    r, lo, hi = float(p.median_ms / q.median_ms), float(p.q1_ms / q.q3_ms), float(p.q3_ms / q.q1_ms)
    holds = r > margin
    head = f"At {size_text(size_bytes)} a pinned copy takes {_ms_text(q.median_ms)}, a pageable one {_ms_text(p.median_ms)}: "
    if not holds:
        return Finding(head + f"within {margin:.1f}x ({r:.2f}x): the per-copy overhead, not the memory kind, sets the "
                       "time.", holds, {"ratio": r, "ratio_lo": lo, "ratio_hi": hi})  # fmt: skip
    n = min(int(p.n), int(q.n))  # with few copies the quartiles are hardly more than their values
    allow = f"the quartiles{f' of {copies(n)} each' if n < 5 else ''} allow {lo:.1f}–{hi:.1f}x"
    verdict = head + (
        f"pinned is {r:.1f}x faster ({allow}); the memory kind matters at this size."
        if lo > 1
        else f"pinned is {r:.1f}x faster on the medians, but {allow}: the memory kind "
        "matters at this size on the median, though the slower pinned copies are no faster than the faster pageable ones."
    )
    return Finding(verdict, holds, {"ratio": r, "ratio_lo": lo, "ratio_hi": hi})


def host_copy_ceiling(bench: dict[str, Any], *, method: str = "to_device") -> Finding:
    """Is the host memcpy throughput, measured alone, a ceiling for ``method`` (a staged
    path) in the same benchmark run? Each ``host_copy_<size>_gbps`` is compared with
    ``method`` at that size. ``holds`` when ``method`` beat none of them.

    Parameters
    ----------
    bench
        A benchmark result (``benchmarks/results/*.json``): ``rows`` and ``ceilings``.
    method
        The staged method to compare with each ceiling.

    Returns
    -------
    Finding
        ``values``: ``ceilings``, ``best_gbps`` (the method's best median), ``beaten_at``.

    Raises
    ------
    ValueError
        The benchmark has no ``host_copy`` ceilings or no ``method`` rows.
    """
    rows = pd.DataFrame(bench["rows"])
    ceil = {k: v for k, v in bench["ceilings"].items() if k.startswith("host_copy")}
    if not ceil or method not in set(rows.method):
        raise ValueError(f"the benchmark has no host_copy ceilings or no {method} rows")
    m = rows[rows.method == method].set_index("size_bytes").gbps_median
    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    parts, beaten, beaten_at = [], [], []
    for k, v in ceil.items():
        label = k.split("_")[2]
        n = int(label[:-3]) * units[label[-3:]]
        if n not in m.index:  # never compare a ceiling with the method at another size
            parts.append(
                f"{v:.0f} GB/s alone at {fmt_bytes(n, compact=True)}, where `{method}` was not timed"
            )
            continue
        got = float(m[n])
        parts.append(f"{v:.0f} GB/s alone against `{method}` {got:.1f} GB/s at {fmt_bytes(n, compact=True)}")
        if got > v:
            beaten.append(label)
            beaten_at.append(fmt_bytes(n, compact=True))
    holds = not beaten
    peak = bench["ceilings"].get("pinned_reuse_peak_gbps")
    faster = [
        f"{k.split('_')[2][:-3]} {k.split('_')[2][-3:]}"
        for k, v in ceil.items()
        if peak is not None and v > peak
    ]
    if not holds:
        end = f"`{method}` beat it at {', '.join(beaten_at)}: a host copy measured once and alone is no ceiling."
    elif peak is None:
        end = "The staged path stayed below it (the run has no pinned DMA peak to say which of the two limits it)."
    elif faster:
        end = (
            f"The staged path stayed below it, but the host copy alone outran the pinned DMA ({peak:.1f} GB/s, "
            f"`pinned_reuse`'s peak in the same run) at {', '.join(faster)}: there the DMA, not the memory copy, is the nearer limit."
        )
    else:
        end = f"The staged path stayed below it, and below the pinned DMA ({peak:.1f} GB/s): on this host the memory copy is the wall."
    verdict = (
        "The multithreaded host copy (pageable to pinned, all cores), measured in the same run: "
        + "; ".join(parts)
        + ". "
        + end
    )
    values = {"ceilings": ceil, "best_gbps": float(m.max()), "beaten_at": beaten, "above_dma_at": faster}
    return Finding(verdict, holds, values)


def staged_bounds(bench: dict[str, Any], *, method: str = "to_device") -> Finding:
    """What bounds a staged copy, measured in the same run as ``method`` (the benchmark's
    ``bounds``): per size, the upper bound min(host copy alone, DMA alone) and the lower
    bound min(host copy under DMA, DMA under host copies), and ``method`` as a fraction of
    each. ``holds`` when ``method`` reached the lower bound at every size from 1 GiB up (one at least).

    Parameters
    ----------
    bench
        A benchmark result (``benchmarks/results/*.json``) with ``bounds``.
    method
        The name the sentence gives the staged copy.

    Returns
    -------
    Finding
        ``values``: ``by_size`` (size in bytes -> the bound's GB/s figures and fractions). ValueError
        where the benchmark has no ``bounds`` (results written before they were measured).
    """
    if not (rows := bench.get("bounds") or []):
        raise ValueError("the benchmark has no bounds: re-run benchmarks/bench_transfer.py")
    parts, by = [], {}
    for r in rows:
        up = "the DMA alone" if r["dma_alone_gbps"] <= r["host_alone_gbps"] else "the host copy alone"
        low = "the DMA under host copies" if r["lower_is"] == "dma_under_host" else "the host copy under DMA"
        parts.append(
            f"At {fmt_bytes(r['size_bytes'], compact=True)}, `{method}` ran at {r['to_device_gbps']:.1f} GB/s: "
            f"{r['frac_of_upper']:.0%} of the upper bound {r['upper_gbps']:.1f} ({up}), "
            f"{r['frac_of_lower']:.0%} of the lower bound {r['lower_gbps']:.1f} ({low})."
        )
        by[int(r["size_bytes"])] = {
            k: r[k] for k in ("to_device_gbps", "upper_gbps", "lower_gbps", "frac_of_upper", "frac_of_lower")
        }
    low_at = [s for s, r in by.items() if not r["frac_of_lower"] >= 1]  # NaN too; judged from 1 GiB up
    holds = (big := any(s >= 2**30 for s in by)) and not [s for s in low_at if s >= 2**30]
    under = ", ".join(fmt_bytes(s, compact=True) for s in low_at)
    # The bounds phase times the method again: say what the comparison rows read at those sizes.
    comp = {
        int(r["size_bytes"]): r["gbps_median"] for r in bench.get("rows") or [] if r.get("method") == method
    }
    again = [f"{comp[s]:.1f}" for s in by if s in comp]
    verdict = (
        "The same run measured two bounds (medians). The upper bound is the slower of the host copy and the "
        "DMA, each alone. The lower bound is the slower of the two while the other runs: a staged copy that "
        f"overlaps them perfectly reaches it, so below it is a shortfall. {' '.join(parts)} "
        + (
            f"From 1 GiB up `{method}` reached the lower bound{f' (under it at {under})' if under else ''}."
            if holds
            else f"`{method}` stayed under the lower bound at {under} (the target judges 1 GiB up)."
            if big
            else "No size from 1 GiB up was measured, so the target (1 GiB up) cannot be judged."
        )
        + (
            f" This phase timed `{method}` again, beside its bounds; the comparison's rows read "
            f"{', '.join(again)} GB/s at {'these sizes' if len(again) == len(by) else 'the sizes both timed'}."
            if again
            else ""
        )
    )
    return Finding(
        verdict, holds, {"by_size": by}, pd.DataFrame(by).T.rename_axis("size_bytes").reset_index()
    )


def staged_timeline(
    tl: dict[str, Any], bench: dict[str, Any] | None = None, *, busy_share: float = 0.85
) -> Finding:
    """Where the time of one staged copy went (a benchmark's ``timeline_<size>``): when the
    first DMA started, the last host copy and the last DMA ended, how long the DMA engine sat
    idle, and how long its chunks' DMAs were busy and at what rate, against one DMA of the
    whole size alone (``bench``'s ``bounds`` at that size, where present).

    ``holds`` when the DMAs were busy ``busy_share`` or more of the wall time and moved under
    95 % of the DMA alone: then the chunks' own DMA rate, not waiting on host copies, is what
    keeps the staged copy below its bound.
    """
    chunks = pd.DataFrame(tl.get("chunks") or [])
    head = (
        f"{tl['n_chunks']} chunks, {tl['threads']} staging thread(s), engine {md_code(tl['engine'])}. The first DMA "
        f"started at {tl['first_dma_start_ms']:.2f} ms, the last host copy ended at "
        f"{tl['last_host_copy_end_ms']:.2f} ms and the last DMA at {tl['last_dma_end_ms']:.2f} ms "
        f"(wall {tl['wall_ms']:.2f} ms). The DMA engine sat idle {tl['dma_idle_ms']:.2f} ms in between."
    )
    if chunks.empty:
        return Finding(head, False, {})
    dur = chunks.dma_end_ms - chunks.dma_start_ms
    busy = float(dur.sum())
    rate = float(chunks.bytes.sum() / busy / 1e6)
    each = chunks.bytes / dur / 1e6
    alone = next(
        (
            r["dma_alone_gbps"]
            for r in (bench or {}).get("bounds") or []
            if r["size_bytes"] == tl["size_bytes"]
        ),
        None,
    )
    values = {"busy_ms": busy, "dma_gbps": rate, "dma_alone_gbps": alone, "busy_share": busy / tl["wall_ms"]}
    verdict = (
        f"{head} Its chunks' DMAs were busy {busy:.2f} ms of the {tl['wall_ms']:.2f}, moving {rate:.1f} GB/s "
        f"(per chunk {each.min():.1f}–{each.max():.1f}, median {each.median():.1f})"
    )
    holds = False
    if alone is not None:
        holds = bool(values["busy_share"] >= busy_share and rate < 0.95 * alone)
        verdict += f" against {alone:.1f} GB/s for one DMA of all {size_text(tl['size_bytes'])} alone" + (
            ": the DMA hardly waited on the host copies; its own rate on chunks is what keeps the staged "
            "copy below its bound here."
            if holds
            else "."
        )
    else:
        verdict += "."
    return Finding(verdict, holds, values)
