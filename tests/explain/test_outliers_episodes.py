"""explain()'s episodes across strategies in a run's time order, on synthetic (made-up, not
measured) interleaved runs with machine-wide slow periods, isolated spikes and one slow
strategy injected at known rows."""

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.explain import episodes, outliers
from h2dlab.recording import datasets
from tests.explain.test_outliers_synthetic import timed_columns

STRATEGIES = ("loop_to", "loop_non_blocking", "foreach_copy", "pinned_flat", "pinned_each", "packed")
SIZES = 2 ** np.arange(12, 24, 2)
ACROSS = r"in time order across \d+ strategies and \d+ sizes"


def interleaved_run(seed: int, *, reps: int = 10, periods: int = 3, spikes: int = 8, one_slow: bool = False):
    """A synthetic interleaved run (made-up numbers): the strategies take turns in a fixed
    cycle, each copying the sizes in its own random order, so each curve has one row in
    every six in time. Latency 10 us + bytes / 20 GB/s, lognormal noise 3 %. Injected:
    ``periods`` machine-wide slow periods (8-14 consecutive rows, every copy x1.8-x3,
    whatever its strategy), ``spikes`` isolated slow copies (x2-x8, at least 12 rows from
    any period or other spike) and, with ``one_slow``, one strategy x2.5 for 60 rows in
    time while the others stay normal. Copies run back to back. Returns the table and the
    injected kind per row ("period", "spike", "one_slow" or "")."""
    rng = np.random.default_rng([seed, 17])
    ns = len(STRATEGIES)
    per = len(SIZES) * reps
    n = ns * per
    strategy = np.tile(STRATEGIES, per)
    size = np.empty(n, dtype=np.int64)
    for k in range(ns):
        size[k::ns] = rng.permutation(np.repeat(SIZES, reps))
    ms = (0.010 + size / 20e6) * np.exp(rng.normal(0, 0.03, n))
    kind = np.full(n, "", dtype=object)
    busy = np.zeros(n, bool)
    busy[:12] = True  # leave the start alone (no context start-up in play)
    if one_slow:
        at = int(rng.integers(n // 3, n // 2))
        slow = (np.arange(n) >= at) & (np.arange(n) < at + 60) & (strategy == STRATEGIES[2])
        ms[slow] *= 2.5
        kind[slow] = "one_slow"
        busy[at - 12 : at + 72] = True
    for _ in range(periods):
        length = int(rng.integers(8, 15))
        free = [i for i in range(n - length) if not busy[max(i - 12, 0) : i + length + 12].any()]
        a = int(rng.choice(free))
        ms[a : a + length] *= rng.uniform(1.8, 3.0, length)
        kind[a : a + length] = "period"
        busy[a : a + length] = True
    for _ in range(spikes):
        free = [i for i in range(n) if not busy[max(i - 12, 0) : i + 13].any()]
        i = int(rng.choice(free))
        ms[i] *= rng.uniform(2.0, 8.0)
        kind[i] = "spike"
        busy[i] = True
    t_s = np.concatenate([[0.0], np.cumsum(ms[:-1] + rng.uniform(0.3, 1.8, n - 1))]) / 1000
    df = pd.DataFrame(timed_columns(f"synthetic-interleaved-{seed}", strategy, size, t_s, ms * 1.01, ms))
    return datasets.validate(df), kind


def across(e: pd.DataFrame) -> np.ndarray:
    """Rows explain() calls an episode across strategies."""
    return ((e["cause"] == "episode") & e["evidence"].str.contains(ACROSS)).to_numpy()


def test_machine_wide_slow_period_is_an_episode_across_strategies():
    df, kind = interleaved_run(0, periods=1, spikes=0)
    e = outliers.explain(df)
    period = kind == "period"
    assert e["is_outlier"].to_numpy()[period].all()
    # No curve has 4 rows in the period: the per-curve pass alone finds nothing.
    assert df[period].groupby("strategy").size().max() <= 3
    assert across(e)[period].all()
    assert (e.loc[period, "episode"] == 0).all() and (e.loc[~period, "episode"] == -1).all()
    ev = e.loc[period, "evidence"].iloc[0]
    t0, t1 = df.loc[period, "t_s"].min(), df.loc[period, "t_s"].max()
    ratio = np.median(e.loc[period, "event_ms"] / e.loc[period, "expected_ms"])
    assert (
        f"one of a stretch of {int(period.sum())} consecutive slow copies in time order across "
        f"{df.loc[period, 'strategy'].nunique()} strategies and {df.loc[period, 'size_bytes'].nunique()} sizes "
        f"(episode 0, {t0:.2f} s to {t1:.2f} s of the run; the median copy in it took {ratio:.1f}x its expected "
        "time): the machine was slow for a while, whatever was copied"
    ) in ev


def test_precision_recall_of_periods_against_isolated_spikes():
    tp = fp = fn = 0
    for seed in range(8):
        df, kind = interleaved_run(seed)
        e = outliers.explain(df)
        said = across(e)
        truth = (kind == "period") & e["is_outlier"].to_numpy()
        tp += int((said & truth).sum())
        fp += int((said & ~truth).sum())
        fn += int((~said & truth).sum())
        # Every isolated spike is flagged and stays an isolated slow copy.
        spike = kind == "spike"
        assert e["is_outlier"].to_numpy()[spike].all()
        assert (e.loc[spike, "cause"] == "unexplained").all()
        assert e.loc[spike, "evidence"].str.contains("an isolated slow copy").all()
    assert tp >= 8 * 3 * 8
    assert tp / (tp + fp) >= 0.9
    assert tp / (tp + fn) >= 0.9


def test_isolated_spike_is_explained_as_without_the_pass():
    df, kind = interleaved_run(3, periods=0, spikes=10)
    e = outliers.explain(df)
    assert (e["episode"] == -1).all()
    spike = kind == "spike"
    assert e.index[e["is_outlier"]].equals(e.index[spike])
    assert (e.loc[spike, "cause"] == "unexplained").all()


def test_one_slow_strategy_is_a_per_curve_episode_not_one_across_strategies():
    df, kind = interleaved_run(5, periods=0, spikes=0, one_slow=True)
    e = outliers.explain(df)
    slow = kind == "one_slow"
    assert not across(e).any()
    assert (e.loc[slow, "cause"] == "episode").all()
    assert (
        e.loc[slow, "evidence"]
        .str.contains(r"one of a stretch of consecutive slow copies in time order \(episode 0\)")
        .all()
    )
    assert (e.loc[~slow, "episode"] == -1).all()


def test_without_start_times_no_episode_across_strategies():
    df, kind = interleaved_run(0, periods=1, spikes=0)
    e = outliers.explain(df.assign(t_s=np.nan))
    assert (e["episode"] == -1).all()
    assert (e.loc[kind == "period", "cause"] == "unexplained").all()


def stretch_table(strategy, slow):
    """A synthetic run (made-up): one row per strategy given, in that time order, each
    copy at its expected time except rows ``slow`` at 2x."""
    n = len(strategy)
    df = pd.DataFrame(
        {
            "run_id": "synthetic-stretch",
            "t_s": np.arange(n) / 100,
            "order": np.arange(n),
            "rep": 0,
            "strategy": strategy,
            "size_bytes": 1024 * (1 + np.arange(n) % 3),
            "robust_z": 0.0,
        }
    )
    ratio = pd.Series(np.where(np.isin(np.arange(n), slow), 2.0, 1.0), index=df.index)
    return episodes.across_curves(df, ratio, [], 0.01, ["run_id", "strategy"])


def test_a_stretch_across_curves_needs_two_curves_none_holding_more_than_half():
    ab = ["a", "b"] * 15
    (s,) = stretch_table(ab, range(10, 16))
    assert s.rows == tuple(range(10, 16)) and (s.strategies, s.sizes, s.median_ratio) == (2, 3, 2.0)
    assert (s.start_s, s.end_s) == (0.10, 0.15)
    # One curve's own stretch, alone or beside one copy of another: not across curves.
    one = ab[:10] + ["x"] * 6 + ab[16:]
    assert stretch_table(one, range(10, 16)) == []
    assert stretch_table(ab[:10] + ["x"] * 4 + ["a", "b"] + ab[16:], range(10, 16)) == []
    # Three of six from one curve is half: it counts.
    assert len(stretch_table(ab[:10] + ["x"] * 3 + ["a", "b", "a"] + ab[16:], range(10, 16))) == 1


def _two_runs() -> tuple[pd.DataFrame, pd.Series]:
    """Synthetic: runs "b" and "a" (in that row order), 30 rows each alternating two
    strategies, rows 10-15 of each at 2x."""
    one = pd.DataFrame(
        {
            "t_s": np.arange(30) / 100,
            "order": np.arange(30),
            "rep": 0,
            "strategy": ["x", "y"] * 15,
            "size_bytes": 1024,
            "robust_z": 0.0,
        }
    )
    df = pd.concat([one.assign(run_id="b"), one.assign(run_id="a")], ignore_index=True)
    ratio = pd.Series(np.where(df["order"].between(10, 15), 2.0, 1.0), index=df.index)
    return df, ratio


def test_stretches_across_curves_come_per_run_in_the_runs_sorted_order():
    df, ratio = _two_runs()
    got = episodes.across_curves(df, ratio, [], 0.01, ["run_id", "strategy"])
    assert [s.rows for s in got] == [tuple(range(40, 46)), tuple(range(10, 16))]  # run "a", then "b"
    # The table's row order changes nothing, not even which run's stretch comes first.
    back = df.iloc[::-1]
    assert episodes.across_curves(back, ratio[back.index], [], 0.01, ["run_id", "strategy"]) == got


def test_a_timeline_column_left_empty_still_makes_one_timeline():
    # A synthetic table with world and gpu columns but no value in them: each run is one timeline.
    df, ratio = _two_runs()
    want = episodes.across_curves(df, ratio, [], 0.01, ["run_id", "strategy"])
    got = episodes.across_curves(df.assign(world=np.nan, gpu=None), ratio, [], 0.01, ["run_id", "strategy"])
    assert got == want and len(got) == 2


def test_a_curve_column_left_empty_is_one_curve():
    df, ratio = _two_runs()
    want = episodes.across_curves(df, ratio, [], 0.01, ["run_id", "strategy"])
    with_nan = df.assign(n_tensors=np.nan)
    assert episodes.across_curves(with_nan, ratio, [], 0.01, ["run_id", "strategy", "n_tensors"]) == want


def test_a_stretch_of_one_curve_does_not_hide_a_later_one_across_curves():
    ab = ["a", "b"] * 25
    strategy = ab[:10] + ["x"] * 6 + ab[16:]  # rows 10-15: one curve's own stretch
    (s,) = stretch_table(strategy, [*range(10, 16), *range(30, 36)])
    assert s.rows == tuple(range(30, 36))


def test_neutral_rows_count_as_at_their_expected_time():
    df, ratio = _two_runs()
    (s,) = episodes.across_curves(df, ratio, range(40, 46), 0.01, ["run_id", "strategy"])
    assert s.rows == tuple(range(10, 16))  # run "a"'s slow rows were explained: only run "b"'s
    assert s.median_ratio == 2.0


def test_a_start_time_or_score_that_is_not_a_number_counts_as_missing():
    df, ratio = _two_runs()
    df = df[df["run_id"] == "a"]
    want = episodes.across_curves(df, ratio, [], 0.01, ["run_id", "strategy"])
    assert [s.rows for s in want] == [tuple(range(40, 46))]
    for col in ("t_s", "robust_z"):
        for missing in (np.nan, "n/a"):
            bad = df.astype({col: object})
            bad.loc[[40, 45], col] = missing  # rows 40 and 45 do not take part
            (s,) = episodes.across_curves(bad, ratio, [], 0.01, ["run_id", "strategy"])
            assert s.rows == (41, 42, 43, 44), (col, missing)


def test_time_order_breaks_ties_by_order_and_puts_missing_times_last():
    df = pd.DataFrame({"t_s": [2.0, np.nan, 1.0, 1.0], "order": [0, 1, 3, 2], "rep": 0})
    assert list(episodes.time_order(df)) == [3, 2, 0, 1]


def test_time_order_keeps_the_tables_order_for_exact_ties():
    # A synthetic table whose only time key is t_s (300 rows, 3 start times, two missing):
    # rows at the same time stay in the table's order (a stable sort), missing times last.
    rng = np.random.default_rng(0)
    t = rng.integers(0, 3, 300).astype(float)
    t[[5, 50]] = np.nan
    df = pd.DataFrame({"t_s": t}, index=1000 + rng.permutation(300))
    want = sorted(range(300), key=lambda i: (np.isnan(t[i]), np.nan_to_num(t[i]), i))
    assert list(episodes.time_order(df)) == list(df.index[want])


def test_rows_explained_by_a_specific_cause_are_neutral_across_curves():
    df, kind = interleaved_run(0, periods=1, spikes=0)
    period = kind == "period"
    # The same rows, explained by new device segments: no stretch across strategies.
    e = outliers.explain(df.assign(device_allocs=np.where(period, 3.0, 0.0)))
    assert (e.loc[period, "cause"] == "device_alloc").all()
    assert (e["episode"] == -1).all()


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), perm=st.integers(0, 2**16))
def test_episodes_do_not_depend_on_the_tables_row_order(seed, perm):
    df, _ = interleaved_run(seed % 4, reps=8, periods=2, spikes=3, one_slow=seed % 2 == 1)
    shuffled = df.sample(frac=1.0, random_state=perm)
    a = outliers.explain(df)
    b = outliers.explain(shuffled)
    assert set(a.index[a["episode"] >= 0]) == set(b.index[b["episode"] >= 0])
    assert a["cause"].equals(b.loc[a.index, "cause"])
