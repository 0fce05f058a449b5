"""Which causes explain most of the slow copies: the answer notebook 03 opens with.

``top_causes`` reads ``outliers.explain()`` outputs (one per table), counts the flagged
copies per cause and names the few causes that together cover most of them, each with a
short gloss a learner can read (:data:`GLOSS`); the rest are counted after them. Computed
from the tables, so a new recording gets its own answer. No torch here.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from h2dlab.escape import md_code
from h2dlab.explain.finding import Finding

__all__ = ["GLOSS", "top_causes"]

#: Each cause label in a few plain words (the full wording is ``explain.causes.CAUSES``).
GLOSS: dict[str, str] = {
    "context_init": "the first CUDA call of the process, which starts CUDA",
    "host_alloc_growth": "a new pinned block, made because no cached block was big enough",
    "device_alloc": "a new device allocation (cudaMalloc), e.g. after empty_cache()",
    "page_faults": "the operating system mapping host memory page by page",
    "host_preempted": "the timing thread waited for a CPU that another task held",
    "host_blocked": "the timing thread slept during the copy",
    "gc_pause": "Python's garbage collector ran during the copy",
    "other_threads": "the process's other threads were unusually busy",
    "host_parallel": "time spent in a parallel CPU copy while PyTorch's worker threads ran",
    "host_crowded": "PyTorch's worker threads took the CPUs from the timing thread",
    "gpu_shared": "another process used the GPU",
    "gpu_clock_low": "the GPU ran at a low clock",
    "episode": "part of a stretch of slow copies in time, a moment rather than a size",
    "gpu_wake": "a small copy after a spell without copies, likely some part waking up",
    "host_stall": "a short stall of the virtual machine's CPU, invisible inside it",
    "unexplained": "no cause the data supports; the evidence lists what was ruled out",
}


def top_causes(
    explained: Mapping[str, pd.DataFrame], *, cover: float = 0.75, most: int = 3, label: str = "these tables"
) -> Finding:
    """The few causes that explain most of the flagged copies of ``explained`` (table name ->
    ``outliers.explain()`` output), and the rest.

    Parameters
    ----------
    explained
        ``outliers.explain()`` outputs, by table name; their flagged rows are pooled.
    cover
        Causes are taken, most frequent first, until they cover this share of the flagged copies.
    most
        At most this many causes are named first.
    label
        What the tables are, in words ("this recording's tables").

    Returns
    -------
    Finding
        ``values``: ``flagged`` (int), ``top`` (labels named first), ``top_share`` (their share);
        ``table``: one row per cause with ``copies``, ``share``, ``gloss`` and ``top``. ``holds``
        when the named causes reach ``cover``.
    """
    flagged = [e.loc[e["is_outlier"].astype(bool), "cause"] for e in explained.values() if len(e)]
    causes = pd.concat(flagged) if flagged else pd.Series(dtype=str)
    if causes.empty:
        return Finding(
            f"No copy in {label} was flagged slow.", False, {"flagged": 0, "top": [], "top_share": 0.0}
        )
    counts = causes.value_counts()
    table = pd.DataFrame({"cause": counts.index, "copies": counts.to_numpy()})
    table["share"] = table.copies / table.copies.sum()
    table["gloss"] = table.cause.map(lambda c: GLOSS.get(c, "a cause this kit does not gloss"))
    reach = table.share.cumsum().shift(fill_value=0.0) < cover  # taken while the share so far is short
    table["top"] = reach & (table.index < most)
    top = table[table.top]
    n, share = int(table.copies.sum()), float(top.share.sum())
    named = "".join(f"\n- {md_code(r.cause)} ({r.copies} copies): {r.gloss}." for r in top.itertuples())
    verdict = (
        f"{len(top)} cause{'s' if len(top) != 1 else ''} explain {share:.0%} of the {n} flagged copies in "
        f"{label}:\n{named}\n"
    )
    rest = table[~table.top]
    if len(rest):
        verdict += (
            f"\nThe other {len(rest)} cause{'s' if len(rest) != 1 else ''} share the remaining "
            f"{rest.copies.sum()} copies: {', '.join(f'{md_code(r.cause)} {r.copies}' for r in rest.itertuples())}."
        )
    return Finding(
        verdict, bool(share >= cover), {"flagged": n, "top": list(top.cause), "top_share": share}, table
    )
