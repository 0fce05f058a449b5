"""explain()'s ``host_parallel`` cause (h2dlab.explain.causes_parallel) on synthetic (made-up, not
measured) schema-4 tables with injected host-parallel stretches among look-alikes that must
not be labelled; each threshold at its boundary; and the two copies of the bundled
h200_omp it labels."""

import numpy as np
import pandas as pd
import pytest

from h2dlab.explain import causes, outliers
from h2dlab.explain.causes_evidence import slow_text
from h2dlab.explain.causes_parallel import (
    AS_USUAL,
    LAGGED,
    MAX_WAIT_SHARE,
    MIN_BUSIEST_SHARE,
    MIN_IN_CALL_SHARE,
    MIN_ON_CPU,
    MIN_OTHERS_CPUS,
    busiest_share,
    parallel_cause,
    wait_baseline,
)
from h2dlab.recording import datasets
from tests.explain.test_outliers_synthetic import (
    back_to_back_t_s,
    cause_scores,
    lookalike_counts,
    timed_columns,
)

#: Injected slow rows per kind in one synthetic run: the cause, and its look-alikes.
LOOKALIKES = ("after_call", "off_cpu", "no_others", "idle_busiest")
EVENTS = {"host_parallel": 6, **dict.fromkeys(LOOKALIKES, 6)}
STRATEGIES = ("pageable", "pinned_flat")
V4 = ("others_cpu_ms", "others_window_ms", "busiest_cpu_ms", "busiest_thread", "n_threads")


def synthetic_v4_run(seed: int, *, reps: int = 8, noise: float = 0.03):
    """A synthetic schema-4 run (made-up numbers), rows in random time order.

    Two strategies: ``pageable`` (synchronous, host-bound: the call holds the whole copy,
    CPU 95 % of wall, other threads idle: 0-0.3 CPUs' worth) and ``pinned_flat`` (a
    parallel host copy into pinned memory, then an asynchronous copy: the call holds 60 %
    of the time, the timing thread spins on its CPU throughout, other threads run 6-12
    CPUs' worth, the busiest on a CPU for 40-85 % of the window). Injected slow rows
    (x1.6-x8): ``host_parallel`` (pinned_flat: all the extra inside the call, on the CPU,
    the others 1.2-14 CPUs' worth, the busiest 92-100 % of the window) and its
    look-alikes, none of which is host_parallel: ``after_call`` (pinned_flat, the extra
    after the call returned: the GPU's side), ``off_cpu`` (pinned_flat, the extra inside
    the call but the timing thread on its CPU for only 30-85 % of wall, asleep the rest),
    ``no_others`` (pageable: the extra inside the call, on the CPU, other threads under
    one CPU's worth) and ``idle_busiest`` (pinned_flat, the others busy, but the busiest
    on a CPU only 30-85 % of the window). Returns the table and the injected kind per row.
    """
    rng = np.random.default_rng(seed)
    sizes = 2 ** np.arange(12, 30)
    strategy = np.repeat(STRATEGIES, len(sizes) * reps)
    size = np.tile(np.repeat(sizes, reps), len(STRATEGIES))
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
    nvcsw = np.zeros(n)
    kind = np.full(n, "", dtype=object)
    take = iter(rng.permutation(np.arange(1, n)))  # row 0 would be context start-up
    for k, count in EVENTS.items():
        for _ in range(count):
            i = next(take)
            while (strategy[i] == "pageable") != (k == "no_others"):
                i = next(take)
            kind[i] = k
            extra = ms[i] * (rng.uniform(1.6, 8) - 1)
            ms[i] += extra
            wall[i] += extra
            window[i] += extra
            if k == "after_call":  # the GPU's side: the thread spins in the sync, on its CPU
                cpu[i] += extra
                busy[i] = rng.uniform(0.92, 1.0)
                rate[i] = rng.uniform(1.2, 14)
                continue
            issue[i] += extra
            if k == "host_parallel":
                cpu[i] += extra
                rate[i], busy[i] = rng.uniform(1.2, 14), rng.uniform(0.92, 1.0)
            elif k == "off_cpu":  # asleep part of the time: the scheduler's story, or none
                cpu[i] = wall[i] * rng.uniform(0.3, 0.85)
                nvcsw[i] = rng.integers(1, 4)
                rate[i], busy[i] = rng.uniform(1.2, 14), rng.uniform(0.92, 1.0)
            elif k == "no_others":
                cpu[i] += extra * 0.95
                rate[i], busy[i] = rng.uniform(0, 0.9), rng.uniform(0.92, 1.0)
            elif k == "idle_busiest":
                cpu[i] += extra
                rate[i], busy[i] = rng.uniform(1.2, 14), rng.uniform(0.3, 0.85)
    others = rate * window
    df = pd.DataFrame(
        {
            **timed_columns(
                f"synthetic-v4-{seed}", strategy, size, back_to_back_t_s(wall, seed), wall, ms, 0.0
            ),
            "minflt": 0.0,
            "majflt": 0.0,
            "cpu_ms": cpu,
            "gc_count": 0.0,
            "gc_ms": 0.0,
            "sm_clock_mhz": 1980.0,
            "gpu_procs": 0.0,
            "run_delay_ms": 0.0,
            "nivcsw": 0.0,
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
        }
    )
    return datasets.validate(df), kind


@pytest.fixture(scope="module")
def runs():
    return [synthetic_v4_run(seed) for seed in range(10)]


@pytest.fixture(scope="module")
def explained_v4(runs):
    return [(outliers.explain(df), kind) for df, kind in runs]


def test_host_parallel_precision_recall_synthetic(explained_v4):
    tp, fp, fn, precision, recall = cause_scores(explained_v4, "host_parallel")
    assert tp >= 50, tp
    assert precision >= 0.9, (precision, tp, fp)
    assert recall >= 0.9, (recall, tp, fn)


@pytest.mark.parametrize("lookalike", LOOKALIKES)
def test_lookalikes_are_flagged_but_not_host_parallel_synthetic(explained_v4, lookalike):
    injected, flagged, labelled = lookalike_counts(explained_v4, lookalike, "host_parallel")
    assert injected == 60 and flagged >= 54, (injected, flagged)  # they are slow, and seen as slow
    assert labelled == 0


def test_schema3_table_never_host_parallel_synthetic(runs):
    # The same tables without schema 4's exact clocks (only the tick-lumped process clock).
    labelled = flagged = 0
    for df, kind in runs:
        e = outliers.explain(df.drop(columns=list(V4)))
        labelled += int((e["cause"] == "host_parallel").sum())
        flagged += int(e.loc[kind == "host_parallel", "is_outlier"].sum())
    assert flagged >= 54 and labelled == 0, (flagged, labelled)


def test_host_parallel_evidence_quotes_the_numbers_synthetic(explained_v4):
    e, kind = explained_v4[0]
    i = e.index[(e["cause"] == "host_parallel").to_numpy() & (kind == "host_parallel")][0]
    row, ev = e.loc[i], e.loc[i, "evidence"]
    assert ev.startswith(slow_text(row, row["event_ms"]) + "; the time went inside the timed call")
    assert f"which took {row['issue_ms']:.2f} ms (copies of this size: " in ev
    assert f"{row['cpu_ms'] / row['wall_ms']:.0%} of wall with no wait to run, no context switch" in ev
    assert f"ran {row['others_cpu_ms']:.2f} ms of CPU in the {row['others_window_ms']:.2f} ms window" in ev
    assert f"{row['others_cpu_ms'] / row['others_window_ms']:.1f} CPUs' worth, the busiest ('python3')" in ev
    assert f"on a CPU for {row['busiest_cpu_ms'] / row['others_window_ms']:.0%} of the window" in ev
    assert (
        "consistent with a parallel CPU copy" in ev
        and "waiting at its end for its slowest worker" in ev
        and ev.endswith("the table cannot say")
    )


def test_lookalikes_get_their_own_story_synthetic(explained_v4):
    # The off-CPU look-alikes slept (voluntary switches, no wait to run): host_blocked where
    # the sleep covers half the extra; pageable copies whose idle other threads ran up to
    # 0.9 CPUs' worth can be other_threads (far above their usual 0-0.3); nothing else
    # injected has another cause's evidence.
    blocked = 0
    for e, kind in explained_v4:
        said = e["cause"].to_numpy()
        assert set(kind[said == "host_blocked"]) <= {"off_cpu"}
        assert set(kind[said == "other_threads"]) <= {"no_others"}
        assert set(said[kind == "host_parallel"]) <= {"host_parallel", ""}
        blocked += int((said == "host_blocked").sum())
    assert blocked >= 30


# --- each threshold at its boundary (row and neighbours built by hand, made-up numbers) ---


def _case(**kw) -> tuple[pd.Series, pd.Series, float, float]:
    """A flagged copy right at every threshold: 10 ms expected, 110 ms measured (extra 100),
    wall 110 ms of which 99 on the CPU (0.9), no run-queue wait, the call 50 ms longer than
    the usual 60 (half the extra), the others exactly 1 CPU's worth over a 120 ms window, the
    busiest on a CPU 108 ms of it (0.9). Keyword arguments replace fields of either."""
    row = {
        "expected_ms": 10.0, "wall_ms": 110.0, "event_ms": 110.0, "cpu_ms": 99.0, "issue_ms": 110.0,
        "others_cpu_ms": 120.0, "others_window_ms": 120.0, "busiest_cpu_ms": 108.0,
        "busiest_thread": "python3", "nivcsw": 0.0, "nvcsw": 0.0, "size_bytes": 2**20,
        "others_wait_ms": np.nan, "longest_wait_ms": np.nan,
    }  # fmt: skip
    ctx = {"issue_cell": 60.0, "issue_typ": np.nan, "others_cell": 9.0, "busiest_cell": 0.8}
    wait = kw.pop("wait", 0.0)
    for k, v in kw.items():
        (row if k in row else ctx)[k] = v
    return pd.Series(row), pd.Series(ctx), 110.0, wait


def _fires(**kw) -> bool:
    row, ctx, val, wait = _case(**kw)
    found = parallel_cause(row, ctx, val, slow_text(row, val), wait)
    assert found is None or found[0] == "host_parallel"
    return found is not None


def test_thresholds_are_the_documented_ones():
    assert (MIN_ON_CPU, MAX_WAIT_SHARE, MIN_IN_CALL_SHARE, MIN_OTHERS_CPUS, MIN_BUSIEST_SHARE) == (
        0.9, 0.5, 0.5, 1.0, 0.9,
    )  # fmt: skip


def test_at_every_boundary_it_fires():
    assert _fires()


def test_on_cpu_boundary():
    assert _fires(cpu_ms=99.0) and not _fires(cpu_ms=98.99)  # 0.9 of wall 110


def test_run_queue_wait_boundary():
    assert _fires(wait=49.99) and not _fires(wait=50.0)  # half the 100 ms extra
    assert not _fires(wait=np.nan)  # unmeasured: no rule


def test_time_in_the_call_boundary():
    assert _fires(issue_cell=60.0) and not _fires(issue_cell=60.01)  # 110 - 60 = half the extra
    # No median of this size: the group's usual share of its time in the call, at 10 ms.
    assert _fires(issue_cell=np.nan, issue_typ=6.0) and not _fires(issue_cell=np.nan, issue_typ=6.001)
    # No time of the call at all: the whole wall time is the host's.
    assert _fires(issue_ms=np.nan)


def test_other_threads_cpus_worth_boundary():
    assert _fires(others_cpu_ms=120.0) and not _fires(others_cpu_ms=119.99)  # 1 CPU's worth


def test_busiest_thread_boundary():
    assert _fires(busiest_cpu_ms=108.0) and not _fires(busiest_cpu_ms=107.99)  # 0.9 of the window


def test_no_rule_on_clocks_that_contradict_each_other():
    """As host_crowded (tests/explain/test_outliers_crowded.py): the busiest thread on a CPU longer
    than the window, or the timed call longer than the whole copy, make no rule (it said
    'on a CPU for 833333...% of the window', 'then only -1000...00 ms waiting for the GPU')."""
    assert _fires(busiest_cpu_ms=120.0) and not _fires(busiest_cpu_ms=120.01)
    assert _fires(issue_ms=110.0) and not _fires(issue_ms=110.01)
    assert not _fires(busiest_cpu_ms=1e300) and not _fires(issue_ms=1e300)


def test_no_rule_without_exact_clocks_or_extra():
    for missing in ("others_cpu_ms", "others_window_ms", "busiest_cpu_ms", "cpu_ms"):
        assert not _fires(**{missing: np.nan})
    assert not _fires(others_window_ms=0.0)
    row, ctx, _, wait = _case()
    assert parallel_cause(row, ctx, 10.0, "s", wait) is None  # no extra time


def test_busiest_share_reads_the_window():
    df = pd.DataFrame({"busiest_cpu_ms": [9.0, 1.0, 2.0], "others_window_ms": [10.0, 0.0, np.nan]})
    got = busiest_share(df)
    assert got[0] == pytest.approx(0.9) and got[1:].isna().all()
    assert busiest_share(pd.DataFrame({"wall_ms": [1.0]})).isna().all()
    # A table without the columns: NaN for each of its rows, under its own labels.
    got = busiest_share(pd.DataFrame({"wall_ms": [1.0, 2.0]}, index=[5, 9]))
    pd.testing.assert_series_equal(got, pd.Series([np.nan, np.nan], index=[5, 9]))


def test_neighbours_give_the_busiest_share_per_size():
    df, _ = synthetic_v4_run(0)
    ctx = causes.neighbours(df)
    share = df["busiest_cpu_ms"] / df["others_window_ms"]
    cell = share.groupby([df["strategy"], df["size_bytes"]]).transform("median")
    assert np.allclose(ctx["busiest_cell"], cell)


def test_h200_omp_two_staged_copies_are_host_parallel():
    # The bundled h200_omp (schema 4): the two flagged `staged` copies of run default-3,
    # 8 MiB and 16 MiB, their busiest worker on a CPU for 92 % and 96 % of the window.
    df = datasets.load("h200_omp")
    e = outliers.explain(df)
    hp = e[e["cause"] == "host_parallel"]
    names = df.attrs["run_names"]
    assert sorted(
        (names[r], s, b) for r, s, b in zip(hp.run_id, hp.strategy, hp.size_bytes, strict=True)
    ) == [
        ("default-3", "staged", 8 * 2**20),
        ("default-3", "staged", 16 * 2**20),
    ]
    busy = hp["busiest_cpu_ms"] / hp["others_window_ms"]
    assert (busy >= MIN_BUSIEST_SHARE).all() and (hp["cpu_ms"] >= MIN_ON_CPU * hp["wall_ms"]).all()


# --- the evidence sentence, word for word (row and neighbours built by hand, made-up numbers) ---

#: Its fixed end, after the numbers.
CONSISTENT = (
    ", consistent with a parallel "
    "CPU copy (pin_memory(), torch.cat, copy_ into pinned memory) waiting at its end for its slowest "
    "worker, spinning on its CPU; whether one worker lagged (descheduled by the VM's host, say) or all "
    "ran slow, the table cannot say"
)
#: Busy workers are no reason (spinning workers look busy through any long copy): without a
#: worker's wait that ordinary copies' workers do not show, the sentence places the time only.
TAIL = (
    "; these columns place the extra time in host CPU work inside the call, with the timing thread "
    "running, not why that work ran long" + CONSISTENT
)


def _said(**kw) -> str:
    """The evidence for ``_case(**kw)``, its start given as "SLOW"; fails where the rule does not fire."""
    row, ctx, val, wait = _case(**kw)
    for k in [k for k, v in kw.items() if v is None]:
        del row[k]  # a column the table lacks
    found = parallel_cause(row, ctx, val, "SLOW", wait)
    assert found is not None and found[0] == "host_parallel"
    return found[1]


def test_evidence_sentence_word_for_word():
    # The call 105 ms of the 110 (5 ms left for the GPU), 55 ms longer than the usual 50.
    assert _said(issue_ms=105.0, issue_cell=50.0) == (
        "SLOW; the time went inside the timed call, which took 105.00 ms (copies of this size: 50.00 ms, "
        "median), then only 5.00 ms waiting for the GPU; the timing thread was on its CPU for 90% of wall "
        "with no wait to run, no context switch; beside it the process's other threads ran 120.00 ms of CPU "
        "in the 120.00 ms window, 1.0 CPUs' worth, the busiest ('python3') on a CPU for 90% of the window "
        "(copies of this size: 9.0 CPUs' worth, the busiest 80%, median)" + TAIL
    )


def test_evidence_names_where_the_usual_time_in_the_call_came_from():
    # No median of this size: the group's usual share (50 %) at the expected 10 ms.
    assert _said(issue_cell=np.nan, issue_typ=0.5).startswith(
        "SLOW; the time went inside the timed call, which took 110.00 ms (its neighbours spend 50% of "
        "their time in the call: 5.00 ms at its expected time), then only 0.00 ms waiting for the GPU; "
    )
    # No time of the call, or no usual time to compare it with: the host clock only.
    host = "SLOW; the host clock ran 110.00 ms (the table has no time of the call to say more); the timing"
    assert _said(issue_ms=np.nan).startswith(host)
    assert _said(issue_ms=None).startswith(host)
    assert _said(issue_cell=np.nan, issue_typ=np.nan).startswith(host)


def test_evidence_counts_the_wait_and_both_kinds_of_switch():
    assert "90% of wall with 2.50 ms waiting to run, 3 context switch(es); beside" in _said(
        wait=2.5, nivcsw=1.0, nvcsw=2.0
    )
    assert "with no wait to run, 1 context switch(es); beside" in _said(nivcsw=1.0)
    assert "with no wait to run, 2 context switch(es); beside" in _said(nvcsw=2.0)
    assert "with no wait to run, 2 context switch(es); beside" in _said(nivcsw=1.0, nvcsw=1.0)
    # Either count unknown: nothing said of switches.
    for kw in ({"nivcsw": np.nan}, {"nvcsw": np.nan}, {"nivcsw": None, "nvcsw": None}):
        assert "with no wait to run; beside" in _said(**kw), kw


def test_evidence_names_the_busiest_thread_only_when_known():
    for kw in ({"busiest_thread": ""}, {"busiest_thread": None}):
        assert "1.0 CPUs' worth, the busiest on a CPU for 90% of the window (copies" in _said(**kw), kw


def test_evidence_compares_the_workers_with_its_size_or_its_strategy():
    # Both of the same size's medians unknown, or either, and no group medians: no comparison.
    for kw in ({"others_cell": np.nan}, {"busiest_cell": np.nan}):
        assert _said(**kw).endswith("the busiest ('python3') on a CPU for 90% of the window" + TAIL), kw
    assert _said(others_cell=1.0, busiest_cell=0.9).endswith(
        " (copies of this size: 1.0 CPUs' worth, the busiest 90%, median)" + TAIL
    )
    # One copy a size (the forum's protocol): the strategy's medians in the run.
    group = {"others_cell": np.nan, "busiest_cell": np.nan, "others_typ": 1.0, "busiest_typ": 0.92}
    assert _said(**group).endswith(
        " (its strategy's copies in the run: 1.0 CPUs' worth, the busiest 92%, median)" + TAIL
    )
    # Workers far busier or idler than usual give no reason either: the same end.
    for cell in (0.2, 9.0):
        assert _said(others_cell=cell, busiest_cell=0.5).endswith("median)" + TAIL)


def test_no_rule_without_wall_time():
    assert not _fires(wall_ms=0.0)


def test_a_worker_that_waited_to_run_for_half_the_extra_is_named():
    """Schema 5: one other thread waited to run for at least half the extra 100 ms, longer than
    the waits of every one of its strategy's copies that were not slow (``wait_usual``)."""
    lagged = (
        "; the longest wait of one of them to run, ending in the window, 50.00 ms (75.00 ms all of them; "
        "the longest such wait in its strategy's copies that were not slow: 2.00 ms), 50% of the extra 100.00 "
        "ms: consistent with a worker that lost its CPU holding the parallel copy open (pin_memory(), "
        "torch.cat and copy_ into pinned memory wait at their end for their slowest worker)"
    )
    said = _said(longest_wait_ms=50.0, others_wait_ms=75.0, wait_usual=2.0)
    assert said.endswith(lagged) and AS_USUAL not in said and LAGGED in said
    # Under half the extra, or no longer than ordinary copies' waits: said, but no reason.
    for kw in ({"longest_wait_ms": 49.9}, {"wait_usual": 50.0}):
        short = _said(**{"longest_wait_ms": 50.0, "others_wait_ms": 75.0, "wait_usual": 2.0, **kw})
        assert LAGGED not in short and short.endswith(TAIL), kw
        assert (
            f"the longest wait of one of them to run, ending in the window, {kw.get('longest_wait_ms', 50.0):.2f} ms"
            in short
        )
    # No baseline (no calm copy recorded it): never a reason.
    assert LAGGED not in _said(longest_wait_ms=90.0, others_wait_ms=90.0)
    # Not recorded (tables before schema 5): no words about waits.
    assert _said() == _said(longest_wait_ms=np.nan, others_wait_ms=np.nan)
    assert "wait of one of them" not in _said()


def test_wait_baseline_is_the_longest_wait_of_the_calm_copies():
    df = pd.DataFrame(
        {
            "strategy": ["a"] * 101 + ["b"] * 2,
            "longest_wait_ms": [*range(100), 1000.0, 5.0, np.nan],
            "is_outlier": [False] * 100 + [True] + [False, False],
        }
    )
    timed = pd.Series(True, index=df.index)
    got = wait_baseline(df, [df["strategy"]], timed)
    assert got.iloc[0] == 99.0  # the flagged copy's 1000 ms left out
    assert got.iloc[101] == got.iloc[102] == 5.0
    assert wait_baseline(df.drop(columns="longest_wait_ms"), [df["strategy"]], timed).isna().all()
