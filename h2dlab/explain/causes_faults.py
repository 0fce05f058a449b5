"""The ``page_faults`` rule: the kernel mapped host memory, or read a page in, during the copy.

A minor fault maps one 4 KiB page that is already in memory: on the H200 machine a new
pinned block cost about 2 us a page (0.49 ms per MiB, one fault per page). A major fault
reads a page from storage (a page of a library's code not yet loaded, say), which can take
milliseconds. So a copy is ``page_faults`` when it faulted many more pages than its
neighbours *and* those faults can account for its extra time: minor faults at no more than
:data:`MAX_MS_PER_MINOR_FAULT` each (25 times the measured cost), or at least one major
fault, which the sentence names. Eight minor faults do not explain 14 ms.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from h2dlab.explain.registry import Cause, said
from h2dlab.explain.rows import number
from h2dlab.units import fmt_bytes

__all__ = [
    "FAULT_SHARE",
    "MAX_MS_PER_MINOR_FAULT",
    "MIN_EXTRA_FAULTS",
    "PAGE_BYTES",
    "PAGE_FAULTS",
    "fault_cause",
]

#: Page-fault granularity: one minor fault maps one 4 KiB page.
PAGE_BYTES = 4096
#: page_faults: at least this many faults above the neighbours' rate ...
MIN_EXTRA_FAULTS = 8
#: ... and at least this share of the payload's pages.
FAULT_SHARE = 0.05
#: ... and the faults can account for the extra time: a minor fault costs at most this
#: (ms), 25x the 2 us a page a new pinned block cost on the H200; a major fault, no bound.
MAX_MS_PER_MINOR_FAULT = 0.05


def fault_cause(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> tuple[str, str] | None:
    """``page_faults`` with its evidence sentence for one flagged row, or None.

    Parameters
    ----------
    row, ctx, val, slow
        As a cause's test takes them (:data:`h2dlab.explain.registry.Test`): it reads the row's
        ``majflt`` and ``host_allocs`` where present, and the context's ``faults`` (minor +
        major, of every thread of the process where the table has ``proc_faults``) and
        ``fault_typ`` (the neighbours' median faults per 4 KiB page of the payload).

    Returns
    -------
    tuple of str or None
        ``("page_faults", evidence)``.
    """
    faults, ftyp = number(ctx["faults"]), number(ctx["fault_typ"])
    if not (np.isfinite(faults) and np.isfinite(ftyp)):
        return None
    pages = max(number(row["size_bytes"]) / PAGE_BYTES, 1.0)
    extra_faults, extra_ms = faults - ftyp * pages, val - number(row["expected_ms"])
    if extra_faults < max(MIN_EXTRA_FAULTS, FAULT_SHARE * pages):
        return None
    major = number(row.get("majflt"))
    major = int(major) if np.isfinite(major) and major >= 1 else 0
    if not major and extra_faults * MAX_MS_PER_MINOR_FAULT < extra_ms:
        return None  # too few pages to take that long: not the kernel mapping memory
    who = " (every thread of the process)" if np.isfinite(number(row.get("proc_faults"))) else ""
    mapped = fmt_bytes(faults * PAGE_BYTES)
    per_mib = extra_ms / (faults * PAGE_BYTES / 2**20)
    allocs = number(row.get("host_allocs"))
    what = "first touch" if np.isfinite(allocs) and allocs == 0 else "first touch, or a new pinned block"
    how = (
        f"{major} of them major (a page read from storage, which alone can take milliseconds)"
        if major
        else f"{per_mib:.2f} ms per faulted MiB"
    )
    return "page_faults", (
        f"{slow}; {int(faults)} page faults during the copy{who} ({faults / pages:.2f} per 4 KiB page "
        f"of the payload, where its neighbours had {ftyp:.2f}): {mapped} of pages, the extra "
        f"{extra_ms:.2f} ms; {how}: the kernel was mapping host memory ({what})"
        + (" or reading it in" if major else "")
    )


#: The cause's entry (``causes_evidence.PER_COPY`` tries it first).
PAGE_FAULTS = Cause(
    "page_faults",
    "the kernel was mapping host memory: many more page faults than its neighbours",
    needs=(("minflt", "majflt", "proc_faults"),),
    test=said("page_faults", fault_cause),
)
