"""explain()'s ``host_crowded`` cause (h2dlab.explain.causes_crowded) on synthetic (made-up, not
measured) schema-4 tables with injected crowded copies among look-alikes that must not be
labelled; each threshold at its boundary; the evidence sentence word for word; and
synthetic rows built from the numbers of three copies of an H200 recording that the rule
was made for."""

import numpy as np
import pandas as pd
import pytest

from h2dlab.explain import causes_parallel, outliers
from h2dlab.explain.causes_crowded import (
    MAX_ON_CPU,
    MAX_WAIT_SHARE,
    MIN_AWAKE,
    MIN_BUSIEST_SHARE,
    MIN_COVER_SHARE,
    MIN_IN_CALL_SHARE,
    MIN_OTHERS_CPUS,
    MIN_WAIT_SHARE,
    crowded_cause,
)
from h2dlab.explain.causes_evidence import EXPLAINED_SHARE, evidence_cause, run_delay_inside, slow_text
from h2dlab.recording import datasets
from tests.explain.test_outliers_synthetic import (
    back_to_back_t_s,
    cause_scores,
    lookalike_counts,
    timed_columns,
)

#: Injected slow rows per kind in one synthetic run: the cause, and its look-alikes.
LOOKALIKES = ("asleep", "others_idle", "idle_busiest", "long_wait", "on_cpu", "after_call")
EVENTS = {"host_crowded": 6, **dict.fromkeys(LOOKALIKES, 6)}
V4 = ("others_cpu_ms", "others_window_ms", "busiest_cpu_ms", "busiest_thread", "n_threads")


def synthetic_crowded_run(seed: int, *, reps: int = 14, noise: float = 0.03):
    """A synthetic schema-4 run (made-up numbers), rows in random time order, built like
    ``tests/test_outliers_parallel.synthetic_v4_run``: ``pageable`` (synchronous, the
    call holds the copy, CPU 95 % of wall, other threads idle) and ``pinned_flat`` (a
    parallel host copy into pinned memory: the call holds 60 % of the time, the timing
    thread spins on its CPU throughout, never waits to run, other threads 6-12 CPUs' worth,
    the busiest on a CPU 40-85 % of the window). Injected slow rows (x1.6-x8, all
    ``pinned_flat``, the extra inside the call unless said): ``host_crowded`` (the thread
    waits to run 30-45 % of the extra, is asleep at most 4 % of wall and on its CPU the
    rest; others 1.2-14 CPUs' worth, the busiest 92-100 % of the window) and look-alikes
    that are not: ``asleep`` (the same wait, but asleep 30-60 % of the extra besides),
    ``others_idle`` (other threads under one CPU's worth), ``idle_busiest`` (the busiest
    on a CPU 30-85 % of the window), ``long_wait`` (the wait 55-90 % of the extra: must
    be ``host_preempted``), ``on_cpu`` (the wait at most 9 % of wall, never asleep:
    must be ``host_parallel``) and ``after_call`` (the extra after the call returned).
    Returns the table and the injected kind per row."""
    rng = np.random.default_rng([seed, 13])
    sizes = 2 ** np.arange(12, 30)
    strategy = np.repeat(("pageable", "pinned_flat"), len(sizes) * reps)
    size = np.tile(np.repeat(sizes, reps), 2)
    perm = rng.permutation(len(size))
    strategy, size = strategy[perm], size[perm]
    n = len(size)
    flat = strategy == "pinned_flat"
    ms = (0.010 + size / np.where(flat, 20e6, 12e6)) * np.exp(rng.normal(0, noise, n))
    wall = ms * 1.01 + 0.005
    issue = np.where(flat, 0.6, 1.0) * wall
    cpu = np.where(flat, 1.0, 0.95) * wall
    window = wall + 0.3
    rate = np.where(flat, rng.uniform(6, 12, n), rng.uniform(0, 0.3, n))
    busy = np.where(flat, rng.uniform(0.4, 0.85, n), rng.uniform(0, 0.3, n))
    wait, nivcsw, nvcsw = np.zeros(n), np.zeros(n), np.zeros(n)
    kind = np.full(n, "", dtype=object)
    take = iter(rng.permutation(np.flatnonzero(flat & (np.arange(n) > 0))))  # row 0: start-up
    for k, count in EVENTS.items():
        for _ in range(count):
            i = next(take)
            kind[i] = k
            extra = ms[i] * (rng.uniform(1.6, 8) - 1)
            ms[i] += extra
            wall[i] += extra
            window[i] += extra
            if k != "after_call":
                issue[i] += extra
            share = {"long_wait": rng.uniform(0.55, 0.9)}.get(k, rng.uniform(0.3, 0.45))
            wait[i] = rng.uniform(0, 0.09) * wall[i] if k == "on_cpu" else share * extra
            asleep = {"asleep": rng.uniform(0.3, 0.6) * extra, "on_cpu": 0.0}.get(
                k, rng.uniform(0, 0.04) * wall[i]
            )
            cpu[i] = wall[i] - wait[i] - asleep
            nivcsw[i], nvcsw[i] = rng.integers(1, 16), rng.integers(1, 4) if k == "asleep" else 0
            rate[i], busy[i] = rng.uniform(1.2, 14), rng.uniform(0.92, 1.0)
            if k == "others_idle":
                rate[i] = rng.uniform(0, 0.9)
                busy[i] = rate[i] * rng.uniform(0.5, 1)
            elif k == "idle_busiest":
                busy[i] = rng.uniform(0.3, 0.85)
    others = rate * window
    df = pd.DataFrame(
        {
            **timed_columns(
                f"synthetic-crowded-{seed}", strategy, size, back_to_back_t_s(wall, seed), wall, ms, 0.0
            ),
            "minflt": 0.0,
            "majflt": 0.0,
            "cpu_ms": cpu,
            "gc_count": 0.0,
            "gc_ms": 0.0,
            "sm_clock_mhz": 1980.0,
            "gpu_procs": 0.0,
            "run_delay_ms": wait,
            "nivcsw": nivcsw,
            "nvcsw": nvcsw,
            "cpu_moved": 0.0,
            "proc_cpu_ms": cpu + others,
            "proc_faults": 0.0,
            "issue_ms": issue,
            "others_cpu_ms": others,
            "others_window_ms": window,
            "busiest_cpu_ms": busy * window,
            "busiest_thread": "python3",
            "n_threads": 17.0,
        }  # fmt: skip
    )
    return datasets.validate(df), kind


@pytest.fixture(scope="module")
def runs():
    return [synthetic_crowded_run(seed) for seed in range(10)]


@pytest.fixture(scope="module")
def explained(runs):
    return [(outliers.explain(df), kind) for df, kind in runs]


def test_host_crowded_precision_recall_synthetic(explained):
    tp, fp, fn, precision, recall = cause_scores(explained, "host_crowded")
    assert tp >= 54, tp
    assert precision >= 0.9, (precision, tp, fp)
    assert recall >= 0.9, (recall, tp, fn)


@pytest.mark.parametrize("lookalike", LOOKALIKES)
def test_lookalikes_are_flagged_but_not_host_crowded_synthetic(explained, lookalike):
    injected, flagged, labelled = lookalike_counts(explained, lookalike, "host_crowded")
    assert injected == 60 and flagged >= 54, (injected, flagged)  # they are slow, and seen as slow
    assert labelled == 0


def test_lookalikes_keep_their_own_story_synthetic(explained):
    # A wait covering more than half the extra stays the scheduler's; a thread on its CPU
    # 91-100 % of wall stays host_parallel; a thread asleep is host_blocked where the
    # sleep (30-60 % of the extra) covers half of it. Every flagged one of the first two.
    blocked = 0
    for e, kind in explained:
        said, flagged = e["cause"].to_numpy(), e["is_outlier"].to_numpy()
        assert set(said[(kind == "long_wait") & flagged]) == {"host_preempted"}
        assert set(said[(kind == "on_cpu") & flagged]) == {"host_parallel"}
        assert set(kind[said == "host_blocked"]) <= {"asleep"}
        blocked += int((said == "host_blocked").sum())
    assert blocked >= 12, blocked


def test_schema3_table_never_host_crowded_synthetic(runs):
    # The same tables without schema 4's exact clocks (only the tick-lumped process clock).
    labelled = flagged = 0
    for df, kind in runs:
        e = outliers.explain(df.drop(columns=list(V4)))
        labelled += int((e["cause"] == "host_crowded").sum())
        flagged += int(e.loc[kind == "host_crowded", "is_outlier"].sum())
    assert flagged >= 54 and labelled == 0, (flagged, labelled)


def test_host_crowded_evidence_quotes_the_numbers_synthetic(explained):
    e, kind = explained[0]
    i = e.index[(e["cause"] == "host_crowded").to_numpy() & (kind == "host_crowded")][0]
    row, ev = e.loc[i], e.loc[i, "evidence"]
    extra = row["event_ms"] - row["expected_ms"]
    assert ev.startswith(slow_text(row, row["event_ms"]) + "; the time went inside the timed call")
    assert f"the timing thread waited {row['run_delay_ms']:.2f} ms to run " in ev
    assert f"({row['run_delay_ms'] / extra:.0%} of the extra {extra:.2f} ms; " in ev
    assert f"on its CPU {row['cpu_ms']:.2f} ms, {row['cpu_ms'] / row['wall_ms']:.0%} of wall" in ev
    assert f", {int(row['nivcsw'])} involuntary and 0 voluntary context switch(es); " in ev
    assert f"{row['others_cpu_ms'] / row['others_window_ms']:.1f} CPUs' worth, the busiest ('python3')" in ev
    assert ev.endswith("the table cannot say") and "torch.set_num_threads" in ev


# --- each threshold at its boundary (row and neighbours built by hand, made-up numbers) ---


def _case(**kw) -> tuple[pd.Series, pd.Series, float, float]:
    """A flagged copy right at the thresholds it can meet at once: 10 ms expected, 110 ms
    measured (extra 100), wall 110 ms of which 74 on the CPU (67 %) and 25 waiting to run
    (a quarter of the extra; awake 99 ms, 0.9 of wall), the call 50 ms longer than the
    usual 60 (half the extra), the others exactly 1 CPU's worth over a 120 ms window, the
    busiest on a CPU 108 ms of it (0.9). Keyword arguments replace fields of either
    (``wait``: the run-queue wait inside the copy; None: a column the table lacks)."""
    row = {
        "expected_ms": 10.0, "wall_ms": 110.0, "event_ms": 110.0, "cpu_ms": 74.0, "issue_ms": 110.0,
        "others_cpu_ms": 120.0, "others_window_ms": 120.0, "busiest_cpu_ms": 108.0,
        "busiest_thread": "python3", "nivcsw": 6.0, "nvcsw": 0.0, "size_bytes": 2**20,
    }  # fmt: skip
    ctx = {"issue_cell": 60.0, "issue_typ": np.nan, "cpu_typ": 1.0, "rd_typ": 0.0,
           "others_cell": 9.0, "busiest_cell": 0.8}  # fmt: skip
    wait = kw.pop("wait", 25.0)
    for k, v in kw.items():
        (row if k in row else ctx)[k] = v
    row = {k: v for k, v in row.items() if v is not None}
    return pd.Series(row), pd.Series(ctx), 110.0, wait


def _fires(**kw) -> bool:
    row, ctx, val, wait = _case(**kw)
    found = crowded_cause(row, ctx, val, slow_text(row, val), wait)
    assert found is None or found[0] == "host_crowded"
    return found is not None


def test_thresholds_are_the_documented_ones():
    assert (MIN_WAIT_SHARE, MAX_WAIT_SHARE, MIN_AWAKE, MIN_COVER_SHARE) == (0.25, 0.5, 0.9, 0.5)
    # Shared with host_parallel (and the scheduler rules' half), so the rules meet edge to edge.
    assert MAX_ON_CPU == causes_parallel.MIN_ON_CPU == 0.9
    assert MAX_WAIT_SHARE == causes_parallel.MAX_WAIT_SHARE == EXPLAINED_SHARE == MIN_COVER_SHARE
    assert (MIN_IN_CALL_SHARE, MIN_OTHERS_CPUS, MIN_BUSIEST_SHARE) == (0.5, 1.0, 0.9)
    assert MIN_OTHERS_CPUS == causes_parallel.MIN_OTHERS_CPUS
    assert MIN_BUSIEST_SHARE == causes_parallel.MIN_BUSIEST_SHARE


def test_at_every_boundary_it_fires():
    assert _fires()


def test_wait_to_run_lower_boundary():
    assert _fires(wait=25.0, cpu_ms=74.0) and not _fires(wait=24.99, cpu_ms=74.01)  # a quarter of 100
    # Beyond what its neighbours wait at this length: 0.1 % of 10 ms more, and it misses.
    assert not _fires(rd_typ=0.001) and _fires(wait=25.01, rd_typ=0.001)
    assert _fires(rd_typ=np.nan)  # neighbours' wait unknown: none assumed
    assert not _fires(wait=np.nan)  # unmeasured: no rule


def test_wait_to_run_upper_boundary():
    # Half the extra is the scheduler's story (host_preempted), whatever the neighbours wait.
    assert _fires(wait=49.99, cpu_ms=60.01) and not _fires(wait=50.0, cpu_ms=60.0)


def test_awake_boundary():
    assert _fires(cpu_ms=74.0) and not _fires(cpu_ms=73.99)  # CPU + wait 0.9 of wall 110


def test_on_cpu_boundary():
    # On its CPU 90 % of wall is host_parallel's: with 40 ms extra (a quarter: 10 ms).
    assert _fires(expected_ms=70.0, cpu_ms=98.99, wait=11.01)
    assert not _fires(expected_ms=70.0, cpu_ms=99.0, wait=11.0)


def test_cover_boundary():
    # Wait 25 + CPU 74 - usual CPU (share x 10 ms) must reach half the extra, 50.
    assert _fires(cpu_typ=4.9) and not _fires(cpu_typ=4.901)
    assert not _fires(cpu_typ=np.nan)  # the usual CPU time unknown: no rule


def test_time_in_the_call_boundary():
    assert _fires(issue_cell=60.0) and not _fires(issue_cell=60.01)  # 110 - 60 = half the extra
    assert _fires(issue_cell=np.nan, issue_typ=6.0) and not _fires(issue_cell=np.nan, issue_typ=6.001)
    assert _fires(issue_ms=np.nan) and _fires(issue_ms=None)  # no time of the call: the host's


def test_other_threads_cpus_worth_boundary():
    assert _fires(others_cpu_ms=120.0) and not _fires(others_cpu_ms=119.99)  # 1 CPU's worth


def test_busiest_thread_boundary():
    assert _fires(busiest_cpu_ms=108.0) and not _fires(busiest_cpu_ms=107.99)  # 0.9 of the window


def test_no_rule_on_clocks_that_contradict_each_other():
    """The busiest thread on a CPU longer than the window, or the timed call longer than the
    whole copy, are no measurement (a table may hold them: finite, not negative): no rule.
    It fired, saying 'on a CPU for 833333...% of the window' or 'then only -1000...00 ms
    waiting for the GPU'."""
    assert _fires(busiest_cpu_ms=120.0) and not _fires(busiest_cpu_ms=120.01)  # the whole window
    assert _fires(issue_ms=110.0) and not _fires(issue_ms=110.01)  # the whole wall time
    assert not _fires(busiest_cpu_ms=1e300) and not _fires(issue_ms=1e300)


def test_no_rule_without_exact_clocks_wall_or_extra():
    for missing in ("others_cpu_ms", "others_window_ms", "busiest_cpu_ms", "cpu_ms"):
        assert not _fires(**{missing: np.nan}) and not _fires(**{missing: None})
    assert not _fires(others_window_ms=0.0) and not _fires(wall_ms=0.0)
    row, ctx, _, wait = _case()
    assert crowded_cause(row, ctx, 10.0, "s", wait) is None  # no extra time


def test_evidence_sentence_word_for_word():
    row, ctx, val, wait = _case(issue_ms=105.0, issue_cell=50.0, wait=30.0, cpu_ms=75.0)
    found = crowded_cause(row, ctx, val, "SLOW", wait)
    assert found == (
        "host_crowded",
        "SLOW; the time went inside the timed call, which took 105.00 ms (copies of this size: 50.00 ms, "
        "median), then only 5.00 ms waiting for the GPU; the timing thread waited 30.00 ms to run (30% of "
        "the extra 100.00 ms; its neighbours: 0.00 ms at this length) and was on its CPU 75.00 ms, 68% of "
        "wall (copies like it: 100%, 10.00 ms at its expected time), so awake 95% of wall, 6 involuntary "
        "and 0 voluntary context switch(es); beside it the process's other threads ran 120.00 ms of CPU in "
        "the 120.00 ms window, 1.0 CPUs' worth, the busiest ('python3') on a CPU for 90% of the window "
        "(copies of this size: 9.0 CPUs' worth, the busiest 80%, median): consistent with PyTorch's "
        "intra-op worker threads, running a parallel host copy (pin_memory(), torch.cat, copy_ into pinned "
        "memory), taking the CPUs: the timing thread waited for a CPU, then on it for the workers at the "
        "parallel region's end; fewer intra-op threads (torch.set_num_threads below the number of CPUs) "
        "would leave it one. Consistent with, not proof: which tasks held the CPUs it waited for, the "
        "table cannot say",
    )


def test_evidence_leaves_out_what_the_table_lacks():
    row, ctx, val, wait = _case(nivcsw=None, busiest_thread=None, others_cell=np.nan, issue_ms=None)
    ev = crowded_cause(row, ctx, val, "SLOW", wait)[1]
    assert ev.startswith(
        "SLOW; the host clock ran 110.00 ms (the table has no time of the call to say more); "
    )
    assert "so awake 90% of wall; beside it" in ev
    assert "1.0 CPUs' worth, the busiest on a CPU for 90% of the window: consistent with" in ev


# --- three copies of an H200 recording, as synthetic rows built from their numbers ---

#: Copied from a fresh H200 recording's batch kind (plan 3 at 1d363dd, 2026-12-01, 16 CPUs,
#: torch.get_num_threads() 16; not bundled): run, order, the row's columns, and its
#: neighbours' medians. Each was ``unexplained``: its wait just short of half the extra
#: (host_preempted) and its CPU time far short of 90 % of wall (host_parallel).
H200_ROWS = {
    ("equal", 64): (
        {"expected_ms": 0.823, "wall_ms": 59.032, "event_ms": 58.923, "cpu_ms": 31.004,
         "run_delay_ms": 28.025, "issue_ms": 58.95, "others_cpu_ms": 847.342, "others_window_ms": 59.41,
         "busiest_cpu_ms": 58.865, "nivcsw": 8.0, "nvcsw": 0.0, "size_bytes": 2**20},
        {"issue_cell": 0.8476, "issue_typ": 0.8876, "cpu_typ": 1.0003, "others_cell": 11.412,
         "busiest_cell": 0.8641},
    ),
    ("mixed", 51): (
        {"expected_ms": 0.938, "wall_ms": 18.442, "event_ms": 18.362, "cpu_ms": 10.364,
         "run_delay_ms": 8.076, "issue_ms": 18.386, "others_cpu_ms": 264.296, "others_window_ms": 18.745,
         "busiest_cpu_ms": 18.263, "nivcsw": 3.0, "nvcsw": 0.0, "size_bytes": 2**20},
        {"issue_cell": 0.9579, "issue_typ": 0.9821, "cpu_typ": 1.0011, "others_cell": 9.6943,
         "busiest_cell": 0.6683},
    ),
    ("mixed", 306): (
        {"expected_ms": 2.828, "wall_ms": 118.939, "event_ms": 118.811, "cpu_ms": 62.886,
         "run_delay_ms": 56.049, "issue_ms": 118.833, "others_cpu_ms": 1717.22, "others_window_ms": 119.305,
         "busiest_cpu_ms": 118.529, "nivcsw": 15.0, "nvcsw": 0.0, "size_bytes": 16 * 2**20},
        {"issue_cell": 2.8529, "issue_typ": 0.972, "cpu_typ": 1.001, "others_cell": 12.0738,
         "busiest_cell": 0.8249},
    ),
}  # fmt: skip


def _h200(key) -> tuple[pd.Series, pd.Series]:
    """The synthetic row and neighbours for one of :data:`H200_ROWS`, with every other
    evidence column as the recording had it (no faults, GC, GPU process; SM clock at the
    run's median; neighbours neither wait to run nor sleep)."""
    cols, medians = H200_ROWS[key]
    row = pd.Series({**cols, "busiest_thread": "python3", "cpu_moved": 1.0, "minflt": 0.0, "majflt": 0.0,
                     "proc_faults": 0.0, "gc_count": 0.0, "gc_ms": 0.0, "gpu_procs": 0.0,
                     "sm_clock_mhz": 1980.0})  # fmt: skip
    ctx = pd.Series({**medians, "rd_typ": 0.0, "blocked_typ": 0.0, "faults": 0.0, "fault_typ": 0.0,
                     "cpu_share": cols["cpu_ms"] / cols["wall_ms"], "gc_typ": 0.0, "others_typ": 9.0,
                     "procs_med": 0.0, "clock_med": 1980.0})  # fmt: skip
    return row, ctx


@pytest.mark.parametrize("key", list(H200_ROWS))
def test_h200_crowded_copies_synthetic(key):
    row, ctx = _h200(key)
    val = row["event_ms"]
    found = evidence_cause(row, ctx, val, slow_text(row, val))
    assert found is not None and found[0] == "host_crowded", found
    wait = run_delay_inside(row["run_delay_ms"], row["wall_ms"], row["cpu_ms"])
    extra = val - row["expected_ms"]
    assert 0.46 <= wait / extra < MAX_WAIT_SHARE and row["cpu_ms"] / row["wall_ms"] < 0.57
    assert f"the timing thread waited {wait:.2f} ms to run ({wait / extra:.0%} of the extra" in found[1]
    # Waiting to run just over half the extra (on its CPU the rest): the scheduler's rule, first.
    longer = 0.51 * extra
    row["run_delay_ms"], row["cpu_ms"] = longer, row["wall_ms"] - longer
    assert evidence_cause(row, ctx, val, "s")[0] == "host_preempted"


def test_a_call_longer_than_the_copy_is_no_negative_wait_synthetic(runs):
    """The crowded copies with a wall time of 0 (a table may hold it) and their time in the
    call kept: explain's 'time in the call' check said 'then -0.07 ms waiting for the GPU'."""
    df, kind = runs[0]
    d = df.copy()
    d.loc[kind == "host_crowded", "wall_ms"] = 0.0
    e = outliers.explain(d)
    ev = e.loc[kind == "host_crowded", "evidence"]
    assert not ev.str.contains("then -").any() and not e["evidence"].str.contains("then -").any()
    said = ev[ev.str.contains("in the timed call")]
    assert (
        len(said) > 0
        and said.str.contains(
            r"of their time\), longer than the copy's 0\.00 ms wall time \(the two clocks disagree\)"
        ).all()
    )
