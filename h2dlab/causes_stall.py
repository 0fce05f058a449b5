"""The ``host_stall`` rule: a copy a few tens of microseconds slow, on its CPU the whole
time with every counter clean, by no more than the stalls this machine's CPUs show with
nothing to do.

``census.census`` spins a thread on its clocks for about a second at the end of each CUDA
run and counts the gaps (``stall_census`` in the run's env.json): on a virtual machine
some time is taken from a running vCPU where the guest cannot see it, and the thread's
CPU clock runs on through it. A copy hit by one such stall is slower by the stall's
length, with nothing else to show for it. So :func:`stall_cause` names a flagged copy
``host_stall`` when its run's census counted on-CPU stalls, the copy's extra time lies
between the census's threshold and its longest on-CPU stall, and the timing thread was
on its CPU for at least :data:`ON_CPU_COPY_SHARE` of the copy (a stalled spin looks like
that; a thread that waited or slept has its own causes). It is tried last, after
``gpu_wake``: only the size of the extra points to it, so it is likely, not certain. The
sentence says how many of the run's copies a stall would meet at the census's rate
(:func:`expected_hits`), so a reader can weigh it. Without a census (tables recorded
before it, CPU runs), it never fires. Of the kit, this imports only ``rows``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from h2dlab.rows import number

__all__ = [
    "ON_CPU_COPY_SHARE",
    "census_of",
    "censuses_by_run",
    "expected_hits",
    "run_censuses",
    "stall_cause",
    "stall_check",
]

#: The timing thread's CPU time over the copy's wall time must be at least this.
ON_CPU_COPY_SHARE = 0.9
_KEYS = ("on_cpu", "on_cpu_per_s", "on_cpu_max_us", "threshold_us", "seconds")


def census_of(env: object) -> dict | None:
    """A run's stall census from its env.json (``env['stall_census']``), or None where it
    has none or it is not one (missing keys, a count or size that is not a number)."""
    if not isinstance(env, Mapping):
        return None
    c = env.get("stall_census")
    if not isinstance(c, Mapping) or any(k not in c for k in _KEYS):
        return None
    values = {k: c[k] for k in _KEYS}
    for k, v in values.items():
        if v is None and k in ("on_cpu_max_us", "on_cpu_per_s"):
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0:
            return None
    return dict(c)


def censuses_by_run(df: pd.DataFrame) -> dict:
    """run_id -> its run's census (``census_of`` its env: ``df.attrs['envs']`` by run_id,
    else the table's one ``attrs['env']`` for a table of one run), None where none."""
    envs = df.attrs.get("envs")
    if not isinstance(envs, Mapping):
        one = df.attrs.get("env")
        runs = df["run_id"].unique() if "run_id" in df.columns else []
        envs = {runs[0]: one} if len(runs) == 1 and isinstance(one, Mapping) else {}
    return {run: census_of(env) for run, env in envs.items()}


def run_censuses(df: pd.DataFrame, by_run: Mapping | None = None) -> pd.Series:
    """Per row, its run's census: from ``by_run`` (run_id -> census or None, as
    :func:`censuses_by_run` gives) where given, else from ``df``'s attrs; None where none.
    Raises ``TypeError`` for a ``by_run`` that is not a mapping."""
    if by_run is None:
        by_run = censuses_by_run(df)
    if not isinstance(by_run, Mapping):
        raise TypeError(f"censuses must be a mapping run_id -> stall census, not {type(by_run).__name__}")
    found = {run: census_of({"stall_census": c}) for run, c in by_run.items()}
    return pd.Series([found.get(r) for r in df["run_id"]], index=df.index, dtype=object)


def expected_hits(census: Mapping, run_wall_s: float) -> float:
    """How many copies of a run whose timed copies took ``run_wall_s`` seconds in all a
    stall would meet at the census's on-CPU rate (each copy met at most once: the rate
    times the time spent copying)."""
    rate = census.get("on_cpu_per_s")
    return float(rate) * run_wall_s if rate is not None and np.isfinite(run_wall_s) else float("nan")


def _census_text(c: Mapping) -> str:
    rate = c.get("on_cpu_per_s")
    p50 = c.get("on_cpu_p50_us")
    median = f", median {p50:.0f} us" if isinstance(p50, (int, float)) else ""
    return (
        f"this run's stall census ({c['seconds']:.1f} s of a thread spinning on its clocks right after "
        f"the copies) counted {int(c['on_cpu'])} stalls of {c['threshold_us']:.0f} us or more with the "
        f"thread on its CPU through them ({rate:.0f} a second{median}, the longest {c['on_cpu_max_us']:.0f} us)"
    )


def stall_cause(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> tuple[str, str] | None:
    """``host_stall`` with its evidence sentence for one flagged row, or None.

    Parameters
    ----------
    row
        The row of ``outliers.detect()``'s output.
    ctx
        Its row of ``causes.neighbours()``: ``census`` (the run's, or None),
        ``cpu_share`` (cpu_ms / wall_ms) and ``run_wall_s``.
    val
        Its timing in ms (``rows.value_ms``).
    slow
        ``causes_evidence.slow_text(row, val)``, the start of the sentence.
    """
    c = ctx.get("census")
    if not isinstance(c, Mapping) or not c.get("on_cpu"):
        return None
    extra_us = (val - number(row["expected_ms"])) * 1e3
    share = number(ctx.get("cpu_share"))
    longest = c["on_cpu_max_us"]
    if not (np.isfinite(extra_us) and c["threshold_us"] <= extra_us <= longest):
        return None
    if not (np.isfinite(share) and share >= ON_CPU_COPY_SHARE):
        return None
    hits = expected_hits(c, number(ctx.get("run_wall_s")))
    weigh = (
        f"; at that rate a stall meets about {hits:.1f} of the run's copies while they run"
        if np.isfinite(hits)
        else ""
    )
    return "host_stall", (
        f"{slow}; the extra {extra_us:.0f} us is no longer than the stalls this machine's CPUs show with "
        f"nothing to do: {_census_text(c)}; the timing thread was on its CPU for {share:.0%} of the copy, as "
        f"through such a stall: time taken from a running vCPU where the guest cannot see it (a VM exit, an "
        f"interrupt its kernel charges to the thread), which no counter here shows{weigh}; likely, not "
        f"certain: only the size of the extra points to it"
    )


def stall_check(row: pd.Series, ctx: pd.Series, val: float) -> str | None:
    """What the run's stall census rules out for an ``unexplained`` copy, or None where the
    run has no census (``causes_evidence.ruled_out``'s ``stall census`` check)."""
    c = ctx.get("census")
    if not isinstance(c, Mapping):
        return None
    if not c.get("on_cpu"):
        return (
            f"this run's stall census ({c['seconds']:.1f} s spinning) counted no stall of "
            f"{c['threshold_us']:.0f} us or more with the thread on its CPU"
        )
    extra_us = (val - number(row["expected_ms"])) * 1e3
    share = number(ctx.get("cpu_share"))
    if np.isfinite(extra_us) and extra_us > c["on_cpu_max_us"]:
        why = f"the extra {extra_us:.0f} us is longer than the longest stall it saw"
    elif np.isfinite(extra_us) and extra_us < c["threshold_us"]:
        why = f"the extra {extra_us:.0f} us is below the census's {c['threshold_us']:.0f} us threshold"
    elif np.isfinite(share):
        why = f"the timing thread was on its CPU for only {share:.0%} of the copy"
    else:
        why = "the table does not say whether the timing thread was on its CPU"
    return f"{why} ({_census_text(c)})"
