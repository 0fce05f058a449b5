"""The stall census (``census.census`` with fake clocks) and the ``host_stall`` rule on
synthetic (made-up, not measured) tables with on-CPU stalls injected at known rows, beside
look-alikes that must keep their own story."""

import json

import numpy as np
import pandas as pd
import pytest

from h2dlab.explain import outliers
from h2dlab.explain.causes_stall import census_of, expected_hits, run_censuses
from h2dlab.measure import census
from h2dlab.recording import datasets
from tests.explain.test_outliers_synthetic import (
    back_to_back_t_s,
    cause_scores,
    lookalike_counts,
    timed_columns,
)

#: A synthetic census (made up): 40 on-CPU stalls of 20-100 us in one second.
CENSUS = {
    "version": 1,
    "seconds": 1.0,
    "threshold_us": 20.0,
    "reads": 700000,
    "read_ns": 1400.0,
    "stalls": 60,
    "on_cpu": 40,
    "on_cpu_per_s": 40.0,
    "on_cpu_p50_us": 28.0,
    "on_cpu_p90_us": 50.0,
    "on_cpu_max_us": 100.0,
    "off_cpu_max_us": 500.0,
}
#: Injected rows per kind in one synthetic run.
KINDS = {"host_stall": 8, "too_long": 4, "preempted": 4, "faults": 4}


class FakeClocks:
    """A host clock that advances ``step_ns`` per read, with stalls at given reads: each
    ``(read, ns, on_cpu)`` adds ``ns`` to the host clock and, if ``on_cpu``, to the CPU clock."""

    def __init__(self, stalls, step_ns=1000):
        self.t = self.c = 0
        self.n = 0
        self.step = step_ns
        self.stalls = {r: (ns, on) for r, ns, on in stalls}

    def clock(self):
        self.n += 1
        ns, on = self.stalls.get(self.n, (0, False))
        self.t += self.step + ns
        self.c += self.step + (ns if on else 0)
        return self.t

    def cpu(self):
        return self.c


def test_census_counts_stalls_on_and_off_the_cpu_with_fake_clocks():
    fake = FakeClocks([(10, 25_000, True), (20, 60_000, True), (30, 19_000, True), (40, 300_000, False)])
    got = census.census(0.001, clock_ns=fake.clock, cpu_ns=fake.cpu)
    assert got["stalls"] == 3  # the 19 us gap (20 us with the step) is not over 20 us
    assert got["on_cpu"] == 2
    assert got["on_cpu_max_us"] == pytest.approx(61.0)
    assert got["on_cpu_p50_us"] in (pytest.approx(26.0), pytest.approx(61.0))
    assert got["off_cpu_max_us"] == pytest.approx(301.0)
    assert got["seconds"] == pytest.approx(0.001, abs=2e-6)
    assert got["on_cpu_per_s"] == pytest.approx(2 / got["seconds"])
    assert json.loads(json.dumps(got)) == got  # JSON-ready for env.json


def test_a_census_without_stalls_has_no_sizes():
    fake = FakeClocks([])
    got = census.census(0.0005, clock_ns=fake.clock, cpu_ns=fake.cpu)
    assert (got["stalls"], got["on_cpu"], got["on_cpu_max_us"], got["on_cpu_p50_us"]) == (0, 0, None, None)
    assert got["read_ns"] == pytest.approx(1000.0)


@pytest.mark.parametrize(
    ("raw", "seconds"), [("", 1.0), ("0", 0.0), ("0.25", 0.25), (" 2 ", 2.0), ("60", 60.0)]
)
def test_census_seconds_reads_the_environment(monkeypatch, raw, seconds):
    monkeypatch.setenv("H2DLAB_CENSUS_S", raw)
    assert census.census_seconds() == seconds


@pytest.mark.parametrize("raw", ["x", "-1", "nan", "inf", "1e9", "60.0001"])
def test_census_seconds_warns_of_a_value_it_cannot_take(monkeypatch, raw):
    monkeypatch.setenv("H2DLAB_CENSUS_S", raw)
    with pytest.warns(
        UserWarning, match=r"H2DLAB_CENSUS_S=.* is not 0 \(off\) to 60 seconds: the stall census spins 1 s"
    ):
        assert census.census_seconds() == 1.0


@pytest.mark.parametrize(
    "kw", [{"seconds": float("nan")}, {"seconds": float("inf")}, {"seconds": "1"}, {"seconds": 61},
           {"seconds": 0.1, "threshold_us": -5}, {"seconds": 0.1, "threshold_us": 0}, {"seconds": 0.1, "threshold_us": "20"}],
)  # fmt: skip
def test_census_refuses_what_it_cannot_spin(kw):
    with pytest.raises(ValueError, match="census: "):
        census.census(**kw)


@pytest.mark.parametrize(
    "env",
    [None, {}, {"stall_census": "x"}, {"stall_census": {**CENSUS, "on_cpu": "7"}},
     {"stall_census": {k: v for k, v in CENSUS.items() if k != "on_cpu_max_us"}},
     {"stall_census": {**CENSUS, "seconds": float("nan")}}, {"stall_census": {**CENSUS, "on_cpu": True}},
     {"stall_census": {**CENSUS, "seconds": 0}}, {"stall_census": {**CENSUS, "seconds": 0.04, "on_cpu_per_s": 1000.0}},
     {"stall_census": {**CENSUS, "on_cpu": 0.4}}, {"stall_census": {**CENSUS, "threshold_us": 200.0}},
     {"stall_census": {**CENSUS, "on_cpu_max_us": 0}}, {"stall_census": {**CENSUS, "on_cpu_per_s": 0}},
     {"stall_census": {**CENSUS, "on_cpu_per_s": 1e6}}, {"stall_census": {**CENSUS, "on_cpu_per_s": None}},
     {"stall_census": {**CENSUS, "on_cpu_max_us": None}}, {"stall_census": {**CENSUS, "on_cpu_p50_us": float("nan")}},
     {"stall_census": {**CENSUS, "on_cpu_p50_us": True}}, {"stall_census": {**CENSUS, "on_cpu_p50_us": 500.0}},
     {"stall_census": {**CENSUS, "on_cpu": 10**400}}, {"stall_census": {**CENSUS, "on_cpu_max_us": 10**400}},
     {"stall_census": {**CENSUS, "on_cpu": 60000, "on_cpu_per_s": 60000.0}}, {"stall_census": [1, 2]}],
)  # fmt: skip
def test_census_of_refuses_what_is_no_census(env):
    assert census_of(env) is None


def test_census_of_reads_numpy_numbers_and_an_empty_census():
    got = census_of({"stall_census": {**CENSUS, "on_cpu": np.int64(40), "on_cpu_max_us": np.float64(100.0)}})
    assert got["on_cpu"] == 40 and isinstance(got["on_cpu"], int) and got["on_cpu_max_us"] == 100.0
    none = {**CENSUS, "on_cpu": 0, "on_cpu_per_s": 0.0, "on_cpu_p50_us": None, "on_cpu_max_us": None}
    assert census_of({"stall_census": none})["on_cpu"] == 0


def test_a_damaged_census_in_env_json_is_warned_of_and_read_as_none():
    df, _ = stall_run(3, with_census=False)
    df.attrs["envs"] = {df["run_id"].iloc[0]: {"stall_census": {**CENSUS, "on_cpu_max_us": None}}}
    with pytest.warns(
        UserWarning, match="stall_census is no census .*on_cpu_max_us None.*: host_stall is off for it"
    ):
        e = outliers.explain(df)
    assert not (e["cause"] == "host_stall").any()


@pytest.mark.parametrize(
    ("by_run", "error", "words"),
    [([1], TypeError, "must be a mapping"), ({"r": 5}, TypeError, r"censuses\['r'\] is no stall census: a int"),
     ({"r": "x"}, TypeError, "a str, not a mapping"),
     ({"r": {**CENSUS, "on_cpu": "13"}}, ValueError, r"censuses\['r'\] is no stall census: on_cpu is '13'")],
)  # fmt: skip
def test_explain_refuses_censuses_that_are_none(by_run, error, words):
    df, _ = stall_run(4, with_census=False)
    with pytest.raises(error, match=words):
        outliers.explain(df, censuses=by_run)


def test_ruled_out_reads_the_censuses_explain_was_given():
    df, kind = stall_run(5, with_census=False)
    e = outliers.explain(df, censuses={df["run_id"].iloc[0]: dict(CENSUS)})
    table = outliers.ruled_out(e)
    assert "stall census" in table.columns and len(table)
    assert table["stall census"].str.contains("counted 40 stalls").all()


def test_one_stall_is_one_stall():
    df, _ = stall_run(6, with_census=False)
    one = {**CENSUS, "on_cpu": 1, "on_cpu_per_s": 1.0, "on_cpu_p50_us": 100.0}
    e = outliers.explain(df, censuses={df["run_id"].iloc[0]: one})
    said = e.loc[e["cause"].isin(["host_stall", "unexplained"]) & e["is_outlier"], "evidence"]
    assert len(said) and said.str.contains("counted 1 stall of 20 us").all()


def test_expected_hits_is_the_rate_times_the_time_copying():
    assert expected_hits(CENSUS, 0.5) == pytest.approx(20.0)
    assert np.isnan(expected_hits({**CENSUS, "on_cpu_per_s": None}, 0.5))


def stall_run(seed: int, with_census: bool = True):
    """A synthetic schema-3 run (made-up numbers): one host-bound strategy of small copies,
    latency = 40 us + bytes / 10 GB/s, 2 % lognormal noise, the timing thread on its CPU
    97-101 % of wall, no wait, no switch, no fault. Injected: ``host_stall`` (25-90 us more,
    still on its CPU), ``too_long`` (200-600 us more, on its CPU: longer than any census
    stall), ``preempted`` (25-90 us more spent waiting to run) and ``faults`` (25-90 us
    more with 40-80 page faults)."""
    rng = np.random.default_rng(seed)
    sizes = 2 ** np.arange(10, 17)
    size = rng.permutation(np.repeat(sizes, 12))
    n = len(size)
    strategy = np.full(n, "pageable", dtype=object)
    ms = (0.040 + size / 10e6) * np.exp(rng.normal(0, 0.02, n))
    cpu = ms * rng.uniform(0.97, 1.01, n)
    delay = np.zeros(n)
    faults = np.zeros(n)
    kind = np.full(n, "", dtype=object)
    take = iter(rng.permutation(np.arange(1, n)))
    for k, count in KINDS.items():
        for _ in range(count):
            i = next(take)
            kind[i] = k
            extra = rng.uniform(0.200, 0.600) if k == "too_long" else rng.uniform(0.025, 0.090)
            if k == "preempted":
                delay[i] = extra
            else:
                cpu[i] += extra
            if k == "faults":
                faults[i] = rng.integers(40, 80)
            ms[i] += extra
    run = f"synthetic-stall-{seed}"
    df = pd.DataFrame(
        {
            **timed_columns(run, strategy, size, back_to_back_t_s(ms, seed), ms, ms * 0.8),
            "direction": "h2d",
            "n_tensors": 1,
            "minflt": faults,
            "majflt": 0.0,
            "cpu_ms": cpu,
            "gc_count": 0.0,
            "run_delay_ms": delay,
            "nivcsw": np.where(delay > 0, 1.0, 0.0),
            "nvcsw": 0.0,
        }
    )
    df = datasets.validate(df)
    if with_census:
        df.attrs["envs"] = {run: {"stall_census": dict(CENSUS)}}
    return df, kind


@pytest.fixture(scope="module")
def explained_stalls():
    return [(outliers.explain(df), kind) for df, kind in (stall_run(seed) for seed in range(10))]


def test_host_stall_precision_recall_synthetic(explained_stalls):
    tp, fp, fn, precision, recall = cause_scores(explained_stalls, "host_stall")
    assert tp >= 70, (tp, fp, fn)
    assert precision >= 0.9 and recall >= 0.9, (tp, fp, fn)


@pytest.mark.parametrize(
    ("lookalike", "cause"),
    [("too_long", "unexplained"), ("preempted", "host_preempted"), ("faults", "page_faults")],
)
def test_lookalikes_keep_their_own_story(explained_stalls, lookalike, cause):
    injected, flagged, labelled = lookalike_counts(explained_stalls, lookalike, cause)
    assert flagged >= 0.9 * injected
    assert labelled >= 0.9 * flagged, (injected, flagged, labelled)
    _, _, stall = lookalike_counts(explained_stalls, lookalike, "host_stall")
    assert stall == 0


def test_host_stall_evidence_quotes_the_census_and_the_copy(explained_stalls):
    e, kind = explained_stalls[0]
    row = e[(e["cause"] == "host_stall")].iloc[0]
    extra_us = (row["event_ms"] - row["expected_ms"]) * 1e3
    share = row["cpu_ms"] / row["wall_ms"]
    text = row["evidence"]
    assert f"the extra {extra_us:.0f} us" in text
    assert "counted 40 stalls of 20 us or more" in text and "the longest 100 us" in text
    assert f"on its CPU for {'all' if share >= 1 else f'{share:.0%}'} of the copy" in text
    hits = 40.0 * e.loc[~e["warmup"], "wall_ms"].sum() / 1e3
    assert f"about {hits:.1f} such stalls fall within the time the run spent copying" in text
    assert "within the sizes of the stalls a thread of this run's process met" in text


def test_a_duplex_copys_two_rows_count_its_time_once():
    from h2dlab.explain.causes_stall import run_copy_seconds

    # As the duplex recorder writes them: each direction its own order, one start time.
    df = pd.DataFrame(
        {
            "run_id": ["a"] * 5 + ["b"],
            "order": [0, 1, 2, 3, 4, 0],
            "t_s": [0.1, 0.1, 0.2, 0.2, 0.3, 0.1],
            "wall_ms": [2.0, 2.0, 3.0, 3.0, 1.0, 5.0],
        }
    )
    got = run_copy_seconds(df, pd.Series([True] * 6))
    assert got.tolist() == pytest.approx([0.006] * 5 + [0.005])
    # Without start times each row is a copy of its own.
    got = run_copy_seconds(df.drop(columns="t_s"), pd.Series([True] * 6))
    assert got.tolist() == pytest.approx([0.011] * 5 + [0.005])


def test_the_bundled_duplex_run_counts_each_copy_once():
    from h2dlab.explain.causes_stall import run_copy_seconds
    from h2dlab.explain.rows import timed

    df = datasets.load(datasets.DATA_DIR / "h200" / "bidir")
    ok = df.index.isin(timed(df).index)
    once = df[ok].drop_duplicates(["run_id", "t_s"])
    assert (df[ok].groupby(["run_id", "t_s"]).size() <= 2).all()
    assert run_copy_seconds(df, pd.Series(ok, index=df.index)).iloc[0] == pytest.approx(
        once.wall_ms.sum() / 1e3
    )
    assert once.wall_ms.sum() < 0.8 * df[ok].wall_ms.sum()  # the duplex rows really come in pairs


def test_too_long_says_the_census_ruled_it_out(explained_stalls):
    e, kind = explained_stalls[0]
    rows = e[(kind == "too_long") & (e["cause"] == "unexplained")]
    assert len(rows)
    for _, row in rows.iterrows():
        extra_us = (row["event_ms"] - row["expected_ms"]) * 1e3
        assert f"the extra {extra_us:.0f} us is longer than the longest stall it saw" in row["evidence"]


def test_without_a_census_no_copy_is_a_host_stall():
    df, kind = stall_run(0, with_census=False)
    e = outliers.explain(df)
    assert not (e["cause"] == "host_stall").any()
    assert (
        e.loc[kind == "host_stall", "cause"][e.loc[kind == "host_stall", "is_outlier"]] == "unexplained"
    ).all()
    assert not e["evidence"].str.contains("stall census").any()


def test_a_census_with_no_on_cpu_stall_names_none_and_says_so():
    df, kind = stall_run(1)
    df.attrs["envs"] = {
        df["run_id"].iloc[0]: {"stall_census": {**CENSUS, "on_cpu": 0, "on_cpu_max_us": None}}
    }
    e = outliers.explain(df)
    assert not (e["cause"] == "host_stall").any()
    un = e[(e["cause"] == "unexplained")]
    assert len(un) and un["evidence"].str.contains("counted no stall of 20 us or more").all()


def test_run_censuses_reads_one_tables_env_or_each_runs():
    df, _ = stall_run(2, with_census=False)
    df.attrs["env"] = {"stall_census": dict(CENSUS)}
    assert run_censuses(df).map(lambda c: c["on_cpu"]).eq(40).all()
    df.attrs["envs"] = {df["run_id"].iloc[0]: {}}
    assert run_censuses(df).isna().all()
