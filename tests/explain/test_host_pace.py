"""Stretches in which the host ran slow, told by the kit's own loop (``host_pace``), on
synthetic (made-up, not measured) interleaved runs with a slow stretch injected at known
rows, and the plans that must not look like one."""

import numpy as np
import pandas as pd
import pytest

from h2dlab.explain import host_pace, outliers
from h2dlab.explain.causes import group_columns
from h2dlab.explain.causes_wake import idle_gap_ms
from h2dlab.explain.model import value_ms
from h2dlab.recording import datasets
from tests.explain.test_outliers_synthetic import cause_scores, timed_columns

PACE = "the host itself ran slow"
STRATEGIES = ("pageable", "pinned_reuse", "pageable_non_blocking", "staged")
SIZES = 2 ** np.arange(10, 20, 2)  # 1 KiB .. 256 KiB


def interleaved_run(
    seed: int, *, reps: int = 8, slow=(0.35, 0.65), gap_x=1.6, copy_x=1.3, spikes=(8, 2), noise=0.15
):
    """A synthetic interleaved run (made-up numbers): every (strategy, size) cell once per
    round, rounds shuffled, ``reps`` rounds. A copy takes 30 us + bytes / 10 GB/s, ``noise`` (15 %)
    lognormal noise (enough that the change-point search alone misses the stretch); the loop's gap before it 2 ms + bytes / 1 GB/s (the next cell's
    preparation), 5 % noise. In the ``slow`` share of the run's copies (by time) the gaps
    are ``gap_x`` and the copies ``copy_x`` times longer; ``spikes`` (inside, outside) copies
    are 3-4x slow. Returns the table and per row ``"in"``/``"out"`` for a spike, else ""."""
    rng = np.random.default_rng(seed)
    cells = [(s, int(z)) for s in STRATEGIES for z in SIZES]
    order = [cells[i] for _ in range(reps) for i in rng.permutation(len(cells))]
    n = len(order)
    strategy = np.array([c[0] for c in order], dtype=object)
    size = np.array([c[1] for c in order])
    ms = (0.030 + size / 10e6) * np.exp(rng.normal(0, noise, n))
    gap = (2.0 + size / 1e6) * np.exp(rng.normal(0, 0.05, n))
    a, b = int(slow[0] * n), int(slow[1] * n)
    gap[a:b] *= gap_x
    ms[a:b] *= copy_x
    kind = np.full(n, "", dtype=object)
    for where, count, lo, hi in (("in", spikes[0], a, b), ("out", spikes[1], 0, a)):
        for i in rng.choice(np.arange(max(lo, 1), hi), count, replace=False):
            kind[i] = where
            ms[i] *= rng.uniform(3, 4)
    t = np.cumsum(np.concatenate([[0.0], ms[:-1] + gap[1:]])) / 1000
    df = pd.DataFrame(
        {
            **timed_columns(f"synthetic-pace-{seed}", strategy, size, t, ms * 1.05, ms),
            "direction": "h2d",
            "n_tensors": 1,
        }
    )
    return datasets.validate(df), kind


def stretches(df):
    e = outliers.detect(df)
    return host_pace.slow_stretches(e, value_ms(e) / e["expected_ms"], e["is_outlier"], group_columns(e))


@pytest.fixture(scope="module")
def explained_runs():
    return [(outliers.explain(df), kind) for df, kind in (interleaved_run(seed) for seed in range(10))]


def test_the_injected_stretch_is_found_where_it_was_put():
    df, _ = interleaved_run(0)
    found = stretches(df)
    assert len(found) == 1
    s = found[0]
    t = df.sort_values("t_s")["t_s"].to_numpy()
    n = len(t)
    assert abs(s.start_s - t[int(0.35 * n)]) < 0.15 * (t[-1] - t[0])
    assert abs(s.end_s - t[int(0.65 * n) - 1]) < 0.15 * (t[-1] - t[0])
    assert s.gap == pytest.approx(1.6, rel=0.15)
    assert s.ratio / s.ratio_elsewhere == pytest.approx(1.3, rel=0.1)
    assert s.compared == len(s.rows)  # every cell has copies outside too


def test_pace_episode_precision_recall_synthetic(explained_runs):
    scored = [(e.assign(cause=np.where(e["evidence"].str.contains(PACE), "pace", "")), np.where(kind == "in", "pace", ""))
              for e, kind in explained_runs]  # fmt: skip
    tp, fp, fn, precision, recall = cause_scores(scored, "pace")
    assert tp >= 70, (tp, fp, fn)
    assert precision >= 0.9 and recall >= 0.9, (tp, fp, fn)


def test_spikes_outside_the_stretch_keep_no_pace_story(explained_runs):
    out = pd.concat([e[kind == "out"] for e, kind in explained_runs])
    out = out[out["is_outlier"]]
    assert len(out) >= 10  # of 20 injected; the rest hid in the noise
    assert not out["evidence"].str.contains(PACE).any()
    assert (out["cause"] == "unexplained").all()


def test_the_evidence_recomputes_from_the_table(explained_runs):
    e, _ = explained_runs[0]
    row = e[e["evidence"].str.contains(PACE)].iloc[0]
    (s,) = stretches(e.drop(columns=["episode", "cause", "evidence"]))
    rows = e.loc[list(s.rows)]
    rest = e[~e.index.isin(s.rows) & ~e["warmup"]]
    ratio = value_ms(e) / e["expected_ms"]
    gaps = idle_gap_ms(e)
    usual = gaps[rest.index].groupby([rest["strategy"], rest["size_bytes"]]).median()
    rel = (
        gaps[rows.index]
        / usual.reindex(pd.MultiIndex.from_frame(rows[["strategy", "size_bytes"]])).to_numpy()
    )
    text = row["evidence"]
    assert f"a median {np.median(rel):.2f}x as long between copies" in text
    assert f"took a median {ratio[rows.index].median():.2f}x their expected time" in text
    assert f"against {ratio[rest.index].median():.2f}x elsewhere" in text
    n_in, n_out = int(rows["is_outlier"].sum()), int(rest["is_outlier"].sum())
    assert f"one of {n_in} slow copies among {len(rows)} in a stretch" in text
    assert f"{len(rows)} of its {len(rows) + len(rest)} timed copies" in text
    assert f"{n_in / len(rows):.1%} of them were flagged against {n_out / len(rest):.1%} of the rest" in text


def test_gaps_that_grow_with_the_plans_sizes_are_no_slow_host():
    """Ascending sizes, each cell's reps in a row, its preparation before the first: the
    loop's gaps grow along the run, but no cell has copies elsewhere that ran faster."""
    rng = np.random.default_rng(3)
    size = np.repeat(2 ** np.arange(10, 30), 10)
    strategy = np.full(len(size), "pageable", dtype=object)
    ms = (0.03 + size / 10e6) * np.exp(rng.normal(0, 0.04, len(size)))
    gap = np.where(np.arange(len(size)) % 10 == 0, 2.0 + size / 1e6, 2.0) * (1 + size / 2**29)
    ms[rng.choice(len(size), 6, replace=False)] *= 3
    t = np.cumsum(np.concatenate([[0.0], ms[:-1] + gap[1:]])) / 1000
    df = datasets.validate(pd.DataFrame({**timed_columns("ascending", strategy, size, t, ms, ms)}))
    assert stretches(df) == []


@pytest.mark.parametrize(("gap_x", "copy_x"), [(1.6, 1.0), (1.0, 1.3), (1.15, 1.3)])
def test_no_stretch_unless_the_loop_and_the_copies_both_slowed(gap_x, copy_x):
    df, _ = interleaved_run(1, gap_x=gap_x, copy_x=copy_x)
    assert stretches(df) == []


def test_no_stretch_where_its_copies_were_flagged_no_more_often():
    df, _ = interleaved_run(2, spikes=(2, 8), noise=0.04)
    assert stretches(df) == []


def test_a_table_without_start_times_has_no_stretch():
    df, _ = interleaved_run(4)
    assert stretches(df.assign(t_s=np.nan)) == []


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [(lambda df, r, f: host_pace.slow_stretches([1, 2], r, f), TypeError, "DataFrame"),
     (lambda df, r, f: host_pace.slow_stretches(df, list(r), f), TypeError, "ratio must be a pandas Series"),
     (lambda df, r, f: host_pace.slow_stretches(df, r, "x"), TypeError, "flagged must be a pandas Series"),
     (lambda df, r, f: host_pace.slow_stretches(df, r, f, "strategy"), TypeError, "curves must be a list"),
     (lambda df, r, f: host_pace.slow_stretches(df, r, f, ["nope"]), ValueError, "nope"),
     (lambda df, r, f: host_pace.slow_stretches(df.drop(columns="warmup"), r, f), ValueError, "warmup")],
)  # fmt: skip
def test_slow_stretches_refuses_what_it_cannot_read(call, error, words):
    df, _ = interleaved_run(5)
    e = outliers.detect(df)
    with pytest.raises(error, match=words):
        call(e, value_ms(e) / e["expected_ms"], e["is_outlier"])
