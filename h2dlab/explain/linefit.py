"""Many robust line fits at once: the bootstrap behind ``model.fit``'s intervals.

``model.fit_line`` fits one sample with scipy's ``least_squares``; a bootstrap refits
that line hundreds of times, where scipy's per-call cost dominated ``h2dlab explain``
(5 of its 6 s on ``h200_sweep``). ``fit_lines`` minimises the same Huber loss on the
same log residuals for every resample together, by iteratively reweighted Gauss-Newton
steps on a (resamples x rows) array, each started at the full sample's fit.
"""

from __future__ import annotations

import numpy as np

__all__ = ["fit_lines"]


def _cost(r: np.ndarray, c: float) -> np.ndarray:
    # scipy's "huber": rho(z) = z if z <= 1 else 2 sqrt(z) - 1, z = (r / c)^2; cost = c^2/2 sum rho
    a = np.abs(r) / c
    return 0.5 * c * c * np.where(a <= 1, a * a, 2 * a - 1).sum(axis=1)


def _resid(p: np.ndarray, size: np.ndarray, log_ms: np.ndarray):
    a = np.exp(p[:, :1])
    b = size * np.exp(p[:, 1:])
    return np.log(a + b) - log_ms, a / (a + b), b / (a + b)


def fit_lines(
    size: np.ndarray,
    log_ms: np.ndarray,
    start: tuple[float, float],
    f_scale: float = 0.05,
    max_iter: int = 100,
    tol: float = 1e-8,
) -> np.ndarray:
    """Huber fits of ``log(ms) = log(overhead_ms + size * ms_per_byte)``, one per row.

    Parameters
    ----------
    size, log_ms
        Arrays of shape (fits, rows): the sizes in bytes and the log latencies (ms).
    start
        (overhead_ms, ms_per_byte) where every fit starts (positive).
    f_scale
        Residuals (in log units) beyond this count linearly, as in ``least_squares``.
    max_iter, tol
        Gauss-Newton steps at most; a fit stops when no parameter (in log units) moves
        more than ``tol`` (``least_squares``' default ``xtol``).

    Returns
    -------
    numpy.ndarray
        Shape (fits, 2): overhead_ms and ms_per_byte per fit (NaN where a fit has fewer
        than two distinct sizes).
    """
    size = np.asarray(size, float)
    log_ms = np.asarray(log_ms, float)
    if size.ndim != 2 or size.shape != log_ms.shape:
        raise ValueError("fit_lines needs two arrays of the same (fits, rows) shape")
    if min(start) <= 0:
        raise ValueError(f"start must be positive, got {start}")
    step = max(1, _CHUNK // max(1, size.shape[1]))  # bounded memory for long tables
    parts = [
        _fit_chunk(size[i : i + step], log_ms[i : i + step], start, float(f_scale), max_iter, tol)
        for i in range(0, len(size), step)
    ]
    return np.concatenate(parts) if parts else np.empty((0, 2))


_CHUNK = 2_000_000  # array elements per block of fits


def _fit_chunk(size, log_ms, start, c, max_iter, tol) -> np.ndarray:
    p = np.tile(np.log(np.asarray(start, float)), (len(size), 1))
    active = np.ptp(size, axis=1) > 0  # a line needs two distinct sizes
    r, j0, j1 = _resid(p, size, log_ms)
    cost = _cost(r, c)
    for _ in range(max_iter):
        # Gauss-Newton on the Huber loss: the gradient takes each residual clipped at c,
        # the curvature only the residuals inside c (outside, the loss is a straight line;
        # a trace of curvature keeps the step defined when few are inside).
        inside = np.abs(r) <= c
        h = np.where(inside, 1.0, 1e-3 * c / np.maximum(np.abs(r), 1e-300))
        h00, h01, h11 = (h * j0 * j0).sum(1), (h * j0 * j1).sum(1), (h * j1 * j1).sum(1)
        psi = np.clip(r, -c, c)
        g0, g1 = (psi * j0).sum(1), (psi * j1).sum(1)
        # A ridge keeps the step defined where a parameter stops mattering (overhead -> 0).
        ridge = 1e-9 * (h00 + h11) + 1e-300
        h00, h11 = h00 + ridge, h11 + ridge
        det = h00 * h11 - h01 * h01
        step = np.zeros_like(p)
        step[active, 0] = -(h11[active] * g0[active] - h01[active] * g1[active]) / det[active]
        step[active, 1] = -(h00[active] * g1[active] - h01[active] * g0[active]) / det[active]
        # At most a factor of e per parameter per step (a trust region, as least_squares
        # keeps): a flat direction must not throw a parameter to 0 or infinity.
        big = np.abs(step).max(axis=1, keepdims=True)
        step = step / np.maximum(big, 1.0)
        active &= big[:, 0] > tol
        if not active.any():
            break
        # Halve a step until it does not raise the loss (a step on a curved model can overshoot).
        idx = np.flatnonzero(active)
        t = np.ones(len(idx))
        for _ in range(40):
            cand = p[idx] + t[:, None] * step[idx]
            r_new, j0_new, j1_new = _resid(cand, size[idx], log_ms[idx])
            c_new = _cost(r_new, c)
            worse = c_new > cost[idx] * (1 + 1e-12)
            if not worse.any():
                break
            t[worse] /= 2
        ok = ~worse  # a fit no halving could improve has converged: it stays where it is
        idx, active[idx[worse]] = idx[ok], False
        p[idx], r[idx], j0[idx], j1[idx], cost[idx] = cand[ok], r_new[ok], j0_new[ok], j1_new[ok], c_new[ok]
    out = np.exp(p)
    flat = np.ptp(size, axis=1) == 0
    out[flat] = np.nan
    return out
