"""The ``other_threads`` rule: the process's other threads ran far more CPU during a copy
than during copies like it.

Two sources, best first. Schema 4's ``others_cpu_ms`` sums each other thread's own CPU
clock, read just before and just after the copy: exact, and it names the busiest thread.
Schema 3's ``proc_cpu_ms - cpu_ms`` (the process clock less the timing thread's) is all
older tables have; Linux adds another thread's running time to the process clock only at
a scheduler tick or when that thread stops, so over a copy of a few ms it comes in lumps
and can hold time from before the copy: the evidence says so.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from h2dlab.explain.registry import Cause, said
from h2dlab.explain.rows import column, number

__all__ = ["MIN_OTHERS_RATIO", "OTHER_THREADS", "others_cause", "others_ms", "others_share", "usual_share"]

#: other_threads: the process's other threads ran at least this multiple of their usual
#: CPUs' worth for copies like it (besides covering its extra time with extra CPU).
MIN_OTHERS_RATIO = 2.0


def others_ms(row: pd.Series) -> tuple[float, bool]:
    """CPU time (ms) of the process's other threads during the copy and whether it is
    exact: ``others_cpu_ms`` where recorded (schema 4), else ``proc_cpu_ms - cpu_ms``
    (at least 0; schema 3), else NaN."""
    exact = number(row.get("others_cpu_ms"))
    if np.isfinite(exact):
        return exact, True
    proc, cpu = number(row.get("proc_cpu_ms")), number(row.get("cpu_ms"))
    if np.isfinite(proc) and np.isfinite(cpu):
        return max(proc - cpu, 0.0), False
    return np.nan, False


def others_share(df: pd.DataFrame) -> pd.Series:
    """Per row, the CPUs' worth the process's other threads ran: schema 4's exact
    ``others_cpu_ms`` over ``others_window_ms`` (the window its reads span), else
    ``(proc_cpu_ms - cpu_ms) / wall_ms`` (at least 0; schema 3), else NaN."""

    def col(name: str) -> pd.Series:
        return column(df, name)

    exact, window = col("others_cpu_ms"), col("others_window_ms")
    inexact = np.maximum(col("proc_cpu_ms") - col("cpu_ms"), 0.0) / df["wall_ms"].astype(float)
    return (exact / window.where(window > 0)).where(exact.notna(), inexact)


def usual_share(ctx: pd.Series) -> tuple[float, str]:
    """The other threads' usual CPUs' worth a copy is compared with, and what it is the
    median of: ``ctx["others_cell"]`` (copies of the same group and size) where there are
    enough of those, else ``ctx["others_typ"]`` (the whole group)."""
    cell, typ = ctx.get("others_cell", np.nan), ctx.get("others_typ", np.nan)
    return (cell, "copies of this size") if np.isfinite(cell) else (typ, "its neighbours")


def others_cause(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> tuple[str, str] | None:
    """other_threads for one flagged row, or None.

    The process's other threads ran, in CPUs' worth (their CPU time / wall time), at least
    :data:`MIN_OTHERS_RATIO` times their usual share for copies like it
    (``ctx["others_cell"]``, copies of the same group and size, else ``others_typ``, the
    whole group), and beyond that usual share at least one CPU for the whole of the copy's
    extra time. Shares, not amounts: other threads that run at their usual rate use more
    CPU during any longer copy, which says nothing about its cause.
    """
    others, exact = others_ms(row)
    share, like = usual_share(ctx)
    if not (np.isfinite(others) and np.isfinite(share)):
        return None
    wall, exp = row["wall_ms"], row["expected_ms"]
    window = number(row.get("others_window_ms")) if exact else np.nan
    span = window if np.isfinite(window) and window > 0 else wall
    rate = others / span
    if others <= 0 or rate < MIN_OTHERS_RATIO * share or (rate - share) * wall < val - exp:
        return None
    rd = number(row.get("run_delay_ms"))
    waited = f"; the timing thread itself waited {rd:.2f} ms to run" if np.isfinite(rd) and rd > 0 else ""
    candidates = (
        "PyTorch's intra-op threads, which can run the host side of pin_memory(), torch.cat and CPU "
        "tensor copies, and CUDA's own threads"
    )
    if exact:
        top, name = number(row.get("busiest_cpu_ms")), str(row.get("busiest_thread", "") or "")
        who = (
            f"; the busiest, a thread named '{name}', ran {top:.2f} ms of it"
            if name and np.isfinite(top)
            else ""
        )
        return "other_threads", (
            f"{slow}; other threads of the process ran {others:.2f} ms of CPU in the {span:.2f} ms around "
            f"it (each thread's own CPU clock, read just before and just after the copy's {wall:.2f} ms), "
            f"{rate:.1f} CPUs' worth, "
            f"where for {like} they run {share:.1f} CPUs' worth (median){who}{waited}: the copy ran while "
            f"they were far busier than usual ({candidates} run in this process)"
        )
    return "other_threads", (
        f"{slow}; other threads of the process ran during the copy: the process's CPU clock, less the "
        f"timing thread's, advanced {others:.2f} ms in its {wall:.2f} ms by the host clock, {rate:.1f} "
        f"CPUs' worth, where for {like} it advances {share:.1f} CPUs' worth (median){waited}; Linux adds "
        "another thread's running time to that clock at a scheduler tick or when the thread stops "
        "running, so the amount can include time from before the copy, and a longer copy is likelier "
        f"to span a tick; which threads, the table cannot say ({candidates} are candidates)"
    )


#: The cause's entry (``causes_evidence.PER_COPY``).
OTHER_THREADS = Cause(
    "other_threads",
    "the process's other threads ran far more CPUs' worth during the copy than during copies like it",
    needs=(("others_cpu_ms", "proc_cpu_ms"),),
    test=said("other_threads", others_cause),
)
