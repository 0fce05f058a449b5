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

import warnings
from collections.abc import Mapping

import numpy as np
import pandas as pd

from h2dlab.escape import terminal_text
from h2dlab.explain.registry import Cause, said
from h2dlab.explain.rows import number

__all__ = [
    "HOST_STALL",
    "ON_CPU_COPY_SHARE",
    "MIN_CENSUS_S",
    "census_of",
    "census_problem",
    "censuses_by_run",
    "expected_hits",
    "run_copy_seconds",
    "run_censuses",
    "stall_cause",
    "stall_check",
]

#: The timing thread's CPU time over the copy's wall time must be at least this.
ON_CPU_COPY_SHARE = 0.9
#: A census shorter than this (s) says too little to name or rule out a stall.
MIN_CENSUS_S = 0.25
_COUNTS = ("on_cpu", "reads")
_NUMBERS = ("seconds", "threshold_us", "on_cpu_per_s", "on_cpu_p50_us", "on_cpu_max_us")


def _number(v: object) -> float | None:
    """``v`` as a finite float >= 0, or None (bools, text, NaN, infinities, huge ints)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if np.isfinite(f) and f >= 0 else None


def census_problem(c: object) -> str | None:
    """Why ``c`` is not a stall census :func:`stall_cause` can read (a few words), or None.

    A census holds whole counts ``on_cpu`` and ``reads``, and ``seconds``,
    ``threshold_us`` (> 0) and, where it counted on-CPU stalls, ``on_cpu_per_s`` (their
    count over its seconds, within 1 %), ``on_cpu_max_us`` (at least the threshold) and
    ``on_cpu_p50_us`` (between the two) as finite numbers; it spun at least
    :data:`MIN_CENSUS_S`, and its stalls fit in it (count times threshold at most its time).
    """
    if not isinstance(c, Mapping):
        return f"a {type(c).__name__}, not a mapping"
    for k in _COUNTS:
        v = c.get(k)
        if _number(v) is None or float(v) != int(float(v)):
            return f"{k} is {v!r}, not a whole count"
    n = {k: _number(c.get(k)) for k in _NUMBERS}
    if n["seconds"] is None or n["threshold_us"] is None or n["threshold_us"] == 0:
        return f"seconds {c.get('seconds')!r} and threshold_us {c.get('threshold_us')!r} must be numbers > 0"
    if n["seconds"] < MIN_CENSUS_S:
        return f"it spun {n['seconds']:g} s, under the {MIN_CENSUS_S:g} s a census needs"
    on = int(c["on_cpu"])
    if on * n["threshold_us"] > n["seconds"] * 1e6:
        return f"{on} stalls of {n['threshold_us']:g} us or more do not fit in {n['seconds']:g} s"
    if on:
        if n["on_cpu_per_s"] is None or abs(n["on_cpu_per_s"] * n["seconds"] - on) > max(1.0, 0.01 * on):
            return f"on_cpu_per_s {c.get('on_cpu_per_s')!r} is not its {on} stalls over {n['seconds']:g} s"
        top, mid = n["on_cpu_max_us"], n["on_cpu_p50_us"]
        bad_mid = c.get("on_cpu_p50_us") is not None and (
            mid is None or top is None or not n["threshold_us"] <= mid <= top
        )
        if top is None or top < n["threshold_us"] or bad_mid:
            return f"on_cpu_max_us {c.get('on_cpu_max_us')!r} and on_cpu_p50_us {c.get('on_cpu_p50_us')!r} do not fit"
    return None


def census_of(env: object) -> dict | None:
    """A run's stall census from its env.json (``env['stall_census']``), or None where it
    has none or it is not one (:func:`census_problem`); its numbers as floats, its counts
    as ints."""
    c = env.get("stall_census") if isinstance(env, Mapping) else None
    if c is None or census_problem(c) is not None:
        return None
    out = dict(c)
    out.update({k: int(float(c[k])) for k in _COUNTS})
    out.update({k: _number(c.get(k)) for k in _NUMBERS})
    return out


def censuses_by_run(df: pd.DataFrame) -> dict:
    """run_id -> its run's census (``census_of`` its env: ``df.attrs['envs']`` by run_id,
    else the table's one ``attrs['env']`` for a table of one run), None where none; what
    ``outliers.explain`` used where it left them in ``attrs['stall_censuses']``. A run whose
    env.json holds a ``stall_census`` that is not one is warned of (and read as none)."""
    if isinstance(df.attrs.get("stall_censuses"), Mapping):
        return dict(df.attrs["stall_censuses"])
    envs = df.attrs.get("envs")
    if not isinstance(envs, Mapping):
        one = df.attrs.get("env")
        runs = df["run_id"].unique() if "run_id" in df.columns else []
        envs = {runs[0]: one} if len(runs) == 1 and isinstance(one, Mapping) else {}
    out = {}
    for run, env in envs.items():
        raw = env.get("stall_census") if isinstance(env, Mapping) else None
        why = None if raw is None else census_problem(raw)
        if why:
            warnings.warn(
                terminal_text(
                    f"run {run}: its env.json's stall_census is no census ({why}): host_stall is off for it"
                ),
                stacklevel=2,
            )
        out[run] = census_of(env)
    return out


def run_censuses(df: pd.DataFrame, by_run: Mapping | None = None) -> pd.Series:
    """Per row, its run's census: from ``by_run`` (run_id -> census or None, as
    :func:`censuses_by_run` gives) where given, else from ``df``'s attrs; None where none.
    Raises ``TypeError`` for a ``by_run`` that is not a mapping or holds a value that is
    not one, ``ValueError`` for a mapping that is no census (:func:`census_problem`)."""
    if by_run is None:
        by_run = censuses_by_run(df)
    if not isinstance(by_run, Mapping):
        raise TypeError(f"censuses must be a mapping run_id -> stall census, not {type(by_run).__name__}")
    for run, c in by_run.items():
        why = None if c is None else census_problem(c)
        if why:
            raise (TypeError if not isinstance(c, Mapping) else ValueError)(
                f"censuses[{run!r}] is no stall census: {why}"
            )
    found = {run: census_of({"stall_census": c}) for run, c in by_run.items()}
    return pd.Series([found.get(r) for r in df["run_id"]], index=df.index, dtype=object)


def run_copy_seconds(df: pd.DataFrame, timed: pd.Series) -> pd.Series:
    """Per row, the seconds its run's timed copies took in all, each copy once: a duplex
    copy's two rows (one per direction, each its own ``order``) share one start time
    ``t_s`` and one wall time (rows without a start time are a copy each)."""
    wall = df["wall_ms"].astype(float).where(timed)
    t_s = df["t_s"] if "t_s" in df.columns else pd.Series(np.nan, index=df.index)
    copy = t_s.astype(float).where(t_s.notna(), -1.0 - df["order"].astype(float))  # one key per copy
    keys = pd.concat([df["run_id"], copy.rename("copy")], axis=1)
    per_copy = wall.groupby([keys["run_id"], keys["copy"]], sort=False).transform("max")
    return per_copy.where(~keys.duplicated()).groupby(df["run_id"], sort=False).transform("sum") / 1e3


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
        f"its stall census ({c['seconds']:.2g} s of a thread spinning right after the copies) counted {int(c['on_cpu'])} stall{'' if c['on_cpu'] == 1 else 's'} of {c['threshold_us']:.0f} us or more with the "
        f"thread on its CPU through them ({rate:.0f} a second{median}, the longest {c['on_cpu_max_us']:.0f} us)"
    )


def _extra_us(row: pd.Series, val: float) -> float:
    """The copy's time over its expected time, in us (NaN where either is unknown)."""
    return (val - number(row["expected_ms"])) * 1e3


def stall_cause(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> tuple[str, str] | None:
    """``host_stall`` with its evidence sentence for one flagged row, or None.

    Parameters
    ----------
    row, ctx, val, slow
        As a cause's test takes them (:data:`h2dlab.explain.registry.Test`): it reads the context's
        ``census`` (the run's, or None), ``cpu_share`` (cpu_ms / wall_ms) and ``run_wall_s``.
    """
    c = ctx.get("census")
    if not isinstance(c, Mapping) or not c.get("on_cpu"):
        return None
    extra_us = _extra_us(row, val)
    share = number(ctx.get("cpu_share"))
    longest = c["on_cpu_max_us"]
    if not (np.isfinite(extra_us) and c["threshold_us"] <= extra_us <= longest):
        return None
    if not (np.isfinite(share) and share >= ON_CPU_COPY_SHARE):
        return None
    hits = expected_hits(c, number(ctx.get("run_wall_s")))
    weigh = (
        f"; at that rate about {hits:.1f} such stalls fall within the time the run spent copying"
        if np.isfinite(hits)
        else ""
    )
    on_cpu = "all" if share >= 1 else f"{share:.0%}"
    return "host_stall", (
        f"{slow}; the extra {extra_us:.0f} us is within the sizes of the stalls a thread of this run's process "
        f"met spinning on its clocks: {_census_text(c)}; the timing thread was on its CPU for {on_cpu} of the "
        f"copy, as through such a stall, consistent with time taken from a running vCPU where the guest cannot "
        f"see it (a VM exit, an interrupt its kernel charges to the thread), which no counter here shows{weigh}; "
        f"likely, not certain: only the size of the extra points to it"
    )


def stall_check(row: pd.Series, ctx: pd.Series, val: float) -> str | None:
    """What the run's stall census rules out for an ``unexplained`` copy, or None where the
    run has no census (``causes_evidence.ruled_out``'s ``stall census`` check)."""
    c = ctx.get("census")
    if not isinstance(c, Mapping):
        return None
    if not c.get("on_cpu"):
        return (
            f"this run's stall census ({c['seconds']:.2g} s spinning) counted no stall of "
            f"{c['threshold_us']:.0f} us or more with the thread on its CPU"
        )
    extra_us = _extra_us(row, val)
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


#: The cause's entry (``causes.LIKELY``: after ``gpu_wake``).
HOST_STALL = Cause(
    "host_stall",
    "a copy a few tens of microseconds slow, on its CPU with every counter clean, its extra within the stalls "
    "a thread spinning in its run's process met (the run's stall census): time taken from a running vCPU "
    "where the guest cannot see it; only with a census (likely, not certain: only the extra's size points to it)",
    needs=("cpu_ms",),
    test=said("host_stall", stall_cause),
)
