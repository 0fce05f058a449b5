"""OpenMP's wait policy and the slow copies no cause fits: the same plan run under OpenMP's
default wait policy and under ``OMP_WAIT_POLICY=PASSIVE``, compared from the tables
(schema 4: each other thread's own CPU clock), and what the ``host_parallel`` copies, waits
on PyTorch's workers, show. Re-exported by :mod:`h2dlab.findings.factors`.
No torch here.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from h2dlab.escape import md_text
from h2dlab.explain.causes_parallel import AS_USUAL, LAGGED
from h2dlab.explain.causes_threads import others_share
from h2dlab.explain.finding import Finding, extra_text
from h2dlab.explain.outliers import explain
from h2dlab.explain.rows import timed, value_ms
from h2dlab.units import fmt_bytes

__all__ = ["host_parallel", "openmp_wait"]


def _is_passive(df: pd.DataFrame) -> pd.Series:
    envs = df.attrs.get("envs") or {}
    policy = {rid: ((envs.get(rid) or {}).get("openmp") or {}).get("OMP_WAIT_POLICY") for rid in envs}
    return df["run_id"].map(lambda r: str(policy.get(r) or "").upper() == "PASSIVE")


def _span(s: pd.Series) -> tuple[float, float]:
    return (float(s.min()), float(s.max())) if s.notna().any() else (float("nan"), float("nan"))


def _side(e: pd.DataFrame, t: pd.DataFrame, mask: pd.Series, names: dict) -> dict[str, Any]:
    f = e[e["is_outlier"] & mask]
    u = f[f["cause"] == "unexplained"]
    b = f[f["cause"] == "host_blocked"]
    w = f[f["cause"] == "gpu_wake"]
    hp = f[f["cause"] == "host_parallel"]
    top = u["strategy"].value_counts()
    tm = t[mask[t.index]]
    runs = sorted(e.loc[mask, "run_id"].unique(), key=lambda r: str(names.get(r, r)))
    by_run = f["run_id"].value_counts()
    out: dict[str, Any] = {
        "runs": len(runs),
        "flagged": len(f),
        "flagged_by_run": {str(names.get(r, r)): int(by_run.get(r, 0)) for r in runs},
        "unexplained": len(u),
        "host_blocked": len(b),
        "gpu_wake": len(w),
        "host_parallel": len(hp),
        "others_cpus": float(others_share(tm).median()),
        "busiest_share": float((tm["busiest_cpu_ms"] / tm["others_window_ms"]).median()),
        "top": top.index[0] if len(top) else "",
        "top_n": int(top.iloc[0]) if len(top) else 0,
        # the timing thread of the flagged copies: on its CPU the whole time, or asleep?
        "cpu_share": _span(f["cpu_ms"] / f["wall_ms"]),
        "nvcsw": _span(f["nvcsw"]),
        "run_delay_ms": _span(f["run_delay_ms"]),
        "blocked_cpu_share": _span(b["cpu_ms"] / b["wall_ms"]),
        "blocked_nvcsw": _span(b["nvcsw"]),
    }
    sizes = u.loc[u["strategy"] == out["top"], "size_bytes"]
    out["top_sizes"] = (int(sizes.min()), int(sizes.max())) if len(sizes) else (0, 0)
    return out


def _also(side: dict[str, Any]) -> str:
    """ " and 7 `gpu_wake`" / " and 2 `host_parallel`" / ", 7 `gpu_wake` and 2 `host_parallel`": the
    flagged copies two generic-looking causes took, where there are any."""
    parts = [f"{side[c]} `{c}`" for c in ("gpu_wake", "host_parallel") if side[c]]
    return ", " + " and ".join(parts) if len(parts) == 2 else "".join(f" and {x}" for x in parts)


def _lumped(side: dict[str, Any], label: str) -> str:
    """ ", and 19 of PASSIVE's 22 flagged copies came from one run" where one run holds most."""
    n = max(side["flagged_by_run"].values(), default=0)
    return (
        f", and {n} of {label}'s {side['flagged']} flagged copies came from one run"
        if 2 * n > side["flagged"]
        else ""
    )


def _at_least(share: float) -> str:
    """ "at least 97%", or "about 100%" where the least rounds to 100% (it may be 99.6%)."""
    return "about 100%" if f"{share:.0%}" == "100%" else f"at least {share:.0%}"


def openmp_wait(df: pd.DataFrame) -> Finding:
    """The same plan run under OpenMP's default wait policy and under
    ``OMP_WAIT_POLICY=PASSIVE`` (the runs of one table; each run's policy is read from its
    env.json, ``openmp``).

    Per policy (``values["default"]``, ``values["passive"]``): ``runs``; ``flagged`` copies
    and ``flagged_by_run`` (run name to count); ``unexplained``, ``host_blocked`` and
    ``gpu_wake`` (a small extra after the GPU sat idle) and ``host_parallel`` (host-side
    work beside busy worker threads) among them; ``others_cpus``, the
    median over timed copies of the CPUs' worth the process's other threads ran
    (``others_cpu_ms / others_window_ms``, exact clocks, schema 4), and ``busiest_share``, the median share of that window the busiest other thread was on a
    CPU; ``top``/``top_n``/``top_sizes``, the strategy most of the unexplained copies used
    and their size range; for the flagged copies' timing thread ``cpu_share`` (min, max of
    CPU time / wall time), ``nvcsw`` (min, max voluntary context switches) and
    ``run_delay_ms`` (its longest wait to run). ``values["slowdown"]``: (min, max) over the
    sizes in the default's ``top_sizes`` of the passive runs' median time of ``top`` over
    the default runs'. ``holds`` when the passive runs leave fewer unexplained copies than
    the default ones.

    Raises
    ------
    ValueError
        When the table lacks runs of either policy or the schema-4 columns.
    """
    passive = _is_passive(df)
    if passive.all() or not passive.any() or "others_cpu_ms" not in df:
        raise ValueError("openmp_wait needs schema-4 runs with and without OMP_WAIT_POLICY=PASSIVE")
    names = df.attrs.get("run_names") or {}
    e = explain(df)
    t = timed(e)
    d, p = (_side(e, t, passive == is_passive, names) for is_passive in (False, True))
    lo, hi = d["top_sizes"]
    cell = t[(t["strategy"] == d["top"]) & t["size_bytes"].between(lo, hi)]
    med = value_ms(cell).groupby([passive[cell.index], cell["size_bytes"]]).median().unstack(0)
    ratio = med[True] / med[False]
    slowdown = (float(ratio.min()), float(ratio.max()))
    out: dict[str, Any] = {"default": d, "passive": p, "slowdown": slowdown}
    d_runs, p_runs = (
        ", ".join(f"{c} in {md_text(n)}" for n, c in side["flagged_by_run"].items()) for side in (d, p)
    )
    nv, rd = d["nvcsw"][1], d["run_delay_ms"][1]
    switches = "no voluntary context switch" if nv == 0 else f"at most {nv:.0f} voluntary context switches"
    waits = "no wait to run" if rd == 0 else f"at most {rd:.2f} ms waiting to run"
    woke = {k: _also(v) for k, v in (("d", d), ("p", p))}
    verdict = (
        f"With OpenMP's default wait policy ({d['runs']} runs), the process's other threads ran "
        f"{d['others_cpus']:.1f} CPUs' worth in the median copy. The busiest of them was on a CPU for "
        f"{d['busiest_share']:.0%} of the copy's window. Of {d['flagged']} flagged copies ({d_runs}), "
        f"{d['unexplained']} were unexplained ({d['top_n']} of them `{d['top']}`, {fmt_bytes(lo)} to "
        f"{fmt_bytes(hi)}){woke['d']}. In every flagged copy the timing thread's CPU time was "
        f"{_at_least(d['cpu_share'][0])} of its wall time, with {switches} and {waits}. "
        f"With `OMP_WAIT_POLICY=PASSIVE` ({p['runs']} runs of the same plan and seeds), the median "
        f"copy saw {p['others_cpus']:.1f} CPUs' worth (the busiest other thread {p['busiest_share']:.0%}). "
        f"Of {p['flagged']} flagged copies ({p_runs}), {p['unexplained']} were unexplained{woke['p']}. "
        f"{p['host_blocked']} were `host_blocked` (the timing thread asleep): CPU time {p['blocked_cpu_share'][0]:.0%} to "
        f"{p['blocked_cpu_share'][1]:.0%} of wall, {p['blocked_nvcsw'][0]:.0f} to {p['blocked_nvcsw'][1]:.0f} "
        f"voluntary context switches. PASSIVE is no cure: the median `{d['top']}` copy of {fmt_bytes(lo)} to "
        f"{fmt_bytes(hi)} took {slowdown[0]:.1f}x to {slowdown[1]:.1f}x as long as under the default. A thread "
        "that waits by spinning stays on its CPU, so these columns cannot tell such a wait from work. Whether "
        "the default's flagged copies waited at all, the table cannot say; a thread that sleeps shows in the "
        f"scheduler's account. These are {d['runs']} + {p['runs']} runs"
        f"{_lumped(d, 'the default')}{_lumped(p, 'PASSIVE')}: the counts show a direction, not a rate."
    )
    return Finding(verdict, p["unexplained"] < d["unexplained"], out)


def host_parallel(explained: pd.DataFrame) -> Finding:
    """The flagged copies ``outliers.explain()`` named ``host_parallel``: how many, their extra
    time, for how many a worker waited to run longer than ordinary copies' workers did
    (``causes_parallel.LAGGED``), and for how many the columns place the extra time but give
    no reason (``causes_parallel.AS_USUAL``), with the unexplained share those would make.
    ``holds`` when that share is still at most 20 %."""
    f = explained[explained.is_outlier]
    hp = f[f.cause == "host_parallel"]
    n_u = int((f.cause == "unexplained").sum())
    same = int(hp["evidence"].str.contains(AS_USUAL, regex=False).sum())
    lagged = int(hp["evidence"].str.contains(LAGGED, regex=False).sum())
    share = (n_u + same) / len(f) if len(f) else 0.0
    values = {"host_parallel": len(hp), "flagged": len(f), "as_usual": same, "lagged": lagged}
    values["share_if_unexplained"] = share
    extra = value_ms(hp) - hp["expected_ms"].astype(float)
    table = hp.assign(ms=value_ms(hp), extra_ms=extra)[["order", "strategy", "size_bytes", "ms", "extra_ms"]]
    if hp.empty:
        return Finding(
            f"None of the {len(f)} flagged copies is `host_parallel`.", share <= 0.2, values, table
        )
    by = ", ".join(f"`{s}` {n}" for s, n in hp.groupby("strategy").size().items())
    verdict = (
        f"{len(hp)} of {len(f)} flagged copies {'is' if len(hp) == 1 else 'are'} `host_parallel` ({by}). The time "
        "went into the host-side call, the timing thread on its CPU throughout, while PyTorch's worker threads "
        "ran (or spun) beside it. "
        + extra_text(extra, hp["size_bytes"])
        + (
            f" For {'it' if len(hp) == 1 else f'{lagged} of the {len(hp)}'} one worker waited to run for at least "
            "half the extra time, longer than any of its strategy's copies that were not slow saw. A worker that "
            "lost its CPU to another thread may have held the parallel copy open."
            if lagged
            else ""
        )
        + (
            f" For {'it' if len(hp) == 1 else f'{same} of the {len(hp)}'} no worker waited to run both for half "
            "the extra time and longer than in its strategy's ordinary copies. Busy workers are no reason "
            "either: spinning workers look busy through any long copy. So the label says where the extra time "
            f"went, not why. Counted as unexplained, {'it' if same == 1 else f'those {same}'} and the "
            f"{n_u} already unexplained would leave {n_u + same} of {len(f)} flagged copies ({share:.0%}) "
            "without a cause."
            if same
            else ""
        )
    )
    return Finding(verdict, bool(share <= 0.2), values, table)
