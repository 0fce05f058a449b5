"""factors.openmp_wait on the bundled data/h200_omp (the kit's own recording on an H200:
one plan, 3 runs with OpenMP's default wait policy, 3 with OMP_WAIT_POLICY=PASSIVE, the
policy in each run's env.json): every number of its sentence recomputed here."""

import pytest

from h2dlab.explain import outliers
from h2dlab.findings import factors
from h2dlab.recording import datasets
from h2dlab.units import fmt_bytes


@pytest.fixture(scope="module")
def omp():
    df = datasets.load("h200_omp")
    return df, factors.openmp_wait(df)


def test_each_run_says_its_policy_in_env_json(omp):
    df, _ = omp
    policies = sorted(
        str((env.get("openmp") or {}).get("OMP_WAIT_POLICY")) for env in df.attrs["envs"].values()
    )
    assert policies == ["None"] * 3 + ["PASSIVE"] * 3


def test_openmp_wait_counts_recomputed(omp):
    df, f = omp
    e = outliers.explain(df)
    envs = df.attrs["envs"]
    for key, want in (("default", None), ("passive", "PASSIVE")):
        runs = [r for r, env in envs.items() if env["openmp"]["OMP_WAIT_POLICY"] == want]
        part = e[e.run_id.isin(runs)]
        flagged = part[part.is_outlier]
        t = part[~part.warmup & (part.error == "")]
        got = f.values[key]
        assert got["runs"] == 3 and got["flagged"] == len(flagged)
        assert got["unexplained"] == int((flagged.cause == "unexplained").sum())
        assert got["host_blocked"] == int((flagged.cause == "host_blocked").sum())
        assert got["gpu_wake"] == int((flagged.cause == "gpu_wake").sum())
        assert got["host_parallel"] == int((flagged.cause == "host_parallel").sum())
        assert got["others_cpus"] == pytest.approx((t.others_cpu_ms / t.others_window_ms).median())
    d, p = f.values["default"], f.values["passive"]
    assert f.holds == (p["unexplained"] < d["unexplained"]) and f.holds
    # gpu_wake needs idle runs recorded beside the table (a calibration), and h200_omp has none:
    # no copy is gpu_wake (before the calibration, 7 of the default's 36 and 4 of PASSIVE's 7
    # unexplained copies were, by a fixed 2 ms threshold no data of this machine supported).
    # Since host_parallel (host-side work beside busy worker threads): 2 of the default's (two
    # `staged` copies of default-3, their busiest worker on a CPU for 92 % and 96 % of the
    # window); none of PASSIVE's (no worker spins there). Since host_pace (stretches in which
    # the kit's own loop ran slow between copies): 2 of the default's and 3 of PASSIVE's are
    # episodes (a stretch in default-1 at 2.60-2.78 s, one in passive-1 at 1.45-1.82 s).
    assert (d["runs"], d["flagged"], d["unexplained"], p["flagged"], p["unexplained"], p["host_blocked"]) == (
        3, 37, 32, 22, 4, 15,
    )  # fmt: skip
    assert (d["gpu_wake"], p["gpu_wake"]) == (0, 0)
    assert (d["host_parallel"], p["host_parallel"]) == (2, 0)
    assert (
        # the runs' counts sit beside the flagged total they split, not the unexplained one
        f"Of {d['flagged']} flagged copies (18 in default-1, 7 in default-2, 12 in default-3), "
        f"{d['unexplained']} were unexplained ({d['top_n']} of them `{d['top']}`" in f.verdict
    )
    assert f"`, 64 KiB to 2 MiB) and {d['host_parallel']} `host_parallel`. In every flagged copy" in f.verdict
    assert "gpu_wake" not in f.verdict
    assert f"{fmt_bytes(d['top_sizes'][0])} to {fmt_bytes(d['top_sizes'][1])}" in f.verdict
    assert (
        f"Of {p['flagged']} flagged copies (19 in passive-1, 1 in passive-2, 2 in passive-3), "
        f"{p['unexplained']} were unexplained. {p['host_blocked']} were `host_blocked`" in f.verdict
    )
    assert (
        f"the process's other threads ran {d['others_cpus']:.1f} CPUs' worth in the median copy" in f.verdict
    )
    assert f"the median copy saw {p['others_cpus']:.1f} CPUs' worth" in f.verdict


def test_openmp_wait_evidence_of_spinning_and_sleeping_recomputed(omp):
    # The sentence's reading of the two policies: under the default the busiest other thread
    # is on a CPU most of each copy's window and the flagged copies' timing thread never
    # leaves its CPU; under PASSIVE the host_blocked ones sleep. Each number from the rows.
    df, f = omp
    e = outliers.explain(df)
    envs, names = df.attrs["envs"], df.attrs["run_names"]
    for key, want in (("default", None), ("passive", "PASSIVE")):
        part = e[e.run_id.map(lambda r, w=want: envs[r]["openmp"]["OMP_WAIT_POLICY"] == w)]
        t = part[~part.warmup & (part.error == "")]
        flagged = part[part.is_outlier]
        blocked = flagged[flagged.cause == "host_blocked"]
        got = f.values[key]
        assert got["busiest_share"] == pytest.approx((t.busiest_cpu_ms / t.others_window_ms).median())
        assert got["flagged_by_run"] == {
            names[r]: int((flagged.run_id == r).sum()) for r in part.run_id.unique()
        }
        assert got["cpu_share"][0] == pytest.approx((flagged.cpu_ms / flagged.wall_ms).min())
        assert got["nvcsw"][1] == flagged.nvcsw.max()
        if len(blocked):
            share = blocked.cpu_ms / blocked.wall_ms
            assert got["blocked_cpu_share"] == pytest.approx((share.min(), share.max()))
            assert got["blocked_nvcsw"] == (blocked.nvcsw.min(), blocked.nvcsw.max())
    d, p = f.values["default"], f.values["passive"]
    # On this data: the default's flagged copies never left the CPU; PASSIVE's blocked ones slept.
    assert d["cpu_share"][0] >= 0.995 and d["nvcsw"] == (0.0, 0.0) and d["run_delay_ms"] == (0.0, 0.0)
    assert "CPU time was about 100% of its wall time" in f.verdict  # its least rounds to 100%
    assert p["blocked_cpu_share"][1] < 0.5 and p["blocked_nvcsw"][0] >= 1
    assert d["busiest_share"] > 0.5 and p["busiest_share"] == 0
    assert f"busiest of them was on a CPU for {d['busiest_share']:.0%} of the copy's window" in f.verdict
    assert "no voluntary context switch and no wait to run" in f.verdict
    assert (
        f"CPU time {p['blocked_cpu_share'][0]:.0%} to {p['blocked_cpu_share'][1]:.0%} of wall, "
        f"{p['blocked_nvcsw'][0]:.0f} to {p['blocked_nvcsw'][1]:.0f} voluntary context switches" in f.verdict
    )
    # Most of PASSIVE's flagged copies came from one run: the sentence says so.
    assert p["flagged_by_run"] == {"passive-1": 19, "passive-2": 1, "passive-3": 2}
    assert "19 of PASSIVE's 22 flagged copies came from one run" in f.verdict
    assert "of the default's" not in f.verdict  # the default's are spread: 18, 7, 12
    assert "(19 in passive-1, 1 in passive-2, 2 in passive-3)" in f.verdict


def test_openmp_wait_passive_slowdown_recomputed(omp):
    # PASSIVE makes the default's unexplained strategy slower at the same sizes: the median
    # per size, PASSIVE over default, from the rows.
    df, f = omp
    d = f.values["default"]
    envs = df.attrs["envs"]
    t = df[~df.warmup & (df.error == "") & (df.strategy == d["top"])]
    t = t[t.size_bytes.between(*d["top_sizes"])]
    ms = t.event_ms.where(t.event_ms.notna(), t.wall_ms)
    passive = t.run_id.map(lambda r: envs[r]["openmp"]["OMP_WAIT_POLICY"] == "PASSIVE")
    med = ms.groupby([passive, t.size_bytes]).median().unstack(0)
    ratio = med[True] / med[False]
    assert len(ratio) == 6  # 64 KiB .. 2 MiB
    assert f.values["slowdown"] == pytest.approx((ratio.min(), ratio.max()))
    assert ratio.min() > 1.2  # slower at every one of those sizes
    assert f"took {ratio.min():.1f}x to {ratio.max():.1f}x as long as under the default" in f.verdict


def test_openmp_wait_needs_both_policies(omp):
    df, _ = omp
    default_only = df[df.run_id.map(lambda r: df.attrs["envs"][r]["openmp"]["OMP_WAIT_POLICY"] is None)]
    default_only.attrs = df.attrs
    with pytest.raises(ValueError, match="with and without OMP_WAIT_POLICY=PASSIVE"):
        factors.openmp_wait(default_only)
