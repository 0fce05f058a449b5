"""Findings and figures for both directions, both at once and many tensors, on
SYNTHETIC tables whose answers are known (the real data comes from the GPU run)."""

import re

import numpy as np
import pandas as pd
import pytest

from h2dlab.findings import transfer as ft
from h2dlab.show import plots

MiB = 2**20


def synthetic(rows):
    """A synthetic table: the given rows plus the columns every reader expects."""
    df = pd.DataFrame(rows)
    n = len(df)
    defaults = {"run_id": "synthetic", "warmup": False, "error": "", "n_tensors": 1, "direction": "h2d"}
    for k, v in defaults.items():
        df[k] = df[k].where(df[k].notna(), v).astype(type(v)) if k in df else v
    if "wall_ms" not in df:
        df["wall_ms"] = df["event_ms"] * 1.02
    if "event_ms" not in df:
        df["event_ms"] = np.nan
    df["order"] = np.arange(n)
    return df


def _ms(size, gbps):
    return size / gbps / 1e6


def synthetic_directions():
    rng = np.random.default_rng(0)
    rows = []
    for d, s, gbps in [("h2d", "pinned_reuse", 50), ("h2d", "pageable", 10),
                       ("d2h", "d2h_pinned_reuse", 45), ("d2h", "d2h_pageable", 5)]:  # fmt: skip
        for size in (MiB, 64 * MiB):
            for rep in range(5):
                j = 1 + 0.01 * rng.standard_normal() if rep else 1.0  # rep 0 exact: the median stays exact
                rows.append(
                    dict(direction=d, strategy=s, size_bytes=size, rep=rep, event_ms=_ms(size, gbps) * j)
                )
    rows.append(dict(direction="h2d", strategy="pinned_reuse", size_bytes=64 * MiB, rep=9, event_ms=1e-3,
                     warmup=True))  # fmt: skip
    return synthetic(rows)


def test_direction_bandwidth_on_synthetic_rows():
    f = ft.direction_bandwidth(synthetic_directions())
    assert f.holds and f["size_bytes"] == 64 * MiB
    assert f["best_h2d"] == "pinned_reuse" and f["best_d2h"] == "d2h_pinned_reuse"
    assert f["h2d_gbps"] == pytest.approx(50, rel=0.01) and f["d2h_over_h2d"] == pytest.approx(0.9, rel=0.02)
    assert "90%" in f.verdict and "64 MiB" in f.verdict
    assert set(f.table.direction) == {"h2d", "d2h"} and (f.table.n == 5).all()  # the warm-up left out


def test_direction_bandwidth_says_when_one_direction_is_missing():
    df = synthetic_directions()
    f = ft.direction_bandwidth(df[df.direction == "h2d"])
    assert not f.holds and "Only one direction" in f.verdict


def synthetic_duplex(both_gbps, alone=(55.0, 55.0), size=64 * MiB, reps=4):
    rows = []
    for rep in range(reps):
        for d, g in zip(("h2d", "d2h"), alone, strict=True):
            rows.append(dict(strategy="alone", direction=d, size_bytes=size, rep=rep, event_ms=_ms(size, g)))
        wall = _ms(size, min(both_gbps)) * 1.05
        for d, g in zip(("h2d", "d2h"), both_gbps, strict=True):
            rows.append(dict(strategy="duplex", direction=d, size_bytes=size, rep=rep, event_ms=_ms(size, g),
                             wall_ms=wall))  # fmt: skip
    return synthetic(rows)


def test_duplex_full_duplex_synthetic():
    f = ft.duplex_summary(synthetic_duplex((50.0, 45.0)))
    # The pair ends when the slower direction (45 GB/s) ends: 2 x size over that time.
    assert f["aggregate_gbps"] == pytest.approx(90.0)
    assert f["ideal_gbps"] == pytest.approx(110.0) and f["of_ideal"] == pytest.approx(90 / 110)
    assert f["duplex_h2d_gbps"] == pytest.approx(50.0) and f["pairs"] == 4
    assert f["of_one_way"] == pytest.approx(90 / 55)
    assert f.holds and "full duplex" in f.verdict and "82%" in f.verdict
    # the two directions' own rates are not parts of the aggregate: no sum that does not add up
    assert (
        "90.0 GB/s together: both copies' bytes over the time until the later ended, median of 4 pairs. "
        "Each on its own clock, host→device moved 50.0 GB/s and device→host 45.0." in f.verdict
    )
    for sentence in re.split(r"(?<=[.:])\s+(?=[A-Z])", f.verdict):  # the style's 40-word bound
        assert len(sentence.split()) <= 40, sentence
    assert not ft.duplex_summary(synthetic_duplex((50.0, 40.0))).holds  # 80 GB/s: under 1.5 x 55


def test_duplex_half_duplex_synthetic():
    f = ft.duplex_summary(synthetic_duplex((27.5, 27.5)))
    assert f["of_one_way"] == pytest.approx(1.0) and not f.holds and "did not add up" in f.verdict
    assert "share the link" not in f.verdict  # a bidir run alone cannot blame the link rather than the host


def test_duplex_without_pairs():
    df = synthetic_duplex((50.0, 50.0))
    f = ft.duplex_summary(df[~((df.strategy == "duplex") & (df.direction == "d2h"))])
    assert not f.holds and "No size has a complete both-ways pair" in f.verdict


METHOD_COST = {"loop_to": (20.0, 10.0), "pinned_flat": (2.0, 20.0), "loop_non_blocking": (8.0, 10.0)}


def synthetic_batch(counts=(1, 16, 256), totals=(MiB, 16 * MiB)):
    rows = []
    for m, (us, gbps) in METHOD_COST.items():
        for total in totals:
            for n in counts:
                for rep in range(3):
                    ms = us * n / 1e3 + _ms(total, gbps)
                    rows.append(dict(strategy=m, size_bytes=total, n_tensors=n, rep=rep, wall_ms=ms,
                                     event_ms=ms * 0.5))  # fmt: skip
    return synthetic(rows)


def test_batch_overhead_recovers_the_per_tensor_cost():
    f = ft.batch_overhead(synthetic_batch())
    for m, (us, _) in METHOD_COST.items():
        assert f[m] == pytest.approx(us)  # from the host clock, not the events
    t = f.table
    assert t.loc[t.n_tensors == 1, "per_tensor_us"].isna().all()
    row = t[(t.strategy == "loop_to") & (t.n_tensors == 16) & (t.size_bytes == MiB)].iloc[0]
    assert row.us_per_tensor == pytest.approx((0.32 + _ms(MiB, 10)) * 1e3 / 16)
    assert f.holds and f.verdict.index("pinned_flat") < f.verdict.index("loop_to")


def test_best_batch_method_and_its_speedup():
    f = ft.best_batch_method(synthetic_batch())
    t = f.table.set_index(["size_bytes", "n_tensors"])
    assert (t.best == "pinned_flat").all()
    want = (20 * 256 / 1e3 + _ms(16 * MiB, 10)) / (2 * 256 / 1e3 + _ms(16 * MiB, 20))
    assert f["speedup"] == pytest.approx(want) and f["n_tensors"] == 256 and f.holds
    assert "256 tensors totalling 16 MiB" in f.verdict and "pinned_flat" in f.verdict


def test_best_batch_method_when_the_loop_wins():
    df = synthetic_batch()
    f = ft.best_batch_method(df[df.strategy == "loop_to"])
    assert not f.holds and (f.table.best == "loop_to").all()


# --- figures: the artists drawn -------------------------------------------------------------


def _line_labels(ax):
    return {t.get_text() for t in ax.get_legend().get_texts()}


def test_directions_figure():
    ax = plots.directions(synthetic_directions())
    labels = _line_labels(ax)
    assert {"pinned_reuse", "d2h_pageable", "host→device", "device→host"} <= labels
    assert "device→host" in ax.get_title() and "GB/s" in ax.get_ylabel()
    styles = {ln.get_linestyle() for ln in ax.get_lines() if len(ln.get_xdata()) == 2}
    assert len(styles) == 2  # solid and dashed: the two directions
    top = max(max(ln.get_ydata()) for ln in ax.get_lines() if len(ln.get_xdata()) == 2)
    assert top == pytest.approx(50, rel=0.02)


def test_duplex_figure():
    ax = plots.duplex_aggregate(synthetic_duplex((50.0, 40.0)))  # aggregate 80 GB/s
    assert {"both at once, together", "sum of the two alone", "device→host alone"} <= _line_labels(ax)
    ys = {round(float(ln.get_ydata()[0]), 3) for ln in ax.get_lines() if len(ln.get_ydata()) == 1}
    assert {80.0, 110.0, 55.0, 50.0, 40.0} <= ys
    assert "both directions at once" in ax.get_title()


def test_batch_overhead_figure():
    ax = plots.batch_overhead(synthetic_batch(), size_bytes=MiB)
    assert set(METHOD_COST) <= _line_labels(ax) and "1 MiB in all" in ax.get_title()
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    lines = [ln for ln in ax.get_lines() if len(ln.get_xdata()) == 3]
    assert len(lines) == 3 and all(list(ln.get_xdata()) == [1, 16, 256] for ln in lines)


def synthetic_pageable_back(fault_from=64 * MiB):
    """Synthetic `.cpu()` rows: 12 GB/s and no faults below `fault_from`, 1.5 GB/s and one
    minor fault per 4 KiB page from it on; plus pageable h2d rows at 8 GB/s."""
    rows = []
    for size in (MiB, 16 * MiB, 64 * MiB, 256 * MiB):
        faults = size >= fault_from
        for rep in range(3):
            rows.append(dict(direction="d2h", strategy="d2h_pageable", size_bytes=size, rep=rep,
                             event_ms=_ms(size, 1.5 if faults else 12.0), minflt=size / 4096 if faults else 0.0))  # fmt: skip
            rows.append(dict(direction="h2d", strategy="pageable", size_bytes=size, rep=rep,
                             event_ms=_ms(size, 8.0), minflt=0.0))  # fmt: skip
    return synthetic(rows)


def test_pageable_back_names_the_faulting_sizes():
    f = ft.pageable_back(synthetic_pageable_back())
    assert f.holds and f["from_bytes"] == 64 * MiB
    assert f["gbps_before"] == pytest.approx(12.0) and f["gbps_largest"] == pytest.approx(1.5)
    assert f["vs_pageable"] == pytest.approx(1.5 / 8.0) and f["faults_per_page"] == pytest.approx(1.0)
    assert f["size_bytes"] == 256 * MiB
    assert "moved 1.5 GB/s at 256 MiB, 0.19x `x.to('cuda')` from pageable memory (8.0 GB/s)" in f.verdict
    assert "From 64 MiB on, every copy took at least 0.9 minor page faults per 4 KiB page" in f.verdict
    assert (
        "(1.00, median per size)" in f.verdict and "Below 64 MiB: no faults, and up to 12.0 GB/s" in f.verdict
    )


def test_pageable_back_without_faults_or_counts_names_no_cause():
    df = synthetic_pageable_back(fault_from=10**12)  # synthetic: no size faults, the same speed throughout
    f = ft.pageable_back(df)
    assert not f.holds and f["from_bytes"] is None and "no size faulted" in f.verdict
    g = ft.pageable_back(df.drop(columns="minflt"))
    assert not g.holds and "no page-fault counts" in g.verdict
    assert "no `d2h_pageable` copies" in ft.pageable_back(df[df.direction == "h2d"]).verdict


def test_pageable_back_on_the_bundled_d2h_run():
    from h2dlab.recording import session

    d = session.recording("h200").table("d2h")
    f = ft.pageable_back(d)
    t = d[~d.warmup & (d.strategy == "d2h_pageable")]
    fpp = (t.minflt / (t.size_bytes / 4096)).groupby(t.size_bytes).min()
    assert f["from_bytes"] == int(fpp[fpp >= 0.9].index.min()) == 64 * MiB
    big = t[t.size_bytes == t.size_bytes.max()]
    assert f["gbps_largest"] == pytest.approx((big.size_bytes / big.event_ms / 1e6).median())
    assert f.holds


def test_best_batch_method_names_a_runner_up_within_the_tie():
    df = synthetic_batch()
    near = df[df.strategy == "pinned_flat"].assign(strategy="foreach_copy")
    near = near.assign(wall_ms=near.wall_ms * 1.01, event_ms=near.event_ms * 1.01)  # synthetic: 1 % slower
    f = ft.best_batch_method(pd.concat([df, near], ignore_index=True))
    assert f["best"] == "pinned_flat" and f["runner_up"] == "foreach_copy"
    assert "`foreach_copy` came within 1.0% of it" in f.verdict and "a tie" in f.verdict
    assert "came within" not in ft.best_batch_method(df).verdict  # the synthetic runner-up is 2x slower


def test_duplex_summary_judges_the_largest_size_it_can_compare_and_reads_a_plain_csv_table():
    """Without 'alone' rows at the largest size it said 'nan% ... (nan + nan = nan GB/s)'; a
    table with NaN errors had 'no complete pair' (helper attack, eighth session)."""
    from h2dlab.recording import datasets

    bd = datasets.load(datasets.DATA_DIR / "h200" / "bidir")
    top = bd.size_bytes.max()
    f = ft.duplex_summary(bd[~((bd.strategy == "alone") & (bd.size_bytes == top))])
    assert f["size_bytes"] == sorted(bd.size_bytes.unique())[-2] and "nan" not in f.verdict
    none = ft.duplex_summary(bd[bd.strategy != "alone"])
    assert not none.holds and none.verdict.startswith(
        "No size has a complete both-ways pair and each direction"
    )
    assert ft.duplex_summary(bd.assign(error=np.nan)).verdict == ft.duplex_summary(bd).verdict
