"""factors.openmp_wait on the bundled data/h200_omp (the kit's own recording on an H200:
one plan, 3 runs with OpenMP's default wait policy, 3 with OMP_WAIT_POLICY=PASSIVE, the
policy in each run's env.json): every number of its sentence recomputed here."""

import pytest

from h2dlab import datasets, factors, outliers
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
        assert got["others_cpus"] == pytest.approx((t.others_cpu_ms / t.others_window_ms).median())
    d, p = f.values["default"], f.values["passive"]
    assert f.holds == (p["unexplained"] < d["unexplained"]) and f.holds
    assert (
        f"{d['unexplained']} of {d['flagged']} flagged copies were unexplained ({d['top_n']} of them `{d['top']}`"
        in f.verdict
    )
    assert f"{fmt_bytes(d['top_sizes'][0])} to {fmt_bytes(d['top_sizes'][1])}" in f.verdict
    assert (
        f"{p['unexplained']} of {p['flagged']} flagged copies were unexplained; {p['host_blocked']} were `host_blocked`"
        in f.verdict
    )
    assert (
        f"median {d['others_cpus']:.1f} CPUs' worth" in f.verdict
        and f"ran {p['others_cpus']:.1f} CPUs' worth" in f.verdict
    )


def test_openmp_wait_needs_both_policies(omp):
    df, _ = omp
    default_only = df[df.run_id.map(lambda r: df.attrs["envs"][r]["openmp"]["OMP_WAIT_POLICY"] is None)]
    default_only.attrs = df.attrs
    with pytest.raises(ValueError, match="with and without OMP_WAIT_POLICY=PASSIVE"):
        factors.openmp_wait(default_only)
