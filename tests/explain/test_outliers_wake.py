"""The idle gap before each copy and the ``gpu_wake`` cause: ``causes_wake.idle_gap_ms`` by
example and by property (against a brute-force reading of its definition), and
``explain()`` on synthetic (made-up, not measured) tables with injected wake-ups, near
misses and the schema-2 events, plus the recorded tables it must still explain."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.explain import causes, outliers
from h2dlab.explain.causes_evidence import CHECKS, slow_text
from h2dlab.explain.causes_wake import WakeCalibration, idle_gap_ms, run_pauses, wake_cause, wake_check
from h2dlab.recording import datasets
from tests.explain.test_outliers_synthetic import NEW_CAUSES, cause_scores, synthetic_v2_run

#: A synthetic calibration (made up, as if from idle runs): a wake-up after 2 ms idle,
#: costing at most 0.25 ms.
SYNTHETIC_WAKE = WakeCalibration(
    idle_ms=2.0,
    extra_ms=0.25,
    pauses=(0.0, 1.0, 2.0, 10.0),
    shares=(0.0, 0.05, 0.4, 0.6),
    source="synthetic idle runs: pauses 0, 1, 2, 10 ms",
    slow_ratio=1.5,
    min_share=0.2,
)
SYNTHETIC_SAID = (
    "in this machine's idle runs, after pauses of 2 ms, 40% of the smallest copies took at least 1.5x their "
    "median after the shortest pause, and every cell's 90th percentile at most 0.25 ms above its median after "
    "the shortest pause (synthetic idle runs: pauses 0, 1, 2, 10 ms)"
)

# --- the idle gap ------------------------------------------------------------------------


def gap_table(rows):
    """A table of (run_id, t_s, wall_ms[, warmup, error]) rows, only what idle_gap_ms reads."""
    cols = ["run_id", "t_s", "wall_ms", "warmup", "error"]
    return pd.DataFrame([(*r, False, "")[:5] for r in rows], columns=cols)


def test_idle_gap_by_example():
    df = gap_table(
        [
            ("a", 0.000, 1.0),  # first of run a: NaN
            ("a", 0.004, 0.5),  # 4 ms after the first began, 1 ms of it the copy: 3 ms idle
            ("b", 0.002, 2.0),  # first of run b, although run a ran before it
            ("a", 0.006, np.nan),  # no wall time: gets a gap, ends nothing
            ("a", 0.0105, 0.2),  # after the 0.5 ms copy at 4 ms (the NaN one is passed over): 6 ms
            ("a", np.nan, 0.3),  # no start time: NaN, ends nothing
            ("a", 0.0200, 0.1),
        ]
    )
    want = [np.nan, 3.0, np.nan, 1.5, 6.0, np.nan, 9.3]
    np.testing.assert_allclose(idle_gap_ms(df).to_numpy(), want, rtol=1e-9, equal_nan=True)
    # a warm-up and an error row with a time ran on the GPU: they end the idle time too
    df.loc[1, "warmup"] = True
    df.loc[4, "error"] = "wrong result: the copy differs from the source"
    np.testing.assert_allclose(idle_gap_ms(df).to_numpy(), want, rtol=1e-9, equal_nan=True)


def test_idle_gap_rows_starting_together_are_one_operation():
    """A bidirectional copy's two rows share t_s: neither is the other's previous copy, and
    the next copy's gap starts when the longer of them ended."""
    df = gap_table([("r", 0.0, 1.0), ("r", 0.010, 2.0), ("r", 0.010, 3.0), ("r", 0.020, 1.0)])
    np.testing.assert_allclose(idle_gap_ms(df).to_numpy(), [np.nan, 9.0, 9.0, 7.0], rtol=1e-9)


def test_idle_gap_keeps_each_gpus_timeline_apart():
    """In a concurrent run each (world, gpu) has its own clock; a copy on GPU 1 does not end
    GPU 0's idle time."""
    df = gap_table([("r", 0.0, 1.0), ("r", 0.0005, 1.0), ("r", 0.005, 1.0)]).assign(gpu=[0, 1, 0], world=2)
    np.testing.assert_allclose(idle_gap_ms(df).to_numpy(), [np.nan, np.nan, 4.0], rtol=1e-9, equal_nan=True)
    assert idle_gap_ms(df.drop(columns=["gpu", "world"])).iloc[2] == pytest.approx(3.5)


def test_idle_gap_without_start_times_and_bad_input():
    df = gap_table([("a", 0.0, 1.0), ("a", 0.01, 1.0)])
    assert idle_gap_ms(df.drop(columns="t_s")).isna().all()
    assert idle_gap_ms(df.iloc[:0]).empty
    with pytest.raises(ValueError, match="needs the column"):
        idle_gap_ms(df.drop(columns="run_id"))


def oracle(df):
    """idle_gap_ms's definition, row by row: the latest earlier start in the run among rows
    with a finite t_s and wall_ms, ending with the longest of those that began then."""
    ok = np.isfinite(df["t_s"]) & np.isfinite(df["wall_ms"])
    out = []
    for _, r in df.iterrows():
        prev = df[ok & (df["run_id"] == r["run_id"]) & (df["t_s"] < r["t_s"])]
        if not np.isfinite(r["t_s"]) or prev.empty:
            out.append(np.nan)
            continue
        tp = prev["t_s"].max()
        out.append(1000 * (r["t_s"] - tp) - prev.loc[prev["t_s"] == tp, "wall_ms"].max())
    return np.array(out)


T_S = st.one_of(st.just(np.nan), st.sampled_from([0.0, 0.001, 0.0025, 0.004, 0.01, 0.5]), st.floats(0, 2))
WALL = st.one_of(st.just(np.nan), st.floats(0, 20))


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.tuples(st.sampled_from(["a", "b"]), T_S, WALL), min_size=1, max_size=25),
    data=st.data(),
)
def test_idle_gap_is_its_definition_in_any_row_order(rows, data):
    df = gap_table(rows)
    got = idle_gap_ms(df)
    want = oracle(df)
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-9, atol=1e-9, equal_nan=True)
    # NaN exactly for rows without a start time and each run's first start(s)
    finite_t = np.isfinite(df["t_s"])
    ends = finite_t & np.isfinite(df["wall_ms"])
    first = df["t_s"] <= df["t_s"].where(ends).groupby(df["run_id"]).transform("min").fillna(np.inf)
    assert (got.isna() == (~finite_t | first)).all()
    # the same gaps, row for row, whatever order the table's rows are in
    perm = data.draw(st.permutations(list(df.index)))
    shuffled = idle_gap_ms(df.loc[perm])
    assert list(shuffled.index) == perm
    np.testing.assert_array_equal(shuffled.loc[df.index].to_numpy(), got.to_numpy())


# --- gpu_wake on a synthetic table -------------------------------------------------------

WAKE_KINDS = {"gpu_wake": 6, "wake_too_big": 4, "wake_too_soon": 4}


def synthetic_wake_run(seed: int):
    """``synthetic_v2_run`` (made-up numbers) with idle gaps and injected wake-ups.

    Copies run one after another; 30 % of the quiet rows and of the schema-2 events follow
    a long idle gap (2.5-20 ms), the rest a short one (0.3-1.8 ms); the near misses
    (``none``) follow short ones. Injected on quiet rows: ``gpu_wake`` (a copy that took
    at most 0.1 ms, slower by 0.02-0.2 ms and by at least 60 % of its time, after a gap of
    2.5-30 ms), ``wake_too_big`` (slower by 0.35-1.05 ms after such a gap: more than a
    wake-up costs) and ``wake_too_soon`` (a wake-up's extra after a gap of 0.2-1.8 ms). CPU
    time keeps its share of wall time. Returns the table and the injected kind per row."""
    df, kind = synthetic_v2_run(seed)
    rng = np.random.default_rng([seed, 11])
    n = len(df)
    ms = df["event_ms"].to_numpy(float).copy()
    share = (df["cpu_ms"] / df["wall_ms"]).to_numpy(float)
    gaps = np.where(rng.random(n) < 0.3, rng.uniform(2.5, 20, n), rng.uniform(0.3, 1.8, n))
    gaps[kind == "none"] = rng.uniform(0.3, 1.8, (kind == "none").sum())
    kind = kind.copy()
    quiet = (kind == "") & (df["gc_count"] == 0).to_numpy() & (df["gpu_procs"] == 0).to_numpy()  # no decoys
    small = np.flatnonzero(quiet & (ms < 0.1))
    larger = np.flatnonzero(quiet & (ms >= 0.1) & (ms < 2.0))
    picks = iter(rng.permutation(small))
    for k, count in WAKE_KINDS.items():
        for _ in range(count):
            i = next(picks) if k != "wake_too_big" else rng.choice(larger[kind[larger] == ""])
            kind[i] = k
            if k == "wake_too_big":
                ms[i] += max(0.35, 0.6 * ms[i]) * rng.uniform(1, 3)
            else:
                ms[i] += rng.uniform(max(0.6 * ms[i], 0.02), 0.2)
            gaps[i] = rng.uniform(0.2, 1.8) if k == "wake_too_soon" else rng.uniform(2.5, 30)
    wall = ms * 1.01
    t_s = np.concatenate([[0.0], np.cumsum(wall[:-1] + gaps[1:])]) / 1000
    out = df.assign(event_ms=ms, wall_ms=wall, cpu_ms=share * wall, t_s=t_s)
    return datasets.validate(out), kind


@pytest.fixture(scope="module")
def explained_wake():
    return [
        (outliers.explain(df, wake=SYNTHETIC_WAKE), kind)
        for df, kind in (synthetic_wake_run(s) for s in range(10))
    ]


def test_gpu_wake_precision_recall_synthetic(explained_wake):
    tp, fp, fn, precision, recall = cause_scores(explained_wake, "gpu_wake")
    assert tp >= 55, tp
    assert precision >= 0.9, (precision, tp, fp)
    assert recall >= 0.9, (recall, tp, fn)


@pytest.mark.parametrize("cause", NEW_CAUSES)
def test_evidence_causes_keep_their_precision_recall_after_long_gaps(explained_wake, cause):
    """The schema-2 events, a third of them after a long idle gap, keep their causes:
    direct evidence is tried before gpu_wake."""
    tp, fp, fn, precision, recall = cause_scores(explained_wake, cause)
    assert tp >= 40, (cause, tp)
    assert precision >= 0.9 and recall >= 0.9, (cause, tp, fp, fn)


def test_near_misses_of_a_wake_up_stay_unexplained_and_say_why(explained_wake):
    said = {"wake_too_big": [], "wake_too_soon": [], "none": []}
    for e, kind in explained_wake:
        table = outliers.ruled_out(e)
        for k in said:
            rows = e[(kind == k) & e["is_outlier"]]
            said[k] += list(rows["cause"])
            for i in rows.index[rows["cause"] == "unexplained"]:
                gap = causes.neighbours(e).at[i, "idle_gap_ms"]
                check = table.at[i, "idle gap"]
                assert check in e.at[i, "evidence"]
                if k == "wake_too_big":
                    extra = e.at[i, "event_ms"] - e.at[i, "expected_ms"]
                    assert check == (
                        f"host time since the previous copy ended {gap:.2f} ms, but the extra {extra:.2f} ms is more than the "
                        f"0.25 ms a wake-up cost in the idle runs"
                    )
                else:
                    assert check == (
                        f"host time since the previous copy ended {gap:.2f} ms, under the 2.00 ms between copies after which this machine's idle "
                        "runs show a wake-up (at least 20% of each strategy's smallest copies 1.5x slow)"
                    )
    for k, causes_said in said.items():
        assert len(causes_said) >= 30, k
        assert np.mean(np.array(causes_said) == "unexplained") >= 0.9, (k, causes_said)
    # a long gap alone flags nothing: quiet copies after one are not slow
    for e, kind in explained_wake:
        gap = causes.neighbours(e)["idle_gap_ms"]
        assert ((kind == "") & (gap >= 2.5)).sum() >= 50
        assert not e.loc[(kind == "") & (gap >= 2.5), "is_outlier"].any()


def test_gpu_wake_evidence_quotes_the_numbers(explained_wake):
    e, _ = explained_wake[0]
    gap = causes.neighbours(e)["idle_gap_ms"]
    for i in e.index[e["cause"] == "gpu_wake"]:
        val, exp = e.at[i, "event_ms"], e.at[i, "expected_ms"]
        assert e.at[i, "evidence"] == (
            f"{slow_text(e.loc[i], val)}; host time since the previous copy ended {gap[i]:.2f} ms, and the extra "
            f"{val - exp:.2f} ms is within what a wake-up costs: {SYNTHETIC_SAID}; the first copy after a spell "
            "without copies can pay a wake-up (of the GPU's copy engine, its PCIe link, the driver or the host: "
            "these columns cannot say which); the gap makes a wake-up likely, not certain, and no other evidence "
            "points anywhere"
        )


def _row(**kw) -> pd.Series:
    return pd.Series({"expected_ms": 0.10, "wall_ms": 0.20, "event_ms": 0.18, **kw})


def _ctx(**kw) -> pd.Series:
    return pd.Series(
        {"idle_gap_ms": 3.7, "issue_cell": np.nan, "issue_typ": np.nan, "wake": SYNTHETIC_WAKE, **kw}
    )


@pytest.mark.parametrize(
    "gap,val,fires",
    [
        (2.0, 0.10 + 0.25, True),  # both bounds (the calibration's) are inclusive
        (2.0 - 1e-9, 0.18, False),
        (3.7, 0.10 + 0.25 + 1e-9, False),
        (3.7, 0.10, False),  # no extra time
        (np.nan, 0.18, False),  # no start times in the table
    ],
)
def test_wake_rule_bounds(gap, val, fires):
    found = wake_cause(_row(), _ctx(idle_gap_ms=gap), val, "slow")
    assert (found is not None) == fires
    if fires:
        assert found[0] == "gpu_wake"


def test_wake_evidence_compares_the_host_call_where_recorded():
    row = _row(issue_ms=0.17)
    ev = wake_cause(row, _ctx(issue_cell=0.11, issue_typ=0.77), 0.18, "slow")[1]
    assert ev.endswith(
        "; the timed call itself took 0.17 ms where its neighbours' of this size took 0.11 ms (median)"
    )
    ev = wake_cause(row, _ctx(issue_typ=0.5), 0.18, "slow")[1]
    assert ev.endswith(
        "; the timed call itself took 0.17 ms, 85% of its time, where its neighbours' took 50% of theirs"
    )
    assert wake_cause(_row(), _ctx(issue_cell=0.11), 0.18, "slow")[1].endswith("points anywhere")


def test_wake_check_sentences():
    assert wake_check(_row(), _ctx(idle_gap_ms=0.4)) == (
        "host time since the previous copy ended 0.40 ms, under the 2.00 ms between copies after which this "
        "machine's idle runs show a wake-up (at least 20% of each strategy's smallest copies 1.5x slow)"
    )
    assert wake_check(_row(event_ms=0.7), _ctx()) == (
        "host time since the previous copy ended 3.70 ms, but the extra 0.60 ms is more than the 0.25 ms a "
        "wake-up cost in the idle runs"
    )
    assert wake_check(_row(event_ms=np.nan), _ctx(idle_pause_ms=1.0)) == (
        "host time since the previous copy ended 3.70 ms (1 ms of it the run's --pause): long enough for a "
        "wake-up, which can cost the extra 0.10 ms"
    )
    assert wake_check(_row(), _ctx(idle_gap_ms=-1.5)) == (
        "no idle time before it (its timing began 1.50 ms before the previous copy ended)"
    )
    assert wake_check(_row(), _ctx(idle_gap_ms=np.nan)) is None
    assert CHECKS[-2:] == ("idle gap", "stall census")  # the census check is added after ruled_out's own


def test_an_episode_wins_over_gpu_wake():
    """A stretch of small slow copies, each after a long gap, is one time-correlated
    episode, as before gpu_wake existed; the same copies scattered are gpu_wake."""
    n = 60
    ms = np.full(n, 0.05) * np.exp(np.random.default_rng(0).normal(0, 0.02, n))
    ms[30:38] += 0.1
    gaps = np.full(n, 1.0)
    gaps[30:38] = 5.0
    wall = ms * 1.01
    df = datasets.validate(
        pd.DataFrame(
            {
                "run_id": "synthetic-episode",
                "order": np.arange(n),
                "strategy": "pinned",
                "size_bytes": 4096,
                "shape": "",
                "dtype": "uint8",
                "rep": np.arange(n),
                "warmup": False,
                "t_s": np.concatenate([[0.0], np.cumsum(wall[:-1] + gaps[1:])]) / 1000,
                "wall_ms": wall,
                "event_ms": ms,
                "host_allocs": 0.0,
                "device_allocs": 0.0,
                "empty_cache": False,
                "error": "",
            }
        )
    )
    e = outliers.explain(df, wake=SYNTHETIC_WAKE)
    assert list(e.index[e["is_outlier"]]) == list(range(30, 38))
    assert (e.loc[30:37, "cause"] == "episode").all()
    spread = [3, 11, 19, 27, 35, 43, 51, 59]
    ms2 = np.full(n, 0.05) * np.exp(np.random.default_rng(1).normal(0, 0.02, n))
    gaps2 = np.full(n, 1.0)
    ms2[spread] += 0.1
    gaps2[spread] = 5.0
    wall2 = ms2 * 1.01
    t2 = np.concatenate([[0.0], np.cumsum(wall2[:-1] + gaps2[1:])]) / 1000
    e2 = outliers.explain(df.assign(event_ms=ms2, wall_ms=wall2, t_s=t2), wake=SYNTHETIC_WAKE)
    assert list(e2.index[e2["is_outlier"]]) == spread
    assert (e2.loc[spread, "cause"] == "gpu_wake").all()


def test_tables_without_start_times_never_say_gpu_wake():
    """Without start times (the forum's A100 table) a copy that would be gpu_wake is
    unexplained, and nothing else changes."""
    df, kind = synthetic_wake_run(2)
    full = outliers.explain(df, wake=SYNTHETIC_WAKE)
    assert (full["cause"] == "gpu_wake").sum() >= 5
    for blank in (df.assign(t_s=np.nan), df.drop(columns="t_s")):
        e = outliers.explain(blank, wake=SYNTHETIC_WAKE)
        assert not (e["cause"] == "gpu_wake").any()
        pd.testing.assert_series_equal(e["cause"], full["cause"].replace("gpu_wake", "unexplained"))
        assert "idle gap" not in outliers.ruled_out(e).columns


# --- runs measured with --pause ---------------------------------------------------------


def test_a_paused_runs_gap_is_measured_like_any_other():
    """``measure --pause MS`` spins MS ms after t_s in every row alike, so the difference of
    two rows' t_s spans the previous copy's end to this one's start, pause included: the
    gap is measured, never replaced by the pause (a tiny GPU submission before the pause
    does not undo a spell without copies)."""
    df = gap_table(
        [("p", 0.0, 1.0), ("p", 0.004, 1.0), ("p", 0.008, np.nan), ("q", 0.0, 1.0), ("q", 0.004, 1.0)]
    )
    df.attrs["envs"] = {"p": {"spec": {"pause_ms": 0}}, "q": {"spec": {}}, "r": None}
    assert run_pauses(df) == {"p": 0.0}
    np.testing.assert_allclose(idle_gap_ms(df).to_numpy(), [np.nan, 3.0, 3.0, np.nan, 3.0], equal_nan=True)
    assert run_pauses(gap_table([("a", 0.0, 1.0)])) == {}


def test_a_calibrations_gap_is_the_threshold_not_its_pause():
    """A calibration made from runs with start times carries the gap its idle runs showed the
    cost at (``gap_ms``): a copy after a shorter gap is not gpu_wake, though the gap is
    longer than the pause (``idle_ms``); one after that gap is."""
    cal = dataclasses.replace(SYNTHETIC_WAKE, gap_ms=4.5)
    assert cal.threshold_ms == 4.5 and SYNTHETIC_WAKE.threshold_ms == 2.0
    assert wake_cause(_row(), _ctx(idle_gap_ms=4.4, wake=cal), 0.18, "slow") is None
    assert wake_cause(_row(), _ctx(idle_gap_ms=4.5, wake=cal), 0.18, "slow")[0] == "gpu_wake"
    assert wake_check(_row(), _ctx(idle_gap_ms=4.4, wake=cal)) == (
        "host time since the previous copy ended 4.40 ms, under the 4.50 ms between copies after which this "
        "machine's idle runs show a wake-up (at least 20% of each strategy's smallest copies 1.5x slow)"
    )
    said = wake_cause(_row(), _ctx(idle_gap_ms=5.0, wake=cal), 0.18, "slow")[1]
    assert "after pauses of 2 ms (a median 4.50 ms from the end of one copy to the start of the next" in said


def test_explain_says_how_much_of_the_gap_was_the_runs_pause():
    """Synthetic back-to-back copies (gaps under 2 ms): with --pause 0 in the run's env.json
    the near misses a wake-up's size stay unexplained (their gaps are measured, and under
    the threshold), and the evidence says how much of the gap was the pause. (Before, a
    pause of 10 in the env.json made them gpu_wake whatever the gaps.)"""
    df, kind = synthetic_v2_run(6)
    plain = outliers.explain(df, wake=SYNTHETIC_WAKE)
    small = (kind == "none") & plain["is_outlier"] & (plain["event_ms"] - plain["expected_ms"] <= 0.25)
    assert small.sum() >= 2 and (plain.loc[small, "cause"] == "unexplained").all()
    run = df["run_id"].iloc[0]
    for pause in (0.0,):
        df.attrs["envs"] = {run: {"spec": {"pause_ms": pause}}}
        e = outliers.explain(df, wake=SYNTHETIC_WAKE)
        assert (e.loc[small, "cause"] == "unexplained").all(), pause
        assert (
            e.loc[small, "evidence"]
            .str.contains(
                rf"host time since the previous copy ended \d+\.\d\d ms \({pause:g} ms of it the run's --pause\), "
                "under the 2.00 ms between copies"
            )
            .all()
        )
        # nothing else moves
        others = ~small
        pd.testing.assert_series_equal(e.loc[others, "cause"], plain.loc[others, "cause"])


def test_a_gap_shorter_than_the_runs_pause_does_not_claim_the_pause():
    """A paused run whose start times put the previous copy's end 0.88 ms before this one
    (t_s that contradict the 10 ms pause): the sentence gives the gap alone, where it said
    '0.88 ms (10 ms of it the run's --pause)'; a gap that holds the pause still names it."""
    assert wake_check(_row(), _ctx(idle_gap_ms=0.88, idle_pause_ms=10.0)) == (
        "host time since the previous copy ended 0.88 ms, under the 2.00 ms between copies after which this "
        "machine's idle runs show a wake-up (at least 20% of each strategy's smallest copies 1.5x slow)"
    )
    assert wake_check(_row(event_ms=np.nan), _ctx(idle_gap_ms=10.0, idle_pause_ms=10.0)).startswith(
        "host time since the previous copy ended 10.00 ms (10 ms of it the run's --pause): "
    )
