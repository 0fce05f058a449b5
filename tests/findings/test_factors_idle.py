"""factors.idle_wake on a synthetic table (three runs measured with --pause 0, 3 and 10 ms;
every number below is made up for the test and named synthetic)."""

import numpy as np
import pandas as pd
import pytest

from h2dlab.explain.idle import SLOW_RATIO, idle_wake, pauses
from h2dlab.findings import factors


def synthetic(extra_small=(0.0, 0.02, 0.05), extra_large=(0.0, 0.02, 0.05), n=20):
    rows, envs = [], {}
    for i, pause in enumerate((0.0, 3.0, 10.0)):
        rid = f"synthetic-{i}"
        envs[rid] = {"spec": {"pause_ms": pause}}
        for strategy, base_small, base_large in (("pinned_reuse", 0.010, 0.030), ("pageable", 0.020, 0.150)):
            for size, base, extra in (
                (4096, base_small, extra_small[i]),
                (2**20, base_large, extra_large[i]),
            ):
                for k in range(n):
                    # half the copies pay the extra, half do not: a wake-up is likely, not certain
                    v = base + (extra if k % 2 == 0 else 0.0) + 0.0001 * k
                    rows.append(
                        dict(
                            run_id=rid,
                            strategy=strategy,
                            size_bytes=size,
                            warmup=False,
                            error="",
                            event_ms=v,
                            wall_ms=v + 0.005,
                        )
                    )
    df = pd.DataFrame(rows)
    df.attrs["envs"] = envs
    return df


def test_pauses_read_from_each_runs_spec():
    df = synthetic()
    df.attrs["envs"]["synthetic-1"] = {"spec": {}}
    p = pauses(df)
    assert set(p[df.run_id == "synthetic-0"]) == {0.0}
    assert p[df.run_id == "synthetic-1"].isna().all()
    assert set(p[df.run_id == "synthetic-2"]) == {10.0}


def test_cells_recomputed_from_the_synthetic_table():
    df = synthetic()
    f = idle_wake(df)
    cells = f["cells"].set_index(["strategy", "size_bytes", "pause_ms"])
    for (strategy, size, pause), c in cells.iterrows():
        v = df[
            (df.strategy == strategy)
            & (df.size_bytes == size)
            & (df.run_id == f"synthetic-{[0.0, 3.0, 10.0].index(pause)}")
        ].event_ms
        base = df[(df.strategy == strategy) & (df.size_bytes == size) & (df.run_id == "synthetic-0")].event_ms
        assert c.median_ms == pytest.approx(v.median())
        assert c.p90_ms == pytest.approx(v.quantile(0.9))
        assert c.n == len(v) == 20
        assert c.ratio == pytest.approx(v.median() / base.median())
        assert c.slow_share == pytest.approx((v >= SLOW_RATIO * base.median()).mean())
    assert f["pauses"] == [0.0, 3.0, 10.0]
    # over the cells after the longest pause (10 ms), the largest p90 less the same cell's 0-ms median
    want = max(
        df[(df.strategy == k) & (df.size_bytes == z) & (df.run_id == "synthetic-2")].event_ms.quantile(0.9)
        - df[(df.strategy == k) & (df.size_bytes == z) & (df.run_id == "synthetic-0")].event_ms.median()
        for k in ("pageable", "pinned_reuse")
        for z in (4096, 2**20)
    )
    assert f["extra_p90_ms"] == pytest.approx(want)
    assert f"every cell's 90th percentile was at most {want * 1e3:.0f} µs above" in f.verdict
    assert f["extra_p90_ms"] >= 0.05 - 0.001


def test_verdict_quotes_the_numbers_and_holds():
    f = factors.idle_wake(synthetic())
    assert f.holds
    assert "A 4 KiB `pinned_reuse` copy took a median 11 µs after 0 ms" in f.verdict
    assert "after 10 ms" in f.verdict and "after 3 ms" in f.verdict
    assert "at least 1.5x the median after 0 ms" in f.verdict
    # synthetic: the same extra on a longer copy is a smaller factor
    assert f["smaller_hurt"] and "it weighs most on the shortest copies" in f.verdict
    # synthetic: the median gains half the injected extra at 10 ms (half the copies pay it), 25 us both sizes
    assert f["added_ms"] == pytest.approx((0.025, 0.025), abs=0.0011)
    assert "The longest pause added 25 µs to 25 µs to the medians" in f.verdict


def test_does_not_hold_when_a_pause_costs_nothing():
    f = idle_wake(synthetic(extra_small=(0, 0, 0), extra_large=(0, 0, 0)))
    assert not f.holds and not f["smaller_hurt"] and "weighs most" not in f.verdict
    assert f["cells"]["ratio"].between(0.99, 1.01).all()


def test_needs_two_pauses():
    df = synthetic()
    df = df[df.run_id == "synthetic-0"]
    df.attrs["envs"] = {"synthetic-0": {"spec": {"pause_ms": 0.0}}}
    f = idle_wake(df)  # a Finding that says what is missing, not an error (a notebook shows it)
    assert not f.holds and f["cells"].empty
    assert f.verdict.startswith(
        "The idle runs hold one pause (0 ms): at least two pauses with timed copies are needed"
    )


def test_idle_pause_figure_draws_the_cells():
    import matplotlib

    matplotlib.use("Agg")
    from h2dlab.show import plots

    df = synthetic()
    ax = plots.idle_pause(df, name="synthetic")
    cells = idle_wake(df)["cells"]
    solid = {ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")}
    assert set(solid) == {"pageable 4 KiB", "pageable 1 MiB", "pinned_reuse 4 KiB", "pinned_reuse 1 MiB"}
    c = cells[(cells.strategy == "pinned_reuse") & (cells.size_bytes == 4096)].sort_values("pause_ms")
    line = solid["pinned_reuse 4 KiB"]
    assert list(line.get_xdata()) == [0.0, 3.0, 10.0]
    assert list(line.get_ydata()) == pytest.approx(list(c.median_ms * 1e3))
    labels = sorted(t.get_text() for t in ax.texts if t.get_text().endswith("x"))
    assert labels == sorted(f"{r:.2f}x" for r in cells[cells.pause_ms == 10.0].ratio)


# --- wake_calibration (synthetic tables only; the recorded idle runs are not bundled yet) ---


def test_wake_calibration_of_a_synthetic_table():
    """A 2 us extra after 3 ms slows no copy 1.5x; 50 us after 10 ms slows the half that pay
    it: the GPU needs waking after 10 ms, at most the largest p90 less the 0-ms median."""
    from h2dlab.explain.idle import WAKE_SHARE, wake_calibration

    cal = wake_calibration(synthetic(extra_small=(0.0, 0.002, 0.05)))
    assert WAKE_SHARE == 0.2
    assert cal.idle_ms == 10.0 and cal.pauses == (0.0, 3.0, 10.0)
    assert cal.shares == pytest.approx((0.0, 0.0, 0.5))
    # every cell after 10 ms: +0.05 ms on the even half, p90 at k=14..16, median at 0 ms at k=9.5
    assert cal.extra_ms == pytest.approx((0.05 + 0.00142) - 0.00095)
    assert cal.source == "idle runs of a table: pauses 0, 3, 10 ms"
    assert (cal.slow_ratio, cal.min_share) == (SLOW_RATIO, WAKE_SHARE)
    assert cal.share_at(10.0) == 0.5 and np.isnan(cal.share_at(5.0))
    # the default extras slow half the small copies already after 3 ms
    df = synthetic()
    df.attrs["dataset"] = "synthetic/idle"
    early = wake_calibration(df)
    assert early.idle_ms == 3.0 and early.shares == pytest.approx((0.0, 0.5, 0.5))
    assert early.source == "idle runs of synthetic/idle: pauses 0, 3, 10 ms"
    assert wake_calibration(df, source="synthetic runs").source == "synthetic runs"


def test_wake_calibration_needs_every_strategys_smallest_copies():
    """Only pinned_reuse's 4 KiB copies slowed after 3 ms (synthetic): that pause does not
    qualify; a strategy missing a pause's runs is left out (the others decide)."""
    from h2dlab.explain.idle import wake_calibration

    df = synthetic()
    calm = (df.strategy == "pageable") & (df.size_bytes == 4096) & (df.run_id == "synthetic-1")
    df.loc[calm, "event_ms"] = 0.020 + 0.0001 * np.arange(20)
    cal = wake_calibration(df)
    assert cal.idle_ms == 10.0 and cal.shares == pytest.approx((0.0, 0.0, 0.5))
    gone = df[~((df.strategy == "pageable") & (df.run_id == "synthetic-2"))]
    gone.attrs = df.attrs
    cal = wake_calibration(gone)  # pinned_reuse alone: its 4 KiB copies slowed after 3 ms already
    assert cal.idle_ms == 3.0 and cal.shares == pytest.approx((0.0, 0.5, 0.5))


def test_wake_calibration_without_a_wake_up_cost():
    from h2dlab.explain.idle import wake_calibration

    cal = wake_calibration(synthetic(extra_small=(0.0, 0.002, 0.004)))
    assert cal.idle_ms is None and cal.extra_ms is None and cal.shares == (0.0, 0.0, 0.0)
    one = synthetic()
    one = one[one.run_id == "synthetic-0"]
    one.attrs["envs"] = {"synthetic-0": {"spec": {"pause_ms": 0.0}}}
    with pytest.raises(ValueError, match="^wake_calibration: The idle runs hold one pause"):
        wake_calibration(one)


def test_each_pauses_gap_since_the_previous_copy_synthetic():
    """With start times (synthetic: each copy starts 3 ms of loop plus its run's pause after
    the previous one started), idle_wake gives each pause's median gap since the previous
    copy ended, and says so; without them it says nothing of gaps."""
    df = synthetic()
    pause_of = {"synthetic-0": 0.0, "synthetic-1": 3.0, "synthetic-2": 10.0}
    t = np.zeros(len(df))
    for rid, g in df.groupby("run_id"):
        t[g.index] = np.arange(len(g)) * (3.0 + pause_of[rid]) / 1000
    f = idle_wake(df.assign(t_s=t))
    want = {
        p: float(np.median(3.0 + p - df[df.run_id == r].wall_ms.to_numpy()[:-1])) for r, p in pause_of.items()
    }
    assert f["gaps_ms"] == pytest.approx(want)
    assert 2.9 < want[0.0] < 3.0 and 12.9 < want[10.0] < 13.0
    assert (
        f"a copy began a median {want[0.0]:.2f}, {want[3.0]:.2f} and {want[10.0]:.2f} ms after the previous "
        "one ended, for pauses of 0, 3 and 10 ms." in f.verdict
    )
    assert "part of any difference between pauses is the spread between processes" in f.verdict
    plain = idle_wake(df)
    assert plain["gaps_ms"] == {} and "after the previous one ended" not in plain.verdict


def test_a_pause_after_which_every_cell_ran_faster_is_named_as_the_spread():
    """data/h200's idle runs: where after 1 ms every cell ran faster than after 0 ms (reader,
    session 29; the recording at b95e09d), the verdict says how far processes differ; where not
    (the one at 66f20f2: after 1 ms some cells ran slower), it does not say so. The 0 ms copies'
    own slow share is quoted either way."""
    from h2dlab.recording import sources

    f = factors.idle_wake(sources.load("h200:idle"))
    c = f["cells"]
    one = c[c.pause_ms == 1.0]["ratio"]
    said = f"fter 1 ms every cell ran faster than after 0 ms ({one.min():.2f}x to {one.max():.2f}x)"
    assert (said in f.verdict) == bool((one < 1).all())  # "After ..." opens its own sentence
    if (one < 1).all():
        longest = (c[c.pause_ms == c.pause_ms.max()]["ratio"] - 1).abs()
        assert (
            longest <= 1 - one.min()
        ).any() and "as large as some of the longest pause's effects" in f.verdict
    else:
        assert "every cell ran faster" not in f.verdict
    small = c[(c.strategy == "pageable") & (c.size_bytes == 4096)].set_index("pause_ms")["slow_share"]
    shares = ", ".join(f"{x:.0%}" for x in small)
    assert f"Copies at least 1.5x the median after 0 ms: {shares}." in f.verdict
    big = c[(c.strategy == "pageable") & (c.size_bytes == c.size_bytes.max())].set_index("pause_ms")
    ratio = big["median_ms"].iloc[-1] / big["median_ms"].iloc[0]
    assert "At 1 MiB the longest pause added" in f.verdict and f"median ({ratio:.2f}x)" in f.verdict
