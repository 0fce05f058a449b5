"""A stall census: how often, and for how long, a thread that only spins on its clocks loses
time on this machine, with nothing else to do.

A copy of a few hundred microseconds can come out tens of microseconds slow with every
counter the kit reads clean: on its CPU the whole time, no wait to run, no context switch,
no page fault, no collection. On a virtual machine some time is taken from a running vCPU
where the guest cannot see it (a VM exit the host handles, an interrupt the guest's kernel
charges to whatever ran): the guest's clocks move on, and so does the thread's CPU clock.
A census measures that background once per run, in the run's own process, right after its
copies: a thread reads ``time.perf_counter_ns`` and its own CPU clock back to back for
:data:`CENSUS_S` seconds; every gap between two reads longer than :data:`STALL_US` is a
stall, *on its CPU* when the thread's CPU clock ran through at least :data:`ON_CPU_SHARE`
of it (else another task or the hypervisor, with steal accounted, had the CPU).

A probe on the lent H200 (VM build ``fc-v973``, 15 s of one pinned thread, the probe script
not the kit) counted 789 stalls of 20 us or more, about 53 a second: sizes from 20 to 99
us, median 28 us; the thread was on its CPU through about 60 % of them. The guest kernel
accounts paravirtual steal time (``CONFIG_PARAVIRT_TIME_ACCOUNTING=y``), so those on-CPU
stalls are not steal; one in three came in a 2 ms window with no interrupt counted on
that CPU (``/proc/interrupts``).

``Recording.finish`` stores :func:`census`'s dict in each CUDA run's env.json as
``stall_census``; ``causes_stall`` reads it. Standard library only.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable

__all__ = ["CENSUS_S", "CENSUS_VERSION", "ON_CPU_SHARE", "STALL_US", "census", "census_seconds"]

#: Seconds a census spins by default (``H2DLAB_CENSUS_S`` overrides; 0 turns it off).
CENSUS_S = 1.0
#: A gap between two clock reads longer than this (us) is a stall.
STALL_US = 20.0
#: A stall is on the thread's CPU when its CPU clock ran through at least this share of it.
ON_CPU_SHARE = 0.9
#: Bumped when what a census measures changes.
CENSUS_VERSION = 1


def census_seconds() -> float:
    """How long a run's census spins: ``H2DLAB_CENSUS_S`` if set to a number from 0 to 60,
    else :data:`CENSUS_S` (with a warning when it is set to anything else)."""
    raw = os.environ.get("H2DLAB_CENSUS_S", "").strip()
    if not raw:
        return CENSUS_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 60:  # NaN too
        warnings.warn(
            f"H2DLAB_CENSUS_S={raw!r} is not 0 (off) to 60 seconds: the stall census spins {CENSUS_S:g} s",
            stacklevel=2,
        )
        return CENSUS_S
    return value


def _quantile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile of sorted ``values`` (nearest rank), None for none."""
    if not values:
        return None
    return round(values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))], 3)


def census(
    seconds: float | None = None,
    *,
    threshold_us: float = STALL_US,
    clock_ns: Callable[[], int] = time.perf_counter_ns,
    cpu_ns: Callable[[], int] = time.thread_time_ns,
) -> dict[str, float | int | None]:
    """Spin ``seconds`` reading the host clock and the thread's CPU clock; count the stalls.

    Parameters
    ----------
    seconds
        How long to spin (default :func:`census_seconds`).
    threshold_us
        A gap between two host-clock reads longer than this is a stall.
    clock_ns, cpu_ns
        The host clock and the thread's CPU clock, in ns (tests pass fake ones).

    Raises
    ------
    ValueError
        ``seconds`` is not a number from 0 to 60, or ``threshold_us`` not one above 0.

    Returns
    -------
    dict
        JSON-ready: ``version``, ``seconds`` (spun), ``threshold_us``, ``reads`` and
        ``read_ns`` (the mean ns from one pair of reads to the next: the census's
        resolution), ``stalls`` and ``on_cpu`` (how many, and how many of them with the
        thread on its CPU), ``on_cpu_per_s``, and the on-CPU stalls' sizes in us:
        ``on_cpu_p50_us``, ``on_cpu_p90_us``, ``on_cpu_max_us`` (None when there were
        none); ``off_cpu_max_us`` likewise for the others.
    """
    seconds = census_seconds() if seconds is None else seconds
    for name, v, top in (("seconds", seconds, 60.0), ("threshold_us", threshold_us, 1e6)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= top:
            raise ValueError(f"census: {name} is {v!r}; give a number from 0 to {top:g}")
    if threshold_us <= 0:
        raise ValueError("census: threshold_us must be above 0")
    seconds = float(seconds)
    limit = int(threshold_us * 1e3)
    on: list[float] = []
    off: list[float] = []
    reads = 0
    start = prev = clock_ns()
    prev_cpu = cpu_ns()
    stop = start + int(seconds * 1e9)
    while prev < stop:
        now, now_cpu = clock_ns(), cpu_ns()
        reads += 1
        gap = now - prev
        if gap > limit:
            (on if now_cpu - prev_cpu >= ON_CPU_SHARE * gap else off).append(gap / 1e3)
        prev, prev_cpu = now, now_cpu
    spun = (prev - start) / 1e9
    on.sort()
    off.sort()
    return {
        "version": CENSUS_VERSION,
        "seconds": round(spun, 6),
        "threshold_us": threshold_us,
        "reads": reads,
        "read_ns": round((prev - start) / reads, 1) if reads else None,
        "stalls": len(on) + len(off),
        "on_cpu": len(on),
        "on_cpu_per_s": round(len(on) / spun, 3) if spun > 0 else None,
        "on_cpu_p50_us": _quantile(on, 0.5),
        "on_cpu_p90_us": _quantile(on, 0.9),
        "on_cpu_max_us": _quantile(on, 1.0),
        "off_cpu_max_us": _quantile(off, 1.0),
    }
