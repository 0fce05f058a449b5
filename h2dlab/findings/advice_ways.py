"""The advice table's other cases (issue 16): results back to the host (device→host
strategies) and a batch of many small tensors (batch methods), as rows in the columns of
:func:`h2dlab.findings.advice.advice`, each compared with the plain way of its own case
(``x.cpu()``; a loop of ``.to()``). No torch here.
"""

from __future__ import annotations

import pandas as pd

from h2dlab.explain.finding import copies
from h2dlab.explain.model import timed, value_ms
from h2dlab.findings.claims import spread
from h2dlab.units import fmt_bytes

__all__ = ["BACK", "BATCH", "extra_rows"]

#: Device→host ways: (strategy, what a user writes, what it is). The first is the baseline.
BACK = (
    ("d2h_pageable", "y.cpu()", "results back: .cpu() into pageable memory"),
    ("d2h_pinned_reuse", "buf.copy_(y, non_blocking=True); sync", "results back into a reused pinned buffer"),
    ("d2h_non_blocking", "y.to('cpu', non_blocking=True); sync", "results back, non_blocking, fresh pinned"),
    ("d2h_staged", "staged back through a pinned ring", "results back, staged through a pinned ring"),
)
#: Batch methods: (method, what a user writes, what it is). The first is the baseline.
BATCH = (
    ("loop_to", "[t.to('cuda') for t in batch]", "a loop of .to()"),
    (
        "loop_non_blocking",
        "[t.to('cuda', non_blocking=True) ...]; sync",
        "a loop of non_blocking .to(), one sync",
    ),
    (
        "pinned_each",
        "[p.to('cuda', non_blocking=True) for p in pinned]",
        "each tensor pinned beforehand (not timed), then copied",
    ),
    (
        "pinned_flat",
        "pack into one pinned buffer, one copy, views",
        "packed into one pinned buffer (packing timed)",
    ),
    ("to_device_packed", "h2dlab.transfer.fastpath.to_device(packed)", "packed, then to_device"),
    (
        "foreach_copy",
        "torch._foreach_copy_(dsts, pinned)",
        "torch._foreach_copy_, pinned beforehand (not timed)",
    ),
    (
        "tensordict",
        "TensorDict(batch).to('cuda', non_blocking_pin=True)",
        "TensorDict non_blocking_pin (pinning timed)",
    ),
)


def _row(size: int, ms: pd.Series, way: str, code: str, what: str, case: str, basis: str) -> dict:
    s = spread(ms)
    return {"size_bytes": int(size), "way": way, "code": code, "what": what, "per_copy_ms": s["median"], "q1_ms": s["q1"],
            "q3_ms": s["q3"], "upfront_ms": 0.0, "case": case, "basis": f"{copies(s['n'])} {basis}"}  # fmt: skip


def _back(d2h: pd.DataFrame, size_bytes: int) -> list[dict]:
    d = timed(d2h[d2h.size_bytes == size_bytes])
    out = []
    for way, code, what in BACK:
        g = d[d.strategy == way]
        if len(g):
            out.append(
                _row(
                    size_bytes,
                    value_ms(g),
                    way,
                    code,
                    what,
                    "results back to the host",
                    "at this size",
                )
            )
    return out if out and out[0]["way"] == BACK[0][0] else []


def _batch(batch: pd.DataFrame, size_bytes: int) -> list[dict]:
    b = timed(batch)
    if b.empty:
        return []
    total = int(b.size_bytes.iloc[(b.size_bytes - size_bytes).abs().argmin()])  # the nearest batch total
    b = b[b.size_bytes == total]
    n = int(b.n_tensors.max())
    b = b[b.n_tensors == n]
    case = f"a batch of {n} tensors, {fmt_bytes(total, compact=True)} in all"
    out = []
    for way, code, what in BATCH:
        g = b[b.strategy == way]
        if len(g):  # many tensors: the host clock, which brackets every launch and the final sync
            out.append(_row(total, g.wall_ms, way, code, what, case, "by the host clock"))
    return out if out and out[0]["way"] == BATCH[0][0] else []


def extra_rows(
    size_bytes: int, *, d2h: pd.DataFrame | None = None, batch: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Advice rows for results back at ``size_bytes`` (from ``d2h`` rows measured at that
    size) and for a batch (from ``batch``: the batch total nearest ``size_bytes``, its
    largest number of tensors). Each case's rows carry ``baseline_ms`` (its first way,
    ``x.cpu()`` or a loop of ``.to()``) and ``compared_with``; a case whose baseline was not
    measured gives no rows."""
    parts = []
    for rows, base in ((_back(d2h, size_bytes) if d2h is not None else [], "y.cpu()"),
                       (_batch(batch, size_bytes) if batch is not None else [], "a loop of .to()")):  # fmt: skip
        if rows:
            t = pd.DataFrame(rows)
            parts.append(t.assign(baseline_ms=float(t.per_copy_ms.iloc[0]), compared_with=base))
    cols = [
        "size_bytes",
        "way",
        "code",
        "what",
        "per_copy_ms",
        "q1_ms",
        "q3_ms",
        "upfront_ms",
        "case",
        "basis",
    ]
    return (
        pd.concat(parts, ignore_index=True)
        if parts
        else pd.DataFrame(columns=[*cols, "baseline_ms", "compared_with"])
    )
