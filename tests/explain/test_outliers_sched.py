"""explain()'s schema-3 causes on synthetic (made-up, not measured) tables with events
injected at known rows: a preempted timing thread (run-queue wait), a thread that slept
(voluntary switches, off the CPU without waiting to run), page faults in worker threads
(proc_faults), GC, and slow copies whose evidence only comes close. Also property tests
of the run-queue rule itself, and what an unexplained schema-3 copy rules out."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.explain import causes, outliers
from h2dlab.explain.causes_evidence import MIN_OTHERS_RATIO, evidence_cause, run_delay_inside, slow_text
from h2dlab.recording import datasets
from tests.explain.test_outliers_synthetic import back_to_back_t_s, cause_scores, timed_columns

SCHED_CAUSES = ("host_preempted", "host_blocked", "page_faults", "gc_pause", "other_threads")
#: Injected slow rows per kind in one synthetic run; "none" are near misses.
EVENTS = {**dict.fromkeys(SCHED_CAUSES, 6), "none": 6}
STRATEGIES = ("pageable", "pinned", "workers")

#: Real tables of the plan-2 recording (schema 3), kept as test data when data/h200 was re-recorded.
PLAN2 = Path(__file__).resolve().parents[1] / "data" / "h200-plan2"


def synthetic_v3_run(seed: int, *, reps: int = 8, noise: float = 0.03):
    """A synthetic schema-3 run (made-up numbers), rows in random time order.

    Three strategies: ``pageable`` (synchronous, host-bound: the call holds the whole
    copy, CPU ~95 % of wall), ``pinned`` (asynchronous: the call returns after ~5 % of the
    time, then the thread spins in the sync, so CPU ~100 % of wall) and ``workers`` (the
    timing thread sleeps ~70 % of the time while worker threads copy: 1-3 voluntary
    switches). Normal rows wait to run for 0-2 % of their wall time. Injected slow rows
    (x1.6-x8): ``host_preempted`` (80-100 % of the extra time waiting to run, inside the
    call), ``host_blocked`` (80-100 % of it asleep, 1-3 more voluntary switches),
    ``page_faults`` (worker threads' faults: in proc_faults, not in minflt), ``gc_pause``
    (on the timing thread's CPU time, 80-100 % of the extra in gc_ms), ``other_threads``
    (pageable and pinned rows only: the process's other threads use 1-12x the extra time
    in CPU while the timing thread stays on its CPU) and ``none`` (a
    run-queue wait, a sleep and, on half of them, a collection of up to 30 % of the extra
    each, up to 5 extra faults, other threads' CPU of up to 15 % of the extra; on pinned rows a run-queue wait as long as the extra but *after* the
    call returned, where it cannot stretch the GPU's timing). Decoys: long run-queue
    waits after the call on pinned rows that are not slow. Copies run back to back, each
    0.3-1.8 ms after the previous one ended (``back_to_back_t_s``). Returns the table and
    the injected kind per row."""
    rng = np.random.default_rng(seed)
    sizes = 2 ** np.arange(12, 30)
    strategy = np.repeat(STRATEGIES, len(sizes) * reps)
    size = np.tile(np.repeat(sizes, reps), len(STRATEGIES))
    perm = rng.permutation(len(size))
    strategy, size = strategy[perm], size[perm]
    n = len(size)
    ms = (0.010 + size / np.where(strategy == "pinned", 50e6, 12e6)) * np.exp(rng.normal(0, noise, n))
    cpu_share = np.select([strategy == "pageable", strategy == "pinned"], [0.95, 1.0], 0.3)
    issue_share = np.where(strategy == "pinned", 0.05, 1.0)
    wall = ms * 1.01 + 0.005
    rd = wall * rng.uniform(0, 0.02, n) * (rng.random(n) < 0.3)
    cpu = cpu_share * wall - rd * (cpu_share == 1.0)
    asleep = np.maximum(wall - cpu - rd, 0)
    issue = np.minimum(issue_share * wall, wall)
    nvcsw = np.where(strategy == "workers", rng.integers(1, 4, n), 0).astype(float)
    nivcsw = (rd > 0).astype(float)
    minflt = rng.poisson(2, n).astype(float)
    proc_faults = minflt + rng.poisson(1, n)  # other threads rarely fault
    gc, gc_ms = np.zeros(n), np.zeros(n)
    others_extra = np.zeros(n)
    kind = np.full(n, "", dtype=object)
    take = iter(rng.permutation(np.arange(1, n)))  # row 0 would be context start-up
    for k, count in EVENTS.items():
        for _ in range(count):
            i = next(take)
            while k == "other_threads" and strategy[i] == "workers":  # there the thread sleeps
                i = next(take)
            kind[i] = k
            extra = ms[i] * (rng.uniform(1.6, 8) - 1)
            ms[i] += extra
            wall[i] += extra
            inside = strategy[i] != "pinned"  # pinned: the extra must lie in the call to show in events
            if k == "host_preempted":
                rd[i] += extra * rng.uniform(0.8, 1.0)
                nivcsw[i] += rng.integers(1, 6)
                issue[i] += extra
            elif k == "host_blocked":
                nvcsw[i] += rng.integers(1, 4)
                issue[i] += extra
            elif k == "page_faults":
                proc_faults[i] += np.ceil(max(size[i] / 4096, 1) * rng.uniform(0.1, 1.0)) + 8
                cpu[i] += extra * cpu_share[i]
                issue[i] += extra
            elif k == "gc_pause":  # the collector runs on the timing thread: CPU time
                gc[i] = rng.integers(1, 4)
                gc_ms[i] = extra * rng.uniform(0.8, 1.0)
                cpu[i] += extra
                issue[i] += extra
            elif k == "other_threads":
                others_extra[i] = extra * rng.uniform(1.0, 12.0)
                cpu[i] += extra * cpu_share[i]
                issue[i] += extra
            elif k == "none":
                part_rd, part_sleep = extra * rng.uniform(0, 0.3, 2)
                if not inside and rng.random() < 0.5:  # waited to run, but after the call returned
                    part_rd = extra * rng.uniform(0.8, 1.5)
                    wall[i] += part_rd
                else:
                    issue[i] += extra
                rd[i] += part_rd
                nivcsw[i] += part_rd > 0
                nvcsw[i] += part_sleep > 0
                cpu[i] = max(wall[i] - rd[i] - asleep[i] - part_sleep, 0)
                proc_faults[i] += rng.integers(0, 6)
                others_extra[i] = extra * rng.uniform(0, 0.15)
                if rng.random() < 0.5:  # a short collection: far from the extra time
                    gc[i], gc_ms[i] = 1, extra * rng.uniform(0, 0.3)
            if k in ("host_preempted", "host_blocked"):
                cpu[i] = max(wall[i] - rd[i] - asleep[i] - (extra if k == "host_blocked" else 0), 0)
    quiet = np.flatnonzero((kind == "") & (strategy == "pinned"))
    for i in rng.choice(quiet, 6, replace=False):  # decoys: long waits after the call, not slow
        rd[i] += 3 * wall[i]
        wall[i] += 3 * wall[i]
        nivcsw[i] += 2
    df = pd.DataFrame(
        {
            **timed_columns(
                f"synthetic-v3-{seed}", strategy, size, back_to_back_t_s(wall, seed), wall, ms, 0.0
            ),
            "minflt": minflt,
            "majflt": 0.0,
            "cpu_ms": cpu,
            "gc_count": gc,
            "gc_ms": gc_ms,
            "sm_clock_mhz": 1980.0,
            "gpu_procs": 0.0,
            "run_delay_ms": rd,
            "nivcsw": nivcsw,
            "nvcsw": nvcsw,
            "cpu_moved": (nivcsw + nvcsw > 0) * (rng.random(n) < 0.3),
            "proc_cpu_ms": cpu + (strategy == "workers") * wall * 0.8 + others_extra,
            "proc_faults": proc_faults,
            "issue_ms": issue,
        }
    )
    return datasets.validate(df), kind


@pytest.fixture(scope="module")
def explained_v3():
    return [(outliers.explain(df), kind) for df, kind in (synthetic_v3_run(seed) for seed in range(10))]


@pytest.mark.parametrize("cause", SCHED_CAUSES)
def test_schema3_cause_precision_recall_synthetic(explained_v3, cause):
    tp, fp, fn, precision, recall = cause_scores(explained_v3, cause)
    assert tp >= 50, (cause, tp)
    assert precision >= 0.9, (cause, precision, tp, fp)
    assert recall >= 0.9, (cause, recall, tp, fn)


def _as_v4(df: pd.DataFrame) -> pd.DataFrame:
    """The synthetic run as schema 4 would record it: the other threads' CPU exact (here the
    same numbers as proc_cpu_ms - cpu_ms), the busiest named "worker-3" and running 80 %
    of it; proc_cpu_ms scrambled, so a rule reading it instead would go wrong."""
    others = (df["proc_cpu_ms"] - df["cpu_ms"]).clip(lower=0)
    out = df.assign(
        others_cpu_ms=others,
        others_window_ms=df["wall_ms"] + 0.05,
        busiest_cpu_ms=0.8 * others,
        busiest_thread="worker-3",
        n_threads=20.0,
    )
    out["proc_cpu_ms"] = out["cpu_ms"] + np.random.default_rng(0).permutation(others.to_numpy())
    return datasets.validate(out)


def test_schema4_other_threads_reads_each_threads_clock_and_names_the_busiest():
    explained = [
        (outliers.explain(_as_v4(df)), kind) for df, kind in (synthetic_v3_run(s) for s in range(10))
    ]
    tp, fp, fn, precision, recall = cause_scores(explained, "other_threads")
    assert tp >= 50 and precision >= 0.9 and recall >= 0.9, (tp, fp, fn)
    e, _ = explained[0]
    row = e[e["cause"] == "other_threads"].iloc[0]
    assert (
        f"other threads of the process ran {row['others_cpu_ms']:.2f} ms of CPU in the "
        f"{row['others_window_ms']:.2f} ms around it" in row["evidence"]
    )
    assert f"{row['others_cpu_ms'] / row['others_window_ms']:.1f} CPUs' worth" in row["evidence"]
    assert (
        f"the busiest, a thread named 'worker-3', ran {row['busiest_cpu_ms']:.2f} ms of it" in row["evidence"]
    )
    assert "scheduler tick" not in row["evidence"]  # exact clocks: no lumping caveat
    quiet = e[e["cause"] == "unexplained"]
    assert quiet["evidence"].str.contains("the busiest (worker-3)", regex=False).any()
    # What was ruled out quotes the copy's own CPUs' worth over the window the clocks were
    # read in, and the same baseline other_threads compares against (not "% of wall time").
    checks = outliers.ruled_out(e)["other threads"]
    t = e[~e["warmup"] & (e["error"] == "")]
    for i in quiet.index[:5]:
        row = e.loc[i]
        like = t[(t["run_id"] == row["run_id"]) & (t["strategy"] == row["strategy"])]
        cell = like[like["size_bytes"] == row["size_bytes"]]
        share = cell if len(cell) >= 3 else like
        usual = (share["others_cpu_ms"] / share["others_window_ms"]).median()
        rate = row["others_cpu_ms"] / row["others_window_ms"]
        assert checks[i].startswith(
            f"other threads of the process ran {row['others_cpu_ms']:.2f} ms of CPU in the "
            f"{row['others_window_ms']:.2f} ms around it, {rate:.1f} CPUs' worth"
        ), checks[i]
        assert checks[i].endswith(f": {usual:.1f} CPUs' worth, median)"), checks[i]
        assert "of their wall time" not in checks[i]


def test_schema4_ruled_out_other_threads_on_h200_omp():
    # The bundled H200 run (schema 4): a default-policy pin_then_copy left unexplained; its
    # "other threads" check recomputed from the rows with pandas.
    df = datasets.load("h200_omp")
    e = outliers.explain(df)
    u = e[e["is_outlier"] & (e["cause"] == "unexplained")]
    i = u.index[(u["strategy"] == "pin_then_copy") & (u["run_id"].map(df.attrs["run_names"]) == "default-1")][
        0
    ]
    row = e.loc[i]
    t = e[~e["warmup"] & (e["error"] == "")]
    cell = t[
        (t["run_id"] == row["run_id"])
        & (t["strategy"] == "pin_then_copy")
        & (t["size_bytes"] == row["size_bytes"])
    ]
    usual = (cell["others_cpu_ms"] / cell["others_window_ms"]).median()
    rate = row["others_cpu_ms"] / row["others_window_ms"]
    want = (
        f"other threads of the process ran {row['others_cpu_ms']:.2f} ms of CPU in the {row['others_window_ms']:.2f} ms "
        f"around it, {rate:.1f} CPUs' worth, the busiest ({row['busiest_thread']}) {row['busiest_cpu_ms']:.2f} ms "
        f"(copies of this size: {usual:.1f} CPUs' worth, median)"
    )
    assert outliers.ruled_out(e).loc[i, "other threads"] == want
    assert want in row["evidence"]
    assert len(cell) == 10 and rate < 2 * usual  # why other_threads did not fire: at its usual share


def test_near_misses_stay_unexplained_and_say_what_was_ruled_out(explained_v3):
    said = []
    for e, kind in explained_v3:
        none = e[(kind == "none") & e["is_outlier"]]
        assert len(none) >= 5
        said += list(none["cause"])
        for ev in none.loc[none["cause"] == "unexplained", "evidence"]:
            assert "waiting to run" in ev or "no wait to run" in ev
            assert "context switch(es)" in ev and ("moved to another CPU" in ev or "stayed on one CPU" in ev)
            assert "ms in the timed call" in ev and "waiting for the GPU" in ev
        # A long wait after the call returned leaves the GPU's timing alone: never a cause.
        decoys = (kind == "") & (e["run_delay_ms"] > 2 * e["event_ms"])
        assert decoys.sum() >= 6 and not e.loc[decoys, "is_outlier"].any()
    assert np.mean(np.array(said) == "unexplained") >= 0.9, said


def test_schema3_evidence_quotes_numbers(explained_v3):
    e, _ = explained_v3[0]
    row = e[e["cause"] == "host_preempted"].iloc[0]
    assert f"waited {row['run_delay_ms']:.2f} ms on a run queue" in row["evidence"]
    assert f"{int(row['nivcsw'])} involuntary" in row["evidence"]
    row = e[e["cause"] == "host_blocked"].iloc[0]
    asleep = row["wall_ms"] - row["cpu_ms"] - row["run_delay_ms"]
    assert f"without waiting to run for {asleep:.2f} ms" in row["evidence"]
    assert (
        f"{row['cpu_ms']:.2f} ms on the CPU" in row["evidence"]
        and f"{int(row['nvcsw'])} voluntary" in row["evidence"]
    )
    row = e[e["cause"] == "gc_pause"].iloc[0]
    assert (
        f"ran {int(row['gc_count'])} time(s) during the copy and took {row['gc_ms']:.2f} ms"
        in row["evidence"]
    )
    row = e[e["cause"] == "page_faults"].iloc[0]
    assert (
        f"{int(row['proc_faults'])} page faults during the copy (every thread of the process)"
        in row["evidence"]
    )
    row = e[e["cause"] == "other_threads"].iloc[0]
    others = row["proc_cpu_ms"] - row["cpu_ms"]
    assert (
        f"less the timing thread's, advanced {others:.2f} ms in its {row['wall_ms']:.2f} ms by the host "
        f"clock, {others / row['wall_ms']:.1f} CPUs' worth, where for " in row["evidence"]
    )
    assert set(e.loc[e["is_outlier"], "cause"]) <= set(outliers.CAUSES)


def test_a_v2_table_keeps_the_cpu_share_rule():
    """Without run_delay_ms (schema 2) host_preempted still reads wall >> CPU, and
    host_blocked (which needs the run-queue wait) never appears."""
    df, kind = synthetic_v3_run(11)
    v2 = df.assign(**dict.fromkeys(datasets.ADDED_V3, np.nan))
    e = outliers.explain(v2)
    assert not (e["cause"] == "host_blocked").any()
    said = e.loc[kind == "host_preempted", "cause"]
    assert (said[e.loc[said.index, "strategy"] == "pageable"] == "host_preempted").all()


# --- the run-queue rule itself, by property ---------------------------------------------


def _ctx(**kw) -> pd.Series:
    base = dict.fromkeys(["faults", "fault_typ", "gc_typ", "clock_med", "procs_med", "issue_typ"], np.nan)
    return pd.Series({**base, "cpu_share": 1.0, "cpu_typ": 1.0, "rd_typ": 0.0, "blocked_typ": 0.0, **kw})


@settings(max_examples=300, deadline=None)
@given(
    exp=st.floats(0.01, 1000),
    ratio=st.floats(1.5, 50),
    rd_part=st.floats(0, 1.5),
    outside=st.floats(0, 1),
    in_call=st.booleans(),
    events=st.booleans(),
)
def test_preempted_exactly_when_the_wait_covers_half_the_extra_where_it_counts(
    exp, ratio, rd_part, outside, in_call, events
):
    """host_preempted iff the run-queue wait that fits in the copy (at most wall - CPU:
    part of the wait may fall just outside the timed window, ``outside``) and the part of
    the host's time that could stretch the timing (the call, with CUDA events; else all of
    it) both cover half the extra time."""
    val = exp * ratio
    extra = val - exp
    rd = rd_part * extra
    wall = val + (0 if in_call else rd)
    issue = 0.05 * exp + (rd if in_call else 0.0)
    cpu = wall - rd * (1 - outside)  # the rest of the wait happened around the copy
    row = pd.Series(
        {
            "expected_ms": exp,
            "wall_ms": wall,
            "event_ms": val if events else np.nan,
            "issue_ms": issue,
            "cpu_ms": cpu,
            "run_delay_ms": rd,
            "nivcsw": 1.0,
            "nvcsw": 0.0,
            "cpu_moved": 0.0,
            "size_bytes": 4096,
        }
    )
    found = evidence_cause(row, _ctx(), val, slow_text(row, val))
    window = issue if events else wall
    fits = run_delay_inside(rd, wall, cpu)
    assert fits == pytest.approx(rd * (1 - outside), rel=1e-9, abs=1e-9)
    want = min(fits, window) >= 0.5 * extra
    assert (found is not None and found[0] == "host_preempted") == want, (found, rd, window, extra)
    if want:
        assert f"waited {fits:.2f} ms on a run queue" in found[1]


@settings(max_examples=200, deadline=None)
@given(exp=st.floats(0.01, 1000), ratio=st.floats(1.5, 50), usual=st.floats(0, 0.9))
def test_no_wait_and_no_sleep_beyond_the_usual_is_never_a_scheduler_cause(exp, ratio, usual):
    """A copy whose thread waited and slept only its neighbours' share is not blamed on the
    scheduler, however slow it is."""
    val = exp * ratio
    row = pd.Series(
        {
            "expected_ms": exp,
            "wall_ms": val,
            "event_ms": np.nan,
            "issue_ms": val,
            "cpu_ms": val * (1 - usual),
            "run_delay_ms": val * usual / 2,
            "nivcsw": 1.0,
            "nvcsw": 1.0,
            "cpu_moved": 0.0,
            "size_bytes": 4096,
        }
    )
    ctx = _ctx(rd_typ=usual / 2, blocked_typ=usual / 2, cpu_share=1 - usual, cpu_typ=1 - usual)
    found = evidence_cause(row, ctx, val, slow_text(row, val))
    # the usual shares apply to the expected time, so at most (ratio - 1) * usual of the
    # extra is beyond them: below half whenever usual < 0.5 ...
    if usual < 0.5:
        assert found is None, found


def test_neighbours_typical_scheduler_shares():
    df, _ = synthetic_v3_run(2)
    ctx = causes.neighbours(df)
    by = df["strategy"]
    assert ctx.groupby(by)["blocked_typ"].first()["workers"] == pytest.approx(0.7, abs=0.05)
    assert ctx.groupby(by)["blocked_typ"].first()["pageable"] < 0.1
    assert ctx.groupby(by)["issue_typ"].first()["pinned"] == pytest.approx(0.05, abs=0.02)
    assert (ctx["rd_typ"] < 0.02).all()
    assert (ctx["faults"] == df["proc_faults"]).all()  # every thread's faults where measured


def test_ruled_out_table_lists_each_check(explained_v3):
    e, kind = explained_v3[0]
    table = outliers.ruled_out(e)
    u = e[e["is_outlier"] & (e["cause"] == "unexplained")]
    assert list(table.index) == list(u.index) and len(table) >= 4
    for col in (
        "page faults",
        "run-queue wait",
        "context switches",
        "other threads",
        "GC",
        "time in the call",
        "idle gap",
    ):
        assert table[col].str.len().gt(0).all(), col
    # synthetic copies with no idle runs beside them: nothing tells what a pause costs
    assert (
        table["idle gap"]
        .str.endswith(
            "ms; no idle runs recorded beside this table to tell what a pause costs on this machine"
        )
        .all()
    )
    i = table.index[0]
    assert table.at[i, "ms"] == pytest.approx(e.at[i, "event_ms"])
    # the head columns are the flagged copies' own values, every row
    head = ["run_id", "order", "strategy", "size_bytes", "ms", "wall_ms", "expected_ms"]
    assert list(table.columns[:7]) == head
    assert table["wall_ms"].to_numpy() == pytest.approx(u["wall_ms"].to_numpy())
    assert table["expected_ms"].to_numpy() == pytest.approx(u["expected_ms"].to_numpy())
    assert (table["expected_ms"] > 0).all()
    assert f"{e.at[i, 'issue_ms']:.2f} ms in the timed call" in table.at[i, "time in the call"]
    others = e.at[i, "proc_cpu_ms"] - e.at[i, "cpu_ms"]
    assert f"other threads of the process used {others:.2f} ms of CPU" in table.at[i, "other threads"]
    # every check's sentence is part of the row's evidence
    for col in table.columns[7:]:
        if table.at[i, col]:
            assert table.at[i, col] in e.at[i, "evidence"], col


NOT_RECORDED = (
    "page faults, the thread's CPU time, garbage collections, the SM clock, other processes on the GPU"
)


@pytest.mark.parametrize("name", ["forum_a100", "data/h200/sweep", "data/h200/forum"])
def test_ruled_out_on_recorded_tables_matches_each_evidence(name):
    """On real recordings (old and new schema): one row per unexplained copy, and each
    check's sentence is part of that copy's evidence, in the order of CHECKS."""
    from h2dlab.explain.causes_evidence import CHECKS

    e = outliers.explain(datasets.load(name))
    table = outliers.ruled_out(e)
    u = e[e["is_outlier"] & (e["cause"] == "unexplained")]
    assert list(table.index) == list(u.index)
    checks = [c for c in table.columns if c in CHECKS]
    assert (
        checks == [c for c in CHECKS if c in checks] and len(checks) == len(table.columns) - 7
    )  # run_id, order, strategy, size_bytes, ms, wall_ms, expected_ms
    for i in table.index:
        said = (
            "; ".join(table.at[i, c] for c in checks if table.at[i, c])
            or "the table carries no counters for it"
        )
        assert e.at[i, "evidence"].endswith("an isolated slow copy: " + said), i
    if name == "forum_a100":  # schema 1: no counters beside empty_cache(), and it says so
        assert checks == ["empty_cache", "not checked"]
        assert (table["not checked"] == "not recorded for it, so not checked: " + NOT_RECORDED).all()
    whole = r"^ruled_out\(\) reads explain\(\)'s output: run outliers\.explain\(table\) first$"
    with pytest.raises(ValueError, match=whole):
        outliers.ruled_out(datasets.load(name))


def test_h200_sweep_slow_pin_then_copy_with_busy_worker_threads_is_other_threads():
    """Recorded data (H200, plan 2 at 927e467, schema 3: tests/data/h200-plan2/sweep): the 512 KiB pin_then_copy at order 743 took
    3.55 ms where 0.40 ms was expected, while the process's other threads used 42.12 ms
    of CPU (their usual share at that size is about 1 %); it is ``other_threads``. The
    1 KiB one at order 160, with no other-thread CPU, is not: it is unexplained (the GPU sat
    idle 2.19 ms before it, but data/h200 has no idle runs to tell whether that wakes the
    GPU: gpu_wake needs them), as is the 64 KiB one at order 648 (idle 1.59 ms)."""
    e = outliers.explain(datasets.load(PLAN2 / "sweep"))
    flagged = e[e["is_outlier"]]
    got = flagged.set_index(["order", "strategy"])["cause"]
    assert got.loc[(743, "pin_then_copy")] == "other_threads"
    assert got.loc[(160, "pin_then_copy")] == "unexplained"
    assert got.loc[(648, "pin_then_copy")] == "unexplained"
    no_runs = "no idle runs recorded beside this table to tell what a pause costs on this machine"
    for order, gap in ((160, 2.19), (648, 1.59)):
        ev = flagged.set_index("order").loc[order, "evidence"]
        assert ev.endswith(f"; host time since the previous copy ended {gap:.2f} ms; {no_runs}"), ev
    ev = flagged.set_index("order").loc[743, "evidence"]
    assert (
        "advanced 42.12 ms in its 3.62 ms by the host clock, 11.6 CPUs' worth, where for copies of this "
        "size it advances 0.0 CPUs' worth (median)" in ev
    ), ev
    assert "which threads, the table cannot say" in ev and "at a scheduler tick" in ev
    assert "intra-op threads, which can run the host side of pin_memory()" in ev


@settings(max_examples=300, deadline=None)
@given(exp=st.floats(0.01, 100), ratio=st.floats(1.5, 50), usual=st.floats(0, 16), busier=st.floats(0, 4))
def test_other_threads_compares_cpus_worth_not_amounts(exp, ratio, usual, busier):
    """Synthetic row: a copy ``ratio`` times its expected time, on its CPU throughout, while
    the process's other threads ran ``busier`` times their usual CPUs' worth (``usual``
    CPUs). It is other_threads exactly when that is at least MIN_OTHERS_RATIO times the
    usual share and the CPU beyond the usual share covers the extra time: threads running
    at their usual rate through a longer copy (busier = 1) are never the cause."""
    val = exp * ratio
    rate = usual * busier
    row = pd.Series(
        {"expected_ms": exp, "wall_ms": val, "event_ms": np.nan, "issue_ms": val, "cpu_ms": val,
         "proc_cpu_ms": val + rate * val, "run_delay_ms": 0.0, "nivcsw": 0.0, "nvcsw": 0.0,
         "cpu_moved": 0.0, "size_bytes": 4096}
    )  # fmt: skip
    found = evidence_cause(row, _ctx(others_cell=usual, others_typ=usual), val, slow_text(row, val))
    rate = (row["proc_cpu_ms"] - row["cpu_ms"]) / val  # as the table gives it back
    want = rate > 0 and rate >= MIN_OTHERS_RATIO * usual and (rate - usual) * val >= val - exp
    assert (found is not None and found[0] == "other_threads") == want, (found, rate, usual)
    if busier <= 1.5:
        assert found is None or found[0] != "other_threads"
    if want:
        assert f"{rate:.1f} CPUs' worth, where for copies of this size it advances {usual:.1f}" in found[1]


def test_h200_batch_other_threads_at_their_usual_rate_are_not_the_cause():
    """Recorded data (H200, plan 2 at 927e467, schema 3: tests/data/h200-plan2/batch): during the 1 MiB to_device_packed copy at
    order 70 of run ``equal`` (18.26 ms where 0.91 ms was expected) the other threads ran
    252.64 ms in 18.33 ms, 13.8 CPUs' worth, as they do for copies of that size (median
    13.8): not other_threads. The 16 MiB pinned_each at order 343 of run ``mixed`` (54.20 ms
    in 3.17 ms, 17.1 CPUs' worth, where copies of that size show 0.0) still is."""
    e = outliers.explain(datasets.load(PLAN2 / "batch"))
    flagged = e[e["is_outlier"]]
    flagged = flagged.assign(run=flagged["run_id"].map(e.attrs["run_names"])).set_index(["run", "order"])
    assert flagged.at[("equal", 70), "cause"] == "unexplained"
    row = flagged.loc[("equal", 70)]
    assert (row["proc_cpu_ms"] - row["cpu_ms"]) / row["wall_ms"] == pytest.approx(13.78, abs=0.01)
    assert flagged.at[("mixed", 343), "cause"] == "other_threads"
    assert (
        "advanced 54.20 ms in its 3.17 ms by the host clock, 17.1 CPUs' worth"
        in flagged.at[("mixed", 343), "evidence"]
    )
    assert int((flagged["cause"] == "other_threads").sum()) == 6


def test_ruled_out_shows_the_host_clock_that_time_in_the_call_splits():
    """``ms`` is the CUDA events' time; the "time in the call" sentence splits the host clock,
    so the table shows that too (reader, session 29: 1.41 ms beside "1.42 ms in the call")."""
    from h2dlab.recording import sources

    e = outliers.explain(sources.load("h200:forum"))
    table = outliers.ruled_out(e)
    assert list(table.columns[4:7]) == ["ms", "wall_ms", "expected_ms"]
    assert (table["wall_ms"] == e.loc[table.index, "wall_ms"]).all()
    for i in table.index:
        call = float(table.at[i, "time in the call"].split(" ms in the timed call")[0])
        assert call <= table.at[i, "wall_ms"] + 0.005  # the call is part of the host clock's time
