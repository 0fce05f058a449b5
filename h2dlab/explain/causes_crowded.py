"""The ``host_crowded`` rule: the timing thread was crowded off its CPU by the process's
own worker threads, then waited on its CPU for them.

A parallel host copy (``pin_memory()``'s copy, ``torch.cat`` into a pinned buffer,
``copy_`` into pinned memory) splits its work over PyTorch's OpenMP intra-op threads, by
default one per CPU. When they take every CPU, the thread that opened the parallel region
(the timing thread) can lose its own: it waits on a run queue, then, back on a CPU,
waits at the region's end for the slowest worker, spinning (OpenMP's default wait
policy). Neither part alone makes a rule: the run-queue wait covers less than the half of
the extra time ``host_preempted`` needs, and the thread was on its CPU for less than the
90 % ``host_parallel`` needs. Together they show this signature: the timed call held the
extra time, the thread was never asleep (on its CPU or waiting to run, nearly the whole
copy), its wait to run covered at least a quarter of the extra, and the process's other
threads ran at least a CPU's worth, the busiest of them on a CPU nearly the whole window.

Like ``host_parallel`` (``h2dlab.explain.causes_parallel``), only schema 4's exact clocks can show
the other threads' part; without those columns the rule never fires.
``causes_evidence.evidence_cause`` tries it right after ``host_parallel``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from h2dlab.explain.causes_parallel import (
    HOST_SIDE_NEEDS,
    MIN_BUSIEST_SHARE,
    MIN_IN_CALL_SHARE,
    MIN_ON_CPU,
    MIN_OTHERS_CPUS,
    host_side,
    waited_test,
)
from h2dlab.explain.registry import Cause
from h2dlab.explain.rows import number

__all__ = [
    "HOST_CROWDED",
    "MAX_ON_CPU",
    "MAX_WAIT_SHARE",
    "MIN_AWAKE",
    "MIN_BUSIEST_SHARE",
    "MIN_COVER_SHARE",
    "MIN_IN_CALL_SHARE",
    "MIN_OTHERS_CPUS",
    "MIN_WAIT_SHARE",
    "crowded_cause",
]

# MIN_IN_CALL_SHARE, MIN_OTHERS_CPUS and MIN_BUSIEST_SHARE are host_parallel's, for its
# reasons: the timed call held at least half the extra (host-side time, not the GPU's);
# at least one worker busy, on average, the whole copy; the busiest on a CPU through
# nearly the whole window, as a worker holding the parallel region open must be.

#: The timing thread was on its CPU for less than this share of wall (cpu_ms / wall_ms):
#: at or above it the copy is ``host_parallel``'s (its ``MIN_ON_CPU``), so the two rules
#: never claim the same copy, whichever is tried first.
MAX_ON_CPU = MIN_ON_CPU
#: The run-queue wait inside the copy stays below this share of the extra time: a wait
#: covering half the extra is the scheduler's story (``host_preempted``, the half of
#: ``causes_evidence.EXPLAINED_SHARE``); one that covers half but did not make
#: host_preempted (its neighbours wait as long) is left unexplained, as host_parallel does.
MAX_WAIT_SHARE = 0.5
#: The run-queue wait inside the copy, beyond what its neighbours wait at this length, is
#: at least this share of the extra time: half of the half the scheduler rules need, so
#: waiting for a CPU is a large part of the story, not a preemption or two beside a copy
#: that spun on its CPU (host_parallel's copies wait 0-0.04 ms; the H200 copies this rule
#: was built for waited 46-48 % of their extra, those host_preempted took 51 %).
MIN_WAIT_SHARE = 0.25
#: The thread was on its CPU or waiting to run for at least this share of wall
#: ((cpu_ms + wait) / wall_ms): never asleep for more than a tenth of the copy, the same
#: tenth as host_parallel's MIN_ON_CPU. A thread that slept lost time ``host_blocked``
#: accounts for, and a sleeping thread was not crowded off its CPU.
MIN_AWAKE = 0.9
#: The wait beyond its neighbours' plus the thread's CPU time beyond its usual (its
#: group's median CPU share at the expected time) cover at least this share of the extra:
#: the half every "covers the extra" test of the rules uses (``EXPLAINED_SHARE``).
MIN_COVER_SHARE = 0.5


def crowded_cause(
    row: pd.Series, ctx: pd.Series, val: float, slow: str, wait_ms: float
) -> tuple[str, str] | None:
    """``host_crowded`` with its evidence sentence for one flagged row, or None.

    It fires, on schema 4's exact clocks only, when the copy has extra time and: the timed
    call ran at least :data:`MIN_IN_CALL_SHARE` of the extra longer than its neighbours'
    (``causes_parallel.usual_issue``; where the table has no ``issue_ms`` the whole wall
    time is the host's); the timing thread was on its CPU for less than
    :data:`MAX_ON_CPU` of wall; its run-queue wait inside the copy (``wait_ms``) is below
    :data:`MAX_WAIT_SHARE` of the extra and, beyond its neighbours' (``ctx["rd_typ"]`` at
    the expected time), at least :data:`MIN_WAIT_SHARE` of it; CPU time plus that wait is
    at least :data:`MIN_AWAKE` of wall; the wait beyond its neighbours' plus the CPU time
    beyond its usual (``ctx["cpu_typ"]`` at the expected time) covers at least
    :data:`MIN_COVER_SHARE` of the extra; the other threads ran at least
    :data:`MIN_OTHERS_CPUS` CPUs' worth and the busiest was on a CPU for at least
    :data:`MIN_BUSIEST_SHARE` of the window (and at most all of it: one thread cannot run longer); a timed call longer than the whole copy makes no rule.

    Parameters
    ----------
    row, ctx, val, slow
        As a cause's test takes them (:data:`h2dlab.explain.registry.Test`): it reads the context's
        ``issue_cell``, ``issue_typ``, ``rd_typ``, ``cpu_typ``, ``others_cell``, ``busiest_cell``.
    wait_ms
        As ``causes_parallel.host_side`` takes it (NaN where unmeasured: no rule then).

    Returns
    -------
    tuple of str or None
        ``("host_crowded", evidence)``.
    """
    side = host_side(row, ctx, val, wait_ms, per_run=False)
    cpu_typ, rd_typ = number(ctx.get("cpu_typ")), number(ctx.get("rd_typ"))
    if side is None or not np.isfinite(cpu_typ):
        return None
    wall, cpu, exp, extra = side.wall, side.cpu, side.exp, side.extra
    on_cpu = cpu / wall
    rd_usual = rd_typ * exp if np.isfinite(rd_typ) else 0.0
    waited, cpu_usual = wait_ms - rd_usual, cpu_typ * exp
    if on_cpu >= MAX_ON_CPU or wait_ms >= MAX_WAIT_SHARE * extra or waited < MIN_WAIT_SHARE * extra:
        return None
    if cpu + wait_ms < MIN_AWAKE * wall or waited + cpu - cpu_usual < MIN_COVER_SHARE * extra:
        return None
    iv, v = number(row.get("nivcsw")), number(row.get("nvcsw"))
    switched = (
        f", {int(iv)} involuntary and {int(v)} voluntary context switch(es)" if np.isfinite(iv + v) else ""
    )
    return "host_crowded", (
        f"{slow}; {side.where}; the timing thread waited {wait_ms:.2f} ms to run ({wait_ms / extra:.0%} of the "
        f"extra {extra:.2f} ms; its neighbours: {rd_usual:.2f} ms at this length) and was on its CPU "
        f"{cpu:.2f} ms, {on_cpu:.0%} of wall (copies like it: {cpu_typ:.0%}, {cpu_usual:.2f} ms at its expected "
        f"time), so awake {(cpu + wait_ms) / wall:.0%} of wall{switched}; {side.workers}: consistent with "
        "PyTorch's intra-op worker threads, running a parallel host copy (pin_memory(), torch.cat, copy_ "
        "into pinned memory), taking the CPUs: the timing thread waited for a CPU, then on it for the "
        "workers at the parallel region's end; fewer intra-op threads (torch.set_num_threads below the "
        "number of CPUs) would leave it one. Consistent with, not proof: which tasks held the CPUs it "
        "waited for, the table cannot say"
    )


#: The cause's entry (``causes_evidence.PER_COPY``: right after ``host_parallel``).
HOST_CROWDED = Cause(
    "host_crowded",
    "PyTorch's worker threads took the CPUs: the timing thread waited to run, then on its CPU for them "
    "(a parallel CPU copy with as many workers as CPUs)",
    needs=HOST_SIDE_NEEDS,
    test=waited_test("host_crowded", crowded_cause),
)
