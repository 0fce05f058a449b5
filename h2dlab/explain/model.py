"""The latency model: ``latency_ms = overhead_ms + size_bytes / bandwidth``, fitted
robustly per strategy and run; medians per size; ``concurrency()`` the scaling over several
GPUs. The advice (which way is fastest) is one engine, :func:`h2dlab.findings.advice.advice`.

A table built in pandas (``pd.read_csv`` of a bundled ``.csv.gz``: an empty ``error`` read
as NaN, no ``attrs``) is read as ``datasets.read`` would (``rows.normalised``), or refused
in one line.

Which rows and which time per row it reads (``check_values``, ``timed``, ``value_ms``)
is :mod:`h2dlab.explain.rows`, re-exported here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from h2dlab.explain.linefit import fit_lines
from h2dlab.explain.rows import MEASURED_COLUMNS, MODEL_COLUMNS, check_values, normalised, timed, value_ms

__all__ = [
    "MEASURED_COLUMNS",
    "MODEL_COLUMNS",
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
    df = normalised(df)
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
    df = normalised(df)
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
    df = normalised(df)
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
