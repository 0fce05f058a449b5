"""The latency model: ``latency_ms = overhead_ms + size_bytes / bandwidth``, fitted
robustly per strategy and run; medians per size; ``advise()`` turns measured curves into
a recommendation; ``concurrency()`` the scaling over several GPUs.

Which rows and which time per row it reads (``check_values``, ``timed``, ``value_ms``)
is :mod:`h2dlab.explain.rows`, re-exported here.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

import numpy as np
import pandas as pd

from h2dlab.explain.linefit import fit_lines
from h2dlab.explain.rows import MEASURED_COLUMNS, MODEL_COLUMNS, check_values, timed, value_ms

__all__ = [
    "CASES",
    "MEASURED_COLUMNS",
    "MODEL_COLUMNS",
    "advise",
    "cold_pin_rows",
    "check_values",
    "concurrency",
    "fit",
    "fit_line",
    "interpolate_ms",
    "medians",
    "predict",
    "timed",
    "value_ms",
]


def fit_line(size: np.ndarray, ms: np.ndarray, loss: str = "huber") -> tuple[float, float]:
    """Robust fit of ``ms = overhead_ms + size * ms_per_byte``; returns both, positive.

    The fit is in log space (so a 1 KiB copy counts as much as a 4 GiB one), with
    ``loss`` (scipy's least_squares: "huber", "cauchy", ...) on the log residuals.
    ``size`` needs two distinct values, ``ms`` finite positive values (else ValueError).
    "huber" is minimised by :func:`h2dlab.explain.linefit.fit_lines` (the same loss and minimum,
    tested against least_squares, without importing scipy); other losses by scipy.
    """
    size = np.asarray(size, float)
    ms = np.asarray(ms, float)
    if len(np.unique(size)) < 2 or not (np.all(np.isfinite(ms)) and np.all(ms > 0)):
        raise ValueError("fit_line needs at least two distinct sizes and finite, positive latencies")
    ly = np.log(ms)
    # Start: the smallest sizes give the overhead, the largest the slope.
    order = np.argsort(size)
    a0 = max(float(np.median(ms[order[: max(1, len(ms) // 10)]])), 1e-6)
    big = order[-max(1, len(ms) // 10) :]
    b0 = max(float(np.median(ms[big] / size[big])), 1e-15)
    if loss == "huber":
        a, b = fit_lines(size[None, :], ly[None, :], start=(a0, b0))[0]
        return float(a), float(b)
    from scipy.optimize import least_squares

    def resid(p):
        return np.log(np.exp(p[0]) + size * np.exp(p[1])) - ly

    sol = least_squares(resid, x0=[np.log(a0), np.log(b0)], loss=loss, f_scale=0.05)
    return float(np.exp(sol.x[0])), float(np.exp(sol.x[1]))


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


#: The bootstrap resamples at most this many rows per group (every bundled group has fewer, 2,520 at most:
#: their intervals are the plain bootstrap's). A larger group (a long recording, 1,000,000
#: rows) is resampled m out of n (m = this), its spread scaled by sqrt(m / n), which holds
#: for a fit whose error shrinks as 1 / sqrt(rows): memory and time stay bounded per group.
BOOT_MAX_ROWS = 10_000
#: What :func:`fit` gives per group, after the ``by`` columns.
FIT_COLUMNS = (
    "overhead_us", "overhead_us_lo", "overhead_us_hi", "gbps", "gbps_lo", "gbps_hi", "n", "sizes",
    "median_abs_rel_err",
)  # fmt: skip


def fit(
    df: pd.DataFrame, *, by: tuple[str, ...] = ("run_id", "strategy"), n_boot: int = 200, seed: int = 0
) -> pd.DataFrame:
    """Fit ``latency = overhead + bytes / bandwidth`` per group.

    Uses ``event_ms`` where present, else ``wall_ms``; warm-ups and error rows are
    excluded. Confidence intervals (95 %) come from a bootstrap over rows (m out of n
    beyond :data:`BOOT_MAX_ROWS` rows).

    Returns
    -------
    pandas.DataFrame
        One row per group: the ``by`` columns, ``overhead_us``, ``gbps``, their
        ``*_lo``/``*_hi`` bounds, ``n`` (rows), ``sizes`` (distinct sizes) and
        ``median_abs_rel_err`` (how far the straight model is from the data: a curved
        strategy such as ``pageable`` shows it here).
    """
    check_values(df, (*MODEL_COLUMNS, *by))
    rng = np.random.default_rng(seed)
    t = timed(df).assign(_v=lambda d: value_ms(d))
    rows = []
    for key, g in t.groupby(list(by), sort=True):
        key = key if isinstance(key, tuple) else (key,)
        size = g["size_bytes"].to_numpy(float)
        ms = g["_v"].to_numpy(float)
        if len(np.unique(size)) < 2:
            continue
        a, b = fit_line(size, ms)
        bt = np.empty((0, 2))
        if n_boot and len(ms) >= 8:  # refit resamples of the rows, all at once
            m = min(len(ms), BOOT_MAX_ROWS)
            i = rng.integers(0, len(ms), (n_boot, m))
            bt = fit_lines(size[i], np.log(ms[i]), start=(a, b))
            bt = bt[np.isfinite(bt).all(axis=1)]
            if m < len(ms):  # m out of n: the spread of a fit to m rows, shrunk to n rows
                shrink = np.sqrt(m / len(ms))
                bt = np.exp(np.log([a, b]) + (np.log(bt) - np.log([a, b])) * shrink)
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
    # no group with two sizes: an empty table that still has its columns (callers select by them)
    return pd.DataFrame(rows, columns=[*by, *FIT_COLUMNS])


def predict(fitted: pd.DataFrame, size_bytes: float | np.ndarray) -> np.ndarray:
    """Latency (ms) of one fitted row at ``size_bytes``."""
    return fitted["overhead_us"] / 1e3 + np.asarray(size_bytes, float) / (fitted["gbps"] * 1e6)


def medians(df: pd.DataFrame) -> pd.DataFrame:
    """Per (strategy, size): median and quartiles of the timing, n, and GB/s (1e9 bytes/s)."""
    check_values(df, MODEL_COLUMNS[1:])
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


ONE_OFF_CASE = "one-off copy of a pageable tensor"
REUSE_CASE = "the same buffer copied again and again"
#: The cases advise() answers, in order: the strategies that can serve each (ties go to
#: the first) and the note it prints.
CASES: dict[str, tuple[tuple[str, ...], str]] = {
    ONE_OFF_CASE: (
        ("pageable", "pageable_non_blocking", "host_register", "staged", "pin_then_copy"),
        "pin_then_copy here pays a cold cudaHostAlloc (host cache emptied before the copy)",
    ),
    "data you cannot pin ahead (a new tensor each step)": (
        ("pageable", "pageable_non_blocking", "pin_then_copy", "staged"),
        "pin_then_copy here reuses the host allocator's cached pinned block (steady state)",
    ),
    REUSE_CASE: (
        ("pinned_reuse", "staged", "pageable"),
        "pin it once in place (h2dlab.transfer.fastpath.pinned), then every copy is a pinned copy; "
        "upfront_ms = host_register minus pinned_reuse, measured",
    ),
    "data already pinned": (
        ("pinned_reuse",),
        "copy with non_blocking=True; nothing faster exists on this link",
    ),
}


def _check_size(size_bytes: Any) -> float:
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, Real):
        raise TypeError(f"size_bytes must be a number of bytes, got {type(size_bytes).__name__}")
    n = float(size_bytes)
    if not math.isfinite(n) or n <= 0:
        raise ValueError(f"size_bytes must be a positive, finite number of bytes, got {size_bytes!r}")
    return n


def cold_pin_rows(one_off: pd.DataFrame) -> pd.DataFrame:
    """The ``pin_then_copy`` rows of ``one_off`` that made a new pinned block.

    Those copies paid ``cudaHostAlloc`` (``host_allocs > 0``), the cost a one-off
    ``x.pin_memory()`` pays. Which runs were measured with the host cache emptied (and
    with which ``PYTORCH_CUDA_ALLOC_CONF``) is the caller's choice of table, e.g.
    ``datasets.run_named(datasets.load("h200_allocator"), "pin-emptied")``.

    Raises
    ------
    ValueError
        ``one_off`` has no such row (no ``pin_then_copy`` rows, or no allocator counters).
    """
    check_values(one_off, (*MODEL_COLUMNS[1:], "host_allocs"))
    t = timed(one_off)
    cold = t[(t["strategy"] == "pin_then_copy") & (t["host_allocs"] > 0)]
    if cold.empty:
        raise ValueError(
            "one_off has no pin_then_copy row that made a new pinned block (host_allocs > 0): pass a "
            "run measured with the host cache emptied before each size"
        )
    return cold


def advise(
    size_bytes: float,
    *,
    df: pd.DataFrame,
    reuse: bool | None = None,
    one_off: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Which strategy is fastest for a copy of ``size_bytes``, by case, from measured data.

    Only the tables passed in are read; nothing is loaded behind the caller's back.

    Parameters
    ----------
    size_bytes
        The payload, a positive number of bytes.
    df
        A sweep table with the strategies (e.g. ``datasets.load("h200_sweep")``).
    reuse
        True: only the case where the same buffer is copied repeatedly; False: only
        the cases where it is copied once; None: every case.
    one_off
        A table whose ``pin_then_copy`` rows ran with the host cache emptied before
        each size (e.g. ``h200_allocator``'s ``pin-emptied`` run), for the cold cost of
        ``x.pin_memory()`` that a one-off copy pays: its rows with a new pinned block
        (see ``cold_pin_rows``). Without it, the one-off case leaves ``pin_then_copy`` out.

    Returns
    -------
    pandas.DataFrame
        One row per case: ``best``, ``best_ms``, ``best_gbps`` (GB/s = 1e9 bytes/s),
        ``runner_up``, ``runner_up_ms``, ``pageable_ms`` (``x.to("cuda")``),
        ``speedup_vs_pageable``, ``upfront_ms`` (what the case pays once before its first
        copy) and ``note``.

    Raises
    ------
    TypeError
        ``size_bytes`` is not a number, or ``df`` not a DataFrame.
    ValueError
        ``size_bytes`` is not positive and finite; ``df`` has no timed rows or bad
        values; ``one_off`` has no cold ``pin_then_copy`` rows.
    """
    size_bytes = _check_size(size_bytes)
    med = medians(df)
    if med.empty:
        raise ValueError("df has no timed rows (no rows without warm-up or error): nothing to advise from")
    cold_pin = float("nan")
    if one_off is not None:
        cold_pin = interpolate_ms(medians(cold_pin_rows(one_off)), "pin_then_copy", size_bytes)
    ms = {s: interpolate_ms(med, s, size_bytes) for s in med["strategy"].unique()}

    reg_cost = max(ms.get("host_register", np.nan) - ms.get("pinned_reuse", np.nan), 0.0)
    rows: list[dict[str, Any]] = []
    for case, (strategies, note) in CASES.items():
        if reuse is not None and reuse != (case == REUSE_CASE):
            continue
        cands = {
            s: cold_pin if (s, case) == ("pin_then_copy", ONE_OFF_CASE) else ms.get(s, np.nan)
            for s in strategies
        }
        ranked = sorted(((k, v) for k, v in cands.items() if np.isfinite(v)), key=lambda kv: kv[1])
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
                "upfront_ms": reg_cost if case == REUSE_CASE and best == "pinned_reuse" else 0.0,
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
            "not a concurrent run: the table has no gpu and world columns (measure on several GPUs at once)"
        )
    check_values(df, MODEL_COLUMNS[1:])
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
