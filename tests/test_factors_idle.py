"""factors.idle_wake on a synthetic table (three runs measured with --pause 0, 3 and 10 ms;
every number below is made up for the test and named synthetic)."""

import numpy as np
import pandas as pd
import pytest

from h2dlab import factors
from h2dlab.factors_idle import SLOW_RATIO, idle_wake, pauses


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
    # the largest p90 after pauses >= 3 ms less the base median: pageable 4 KiB after 10 ms
    base = 0.020 + 0.0001 * np.median(np.arange(20))
    p90 = df[
        (df.strategy == "pageable") & (df.size_bytes == 4096) & (df.run_id == "synthetic-2")
    ].event_ms.quantile(0.9)
    assert f["extra_p90_ms"] == pytest.approx(max(p90 - base, f["extra_p90_ms"]))
    assert f["extra_p90_ms"] >= 0.05 - 0.001


def test_verdict_quotes_the_numbers_and_holds():
    f = factors.idle_wake(synthetic())
    assert f.holds
    assert "a 4 KiB `pinned_reuse` copy took a median 11 µs after 0 ms" in f.verdict
    assert "after 10 ms" in f.verdict and "after 3 ms" in f.verdict
    # synthetic: the same extra on a longer copy is a smaller factor
    assert f["smaller_hurt"] and "weighs on short copies" in f.verdict


def test_does_not_hold_when_a_pause_costs_nothing():
    f = idle_wake(synthetic(extra_small=(0, 0, 0), extra_large=(0, 0, 0)))
    assert not f.holds and not f["smaller_hurt"] and "weighs on short" not in f.verdict
    assert f["cells"]["ratio"].between(0.99, 1.01).all()


def test_needs_two_pauses():
    df = synthetic()
    df = df[df.run_id == "synthetic-0"]
    df.attrs["envs"] = {"synthetic-0": {"spec": {"pause_ms": 0.0}}}
    with pytest.raises(ValueError, match="at least two different pauses"):
        idle_wake(df)


def test_idle_pause_figure_draws_the_cells():
    import matplotlib

    matplotlib.use("Agg")
    from h2dlab import plots

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
