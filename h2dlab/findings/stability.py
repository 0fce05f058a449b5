"""How far a headline holds from one recording to the next (issue 31, item 5).

Link-side figures (a pinned copy's GB/s) are set by the PCIe link and the GPU's copy
engine: they hardly move between recordings of one machine model. Host-side figures (a
pageable copy's GB/s, what the first ``pin_memory()`` or a ``cudaHostRegister`` costs, the
size from which pinning first pays) depend on the host's memory, kernel and load: they move.
:func:`host_side` states each host-side headline as its range across the recordings of the
same GPU model that the kit holds (:func:`same_model`), beside the link's;
:func:`forum_pinning` reads question 2 off the forum's own A100 table. No torch here.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from h2dlab.escape import md_code, md_text
from h2dlab.explain.finding import Finding, size_text
from h2dlab.explain.model import timed, value_ms
from h2dlab.findings.advice import pin_cached_pays, registering_cost

__all__ = ["Sweep", "figures", "for_recording", "forum_pinning", "host_side", "same_model"]

GIB = 2**30
#: The recordings bundled beside ``h200`` that hold a sweep run, with their allocator runs:
#: label -> (sweep dataset, allocator dataset). Found by GPU model in :func:`same_model`.
BUNDLED_SWEEPS: dict[str, tuple[str, str]] = {"h200_sweep": ("h200_sweep", "h200_allocator")}
PINNING = ("pin_then_copy", "pin_memory")


class Sweep(NamedTuple):
    """One recording's tables that the headlines read: its interleaved sweep run and (where
    recorded) its run with the host cache emptied before each size."""

    label: str
    date: str
    sweep: pd.DataFrame
    cold: pd.DataFrame | None


def _median_at(rows: pd.DataFrame, size_bytes: int) -> float:
    at = rows[rows.size_bytes == size_bytes]
    return float(value_ms(at).median()) if len(at) else float("nan")


def figures(s: Sweep, size_bytes: int = GIB) -> dict[str, Any]:
    """The headline figures of one recording at ``size_bytes`` (NaN where not measured):
    ``pinned_gbps`` (link side: ``pinned_reuse``), ``pageable_gbps``, ``first_pin_ms`` (the
    copies of ``pin_memory()`` that made a new pinned block, ``host_allocs > 0``, in the sweep
    and the cold run), ``register_ms`` (:func:`registering_cost`) and ``pays_from_bytes``
    (:func:`pin_cached_pays`: from which size a cached ``pin_memory()`` beats ``x.to()``)."""
    sw = timed(s.sweep)
    pinned = _median_at(sw[sw.strategy == "pinned_reuse"], size_bytes)
    pageable = _median_at(sw[sw.strategy == "pageable"], size_bytes)
    cold = [s.sweep] + ([s.cold] if s.cold is not None else [])
    new = pd.concat([c[c.strategy.isin(PINNING) & (c.error == "") & (c.host_allocs > 0)] for c in cold])
    try:
        register = float(registering_cost(s.sweep, size_bytes)["ms"]["median"])
    except ValueError:
        register = float("nan")
    try:
        pays = pin_cached_pays(s.sweep)["from_bytes"]
    except ValueError:
        pays = None
    return {
        "label": s.label,
        "date": s.date,
        "pinned_gbps": size_bytes / pinned / 1e6,
        "pageable_gbps": size_bytes / pageable / 1e6,
        "first_pin_ms": _median_at(new, size_bytes),
        "register_ms": register,
        "pays_from_bytes": pays,
    }


def _span(v: pd.Series, fmt: str, unit: str) -> str:
    """``'6.9–8.9 GB/s'``, one value once, and how many recordings it rests on where some lack it."""
    have = v.dropna()
    lo, hi = format(have.min(), fmt), format(have.max(), fmt)
    text = f"{lo} {unit}" if lo == hi else f"{lo}–{hi} {unit}"
    return text if len(have) == len(v) else f"{text} (in {len(have)} of {len(v)} recordings)"


def _common_size(recordings: list[Sweep], size_bytes: int) -> int:
    """``size_bytes`` where every recording's sweep timed pinned and pageable copies of it; else
    the largest such size below it (a quick plan stops short of 1 GiB), else the smallest above."""
    sizes = None
    for r in recordings:
        t = timed(r.sweep)
        both = set(t.size_bytes[t.strategy == "pinned_reuse"]) & set(t.size_bytes[t.strategy == "pageable"])
        sizes = both if sizes is None else sizes & both
    if not sizes:
        raise ValueError("the recordings share no size with both pinned_reuse and pageable copies")
    below = [int(x) for x in sizes if x <= size_bytes]
    return max(below) if below else min(int(x) for x in sizes)


def host_side(recordings: list[Sweep], size_bytes: int = GIB) -> Finding:
    """Link-side and host-side headlines at ``size_bytes``, each as its range across
    ``recordings`` (recordings of one GPU model: :func:`same_model`).

    Parameters
    ----------
    recordings
        One :class:`Sweep` per recording, this one first.
    size_bytes
        The size the GB/s and costs are read at.

    Returns
    -------
    Finding
        ``table``: one row per recording (:func:`figures`); ``values``: per figure its
        ``min``/``max`` (and ``pays_from_bytes`` the sizes). ``holds`` when the link-side
        figure moved less, relatively, than every host-side figure with two or more values.
    """
    if not recordings:
        raise ValueError("host_side needs at least one recording's sweep")
    size_bytes = _common_size(recordings, size_bytes)
    t = pd.DataFrame([figures(s, size_bytes) for s in recordings])
    size = size_text(size_bytes)
    n = len(t)
    names = ", ".join(f"{md_code(r.label)} ({md_text(r.date)})" for r in t.itertuples())
    which = (
        f"the {n} recordings of this GPU model that the kit holds: {names}"
        if n > 1
        else f"the one recording of this GPU model that the kit holds ({names})"
    )
    cols = ("pinned_gbps", "pageable_gbps", "first_pin_ms", "register_ms")
    values = {c: {"min": float(t[c].min()), "max": float(t[c].max())} for c in cols}
    pays = [int(b) for b in t.pays_from_bytes.dropna()]
    values["pays_from_bytes"] = pays
    moved = {c: (v["max"] - v["min"]) / v["min"] for c, v in values.items() if c in cols and v["min"] > 0}
    host_moved = [moved[c] for c in cols[1:] if c in moved and t[c].notna().sum() > 1]
    holds = bool(n > 1 and host_moved and moved.get("pinned_gbps", np.inf) < min(host_moved))
    parts = [f"Across {which}."]
    parts.append(f"Link side, stable: a pinned copy of {size} ran at {_span(t.pinned_gbps, '.1f', 'GB/s')}.")
    host = [f"a pageable copy of {size} ran at {_span(t.pageable_gbps, '.1f', 'GB/s')}"]
    if t.first_pin_ms.notna().any():
        host.append(f"the first `pin_memory()` of {size} took {_span(t.first_pin_ms, '.0f', 'ms')}")
    if t.register_ms.notna().any():
        host.append(f"`cudaHostRegister` of {size} cost {_span(t.register_ms, '.0f', 'ms')}")
    parts.append("Host side, which moves between recordings of one model: " + "; ".join(host) + ".")
    if pays:
        froms = list(dict.fromkeys(size_text(b) for b in sorted(pays)))
        parts.append(
            "With its block cached, pinning first paid from "
            + (
                f"{froms[0]} up in {'every recording' if n > 1 else 'it'}."
                if len(froms) == 1
                else f"{' or '.join(froms)} up, depending on the recording."
            )  # fmt: skip
        )
    if n == 1:
        parts.append("With one recording, these host-side figures have no range yet: expect them to move.")
    return Finding(" ".join(parts), holds, values, t)


def same_model(gpu_name: str, here: Sweep | None = None) -> list[Sweep]:
    """``here`` (if given) and every bundled recording whose GPU is ``gpu_name``: the bundled
    recording ``h200`` and the first session's (:data:`BUNDLED_SWEEPS`), each once.

    Parameters
    ----------
    gpu_name
        The GPU model as env.json gives it (``"NVIDIA H200"``).
    here
        The recording a notebook reads, first in the list.
    """
    from h2dlab.recording import datasets, session

    out = [here] if here is not None else []
    seen = {id(here.sweep)} if here is not None else set()
    rec = session.Recorded(session.BUNDLED)
    sw = rec.get("sweep", "pow2-interleaved")
    if sw is not None and _gpu(sw) == gpu_name and (here is None or not _same_runs(sw, here.sweep)):
        out.append(Sweep(rec.name, rec.date(), sw, rec.get("allocator", "pin-emptied")))
    for label, (sweep_ds, alloc_ds) in BUNDLED_SWEEPS.items():
        sw = datasets.run_named(datasets.load(sweep_ds), "pow2-interleaved")
        if _gpu(sw) != gpu_name or any(_same_runs(sw, s.sweep) for s in out) or id(sw) in seen:
            continue
        cold = datasets.run_named(datasets.load(alloc_ds), "pin-emptied")
        date = str((next(iter(sw.attrs.get("envs", {}).values()), None) or {}).get("date", "?"))[:10]
        out.append(Sweep(label, date, sw, cold))
    return out


def for_recording(rec: Any, size_bytes: int = GIB) -> Finding:
    """:func:`host_side` for a recording a notebook reads (``session.recording``): its
    interleaved sweep and cold-cache run first, then the bundled recordings of its GPU model.
    A recording without a sweep gets a sentence that says so."""
    sweep = rec.get("sweep", "pow2-interleaved")
    if sweep is None:
        return Finding("This recording has no interleaved sweep, so it gives no host-side figures.", False)
    here = Sweep(rec.name, rec.date(), sweep, rec.get("allocator", "pin-emptied"))
    try:
        return host_side(same_model(_gpu(sweep) or "", here), size_bytes)
    except ValueError as exc:  # the recordings share no size: say so in the notebook, do not fail it
        return Finding(f"No host-side range: {exc}.", False)


def _gpu(df: pd.DataFrame) -> str | None:
    env = next(iter((df.attrs.get("envs") or {}).values()), None) or df.attrs.get("env") or {}
    return env.get("gpu_name")


def _same_runs(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    return set(a.run_id.unique()) == set(b.run_id.unique())


def forum_pinning(
    explained: pd.DataFrame, rerun: pd.DataFrame | None = None, *, min_bytes: int = 256 * 2**20
) -> Finding:
    """Question 2 on the forum's own table: at sizes from ``min_bytes`` where no column of
    the A100 table was flagged slow or lies in a slow stretch (``outliers.explain()``), the time
    of ``pin_memory`` plus ``pinned_to_cuda`` over ``direct_to_cuda``, and the direct copy's
    GB/s; beside it, where ``rerun`` (the forum protocol re-run) is given, the same ratio
    there (median over its runs per size).

    Returns
    -------
    Finding
        ``values``: ``ratio`` (min, median, max), ``direct_gbps`` (median), ``sizes``,
        ``rerun_ratio`` (min, median, max or None). ``holds`` when pinning then copying was
        faster than the direct copy at every such size.
    """
    e = explained[explained.size_bytes >= min_bytes]
    calm = (e.groupby("size_bytes").episode.max() < 0) & ~e.groupby("size_bytes").is_outlier.any()
    e = e[e.size_bytes.isin(calm[calm].index)]
    p = e.assign(_v=value_ms(e)).pivot_table(index="size_bytes", columns="strategy", values="_v")
    if p.empty or not {"pin_memory", "pinned_to_cuda", "direct_to_cuda"} <= set(p.columns):
        raise ValueError(f"no size from {size_text(min_bytes)} outside a slow stretch has all three columns")
    ratio = (p.pin_memory + p.pinned_to_cuda) / p.direct_to_cuda
    gbps = float((p.index / p.direct_to_cuda / 1e6).median())
    values: dict[str, Any] = {
        "ratio": (float(ratio.min()), float(ratio.median()), float(ratio.max())),
        "direct_gbps": gbps,
        "sizes": [int(s) for s in p.index],
        "rerun_ratio": None,
    }
    lo, hi = size_text(int(p.index.min())), size_text(int(p.index.max()))
    span = lo if lo == hi else f"{lo} to {hi}"
    verdict = (
        f"On the forum's A100, at {len(p)} sizes from {span} outside its slow stretches, `x.pin_memory()` then "
        f"the pinned copy took a median {ratio.median():.2f}x the time of the direct `x.to('cuda')` "
        f"(range {ratio.min():.2f}–{ratio.max():.2f}). "
        f"So pinning every step bought about {1 - ratio.median():.0%} there. The direct copy ran at {gbps:.1f} GB/s "
        "(one shot per size, host clock)."
    )
    if rerun is not None and rerun.size_bytes.isin(p.index).any():
        r = timed(rerun[rerun.size_bytes.isin(p.index)])
        made = r.loc[r.host_allocs.fillna(0) > 0, ["run_id", "size_bytes"]]  # a new pinned block: not steady
        r = r[~r.set_index(["run_id", "size_bytes"]).index.isin(pd.MultiIndex.from_frame(made))]
        q = r.assign(_v=value_ms(r)).pivot_table(
            index=["run_id", "size_bytes"], columns="strategy", values="_v"
        )
        if {"pin_memory", "pinned_to_cuda", "direct_to_cuda"} <= set(q.columns) and len(q):
            rr = ((q.pin_memory + q.pinned_to_cuda) / q.direct_to_cuda).groupby(level="size_bytes").median()
            values["rerun_ratio"] = (float(rr.min()), float(rr.median()), float(rr.max()))
            verdict += (
                f" The same protocol re-run here took a median {rr.median():.2f}x at the same sizes (range "
                f"{rr.min():.2f}–{rr.max():.2f}; steps that made a new pinned block left out). How much pinning "
                "first pays depends on the host."
            )
    return Finding(verdict, bool((ratio < 1).all()), values, ratio.rename("ratio").reset_index())
