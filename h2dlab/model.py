"""The latency model: ``latency_ms = overhead_ms + size_bytes / bandwidth``, fitted
robustly per strategy and run; ``advise()`` turns fitted curves into a recommendation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

#: Strategies that move a pageable tensor with no preparation, by case (see advise()).
PAGEABLE_ONE_OFF = ("pageable", "pageable_non_blocking", "pin_then_copy", "host_register", "staged")


def value_ms(df: pd.DataFrame) -> pd.Series:
    """The timing to analyse per row: CUDA events where measured, else the host clock."""
    return df["event_ms"].where(df["event_ms"].notna(), df["wall_ms"])


def timed(df: pd.DataFrame) -> pd.DataFrame:
    """Rows a model may learn from: not warm-ups, no error, a positive time."""
    v = value_ms(df)
    return df[(~df["warmup"]) & (df["error"] == "") & (v > 0)]


def _fit_one(size: np.ndarray, ms: np.ndarray, loss: str = "huber") -> tuple[float, float]:
    """Robust fit of ms = a + size * b in log space (so a 1 KiB copy counts as much as a
    4 GiB one); Huber (or ``loss``) on log residuals. Returns (overhead_ms, ms_per_byte)."""
    from scipy.optimize import least_squares

    ly = np.log(ms)
    # Start: the smallest sizes give the overhead, the largest the slope.
    order = np.argsort(size)
    a0 = max(float(np.median(ms[order[: max(1, len(ms) // 10)]])), 1e-6)
    big = order[-max(1, len(ms) // 10) :]
    b0 = max(float(np.median(ms[big] / size[big])), 1e-15)

    def resid(p):
        return np.log(np.exp(p[0]) + size * np.exp(p[1])) - ly

    sol = least_squares(resid, x0=[np.log(a0), np.log(b0)], loss=loss, f_scale=0.05)
    return float(np.exp(sol.x[0])), float(np.exp(sol.x[1]))


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def fit(
    df: pd.DataFrame, *, by: tuple[str, ...] = ("run_id", "strategy"), n_boot: int = 200, seed: int = 0
) -> pd.DataFrame:
    """Fit ``latency = overhead + bytes / bandwidth`` per group.

    Uses ``event_ms`` where present, else ``wall_ms``; warm-ups and error rows are
    excluded. Confidence intervals (95 %) come from a bootstrap over rows.

    Returns
    -------
    pandas.DataFrame
        One row per group: the ``by`` columns, ``overhead_us``, ``gbps``, their
        ``*_lo``/``*_hi`` bounds, ``n`` (rows), ``sizes`` (distinct sizes) and
        ``median_abs_rel_err`` (how far the straight model is from the data: a curved
        strategy such as ``pageable`` shows it here).
    """
    rng = np.random.default_rng(seed)
    t = timed(df).assign(_v=lambda d: value_ms(d))
    rows = []
    for key, g in t.groupby(list(by), sort=True):
        key = key if isinstance(key, tuple) else (key,)
        size = g["size_bytes"].to_numpy(float)
        ms = g["_v"].to_numpy(float)
        if len(np.unique(size)) < 2:
            continue
        a, b = _fit_one(size, ms)
        boots = []
        for _ in range(n_boot if len(ms) >= 8 else 0):
            i = rng.integers(0, len(ms), len(ms))
            if len(np.unique(size[i])) >= 2:
                boots.append(_fit_one(size[i], ms[i]))
        bt = np.array(boots) if boots else np.empty((0, 2))
        pred = a + size * b
        rows.append(
            {
                **dict(zip(by, key, strict=True)),
                "overhead_us": a * 1e3,
                "overhead_us_lo": _pct(bt[:, 0], 2.5) * 1e3,
                "overhead_us_hi": _pct(bt[:, 0], 97.5) * 1e3,
                "gbps": 1.0 / b / 1e6,
                "gbps_lo": 1.0 / _pct(bt[:, 1], 97.5) / 1e6,
                "gbps_hi": 1.0 / _pct(bt[:, 1], 2.5) / 1e6,
                "n": len(ms),
                "sizes": len(np.unique(size)),
                "median_abs_rel_err": float(np.median(np.abs(ms / pred - 1))),
            }
        )
    return pd.DataFrame(rows)


def predict(fitted: pd.DataFrame, size_bytes: float | np.ndarray) -> np.ndarray:
    """Latency (ms) of one fitted row at ``size_bytes``."""
    return fitted["overhead_us"] / 1e3 + np.asarray(size_bytes, float) / (fitted["gbps"] * 1e6)


def medians(df: pd.DataFrame) -> pd.DataFrame:
    """Per (strategy, size): median and quartiles of the timing, n, and GB/s."""
    t = timed(df).assign(_v=lambda d: value_ms(d))
    g = t.groupby(["strategy", "size_bytes"])["_v"]
    out = g.agg(
        median_ms="median", q1_ms=lambda v: v.quantile(0.25), q3_ms=lambda v: v.quantile(0.75), n="size"
    ).reset_index()
    out["gbps"] = out["size_bytes"] / out["median_ms"] / 1e6
    out["iqr_over_median"] = (out["q3_ms"] - out["q1_ms"]) / out["median_ms"]
    return out


def interpolate_ms(med: pd.DataFrame, strategy: str, size_bytes: float) -> float:
    """Median latency of ``strategy`` at ``size_bytes``, interpolated in log-log between
    measured sizes (extrapolated at constant GB/s beyond the largest, constant time
    below the smallest). NaN if the strategy was not measured."""
    m = med[med["strategy"] == strategy].sort_values("size_bytes")
    if m.empty:
        return float("nan")
    s, v = m["size_bytes"].to_numpy(float), m["median_ms"].to_numpy(float)
    if size_bytes >= s[-1]:
        return float(v[-1] * size_bytes / s[-1])
    if size_bytes <= s[0]:
        return float(v[0])
    return float(np.exp(np.interp(np.log(size_bytes), np.log(s), np.log(v))))


CASES = {
    "one-off copy of a pageable tensor": "the data sits in ordinary memory and is copied once",
    "data you cannot pin ahead (a new tensor each step)": "fresh pageable tensors, copied in a loop",
    "the same buffer copied again and again": "you may pin it once and reuse it",
    "data already pinned": "e.g. a DataLoader with pin_memory=True",
}


def advise(
    size_bytes: float,
    *,
    reuse: bool | None = None,
    df: pd.DataFrame | None = None,
    one_off: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Which strategy is fastest for a copy of ``size_bytes``, by case, from measured data.

    Parameters
    ----------
    size_bytes
        The payload.
    reuse
        True: only the case where the same buffer is copied repeatedly; False: only
        the cases where it is copied once; None: every case.
    df
        A sweep table with the strategies (default: the recorded ``h200_sweep``).
    one_off
        A table whose ``pin_then_copy`` rows ran with the host cache emptied before
        each size (default: ``h200_allocator``'s ``pin-emptied`` run), for the cold
        cost of ``x.pin_memory()`` that a one-off copy pays. Without it, the one-off
        case leaves ``pin_then_copy`` out.

    Returns
    -------
    pandas.DataFrame
        One row per case: ``best``, ``best_ms``, ``runner_up``, ``runner_up_ms``,
        ``pageable_ms`` (``x.to("cuda")``), ``speedup_vs_pageable``, ``upfront_ms``
        (what the case pays once before its first copy) and ``note``.
    """
    from h2dlab import datasets

    if df is None:
        df = datasets.load("h200_sweep")
    med = medians(df)
    if one_off is None:
        try:
            alloc = datasets.load("h200_allocator")
            env_runs = alloc.attrs.get("envs", {})
            cold = [
                r
                for r, e in env_runs.items()
                if e
                and "empty_host_cache_each_size" in str(e.get("spec"))
                and e["spec"].get("empty_host_cache_each_size")
                and not e.get("PYTORCH_CUDA_ALLOC_CONF")
            ]
            one_off = alloc[alloc.run_id.isin(cold)]
        except Exception:  # noqa: BLE001 - the case then goes without pin_then_copy
            one_off = None
    ms = {s: interpolate_ms(med, s, size_bytes) for s in med["strategy"].unique()}
    cold_pin = float("nan")
    if one_off is not None and len(one_off):
        first = one_off[(one_off["rep"] == 0) & (one_off["strategy"] == "pin_then_copy")]
        if len(first):
            cold_pin = interpolate_ms(medians(first), "pin_then_copy", size_bytes)

    def pick(cands: dict[str, float]) -> list[tuple[str, float]]:
        return sorted(((k, v) for k, v in cands.items() if np.isfinite(v)), key=lambda kv: kv[1])

    cases: list[tuple[str, dict[str, float], float, str]] = []
    one = {s: ms.get(s, np.nan) for s in ("pageable", "pageable_non_blocking", "host_register", "staged")}
    one["pin_then_copy"] = cold_pin
    cases.append(
        (
            "one-off copy of a pageable tensor",
            one,
            0.0,
            "pin_then_copy here pays a cold cudaHostAlloc (host cache emptied before the copy)",
        )
    )
    loop = {s: ms.get(s, np.nan) for s in ("pageable", "pageable_non_blocking", "pin_then_copy", "staged")}
    cases.append(
        (
            "data you cannot pin ahead (a new tensor each step)",
            loop,
            0.0,
            "pin_then_copy here reuses the host allocator's cached pinned block (steady state)",
        )
    )
    reg_cost = max(ms.get("host_register", np.nan) - ms.get("pinned_reuse", np.nan), 0.0)
    cases.append(
        (
            "the same buffer copied again and again",
            {
                "pinned_reuse": ms.get("pinned_reuse", np.nan),
                "staged": ms.get("staged", np.nan),
                "pageable": ms.get("pageable", np.nan),
            },
            reg_cost,
            "pin it once in place (h2dlab.transfer.pinned), then every copy is a pinned copy; "
            "upfront_ms = host_register minus pinned_reuse, measured",
        )
    )
    cases.append(
        (
            "data already pinned",
            {"pinned_reuse": ms.get("pinned_reuse", np.nan)},
            0.0,
            "copy with non_blocking=True; nothing faster exists on this link",
        )
    )
    rows: list[dict[str, Any]] = []
    for case, cands, upfront, note in cases:
        if reuse is True and case != "the same buffer copied again and again":
            continue
        if reuse is False and case == "the same buffer copied again and again":
            continue
        ranked = pick(cands)
        if not ranked:
            continue
        best, best_ms = ranked[0]
        ru, ru_ms = ranked[1] if len(ranked) > 1 else ("", float("nan"))
        base = ms.get("pageable", np.nan)
        rows.append(
            {
                "case": case,
                "size_bytes": int(size_bytes),
                "best": best,
                "best_ms": best_ms,
                "best_gbps": size_bytes / best_ms / 1e6,
                "runner_up": ru,
                "runner_up_ms": ru_ms,
                "pageable_ms": base,
                "speedup_vs_pageable": base / best_ms,
                "upfront_ms": upfront if best == "pinned_reuse" else 0.0,
                "note": note,
            }
        )
    return pd.DataFrame(rows)


def concurrency(df: pd.DataFrame) -> pd.DataFrame:
    """Per (strategy, size, GPUs at once): per-GPU and aggregate bandwidth from a
    concurrent run (``gpu`` and ``world`` columns), against the one-GPU figure.

    ``per_gpu_gbps`` is the mean over GPUs of each GPU's median; ``aggregate_gbps`` their
    sum (the processes start each size together, behind a barrier, so their copies
    overlap); ``scaling`` is aggregate over the one-GPU bandwidth of the same run.
    """
    if "world" not in df.columns or "gpu" not in df.columns:
        raise ValueError(
            "not a concurrent run: the table has no gpu and world columns (h2dlab measure --gpus)"
        )
    t = timed(df).assign(_v=lambda d: value_ms(d))
    per = t.groupby(["strategy", "size_bytes", "world", "gpu"])["_v"].median().rename("ms").reset_index()
    per["gbps"] = per["size_bytes"] / per["ms"] / 1e6
    out = (
        per.groupby(["strategy", "size_bytes", "world"])
        .agg(per_gpu_gbps=("gbps", "mean"), aggregate_gbps=("gbps", "sum"), gpus=("gpu", "nunique"))
        .reset_index()
    )
    single = out[out.world == 1].set_index(["strategy", "size_bytes"])["aggregate_gbps"]
    out["single_gpu_gbps"] = [
        single.get((s, n), np.nan) for s, n in zip(out.strategy, out.size_bytes, strict=True)
    ]
    out["scaling"] = out["aggregate_gbps"] / out["single_gpu_gbps"]
    return out
