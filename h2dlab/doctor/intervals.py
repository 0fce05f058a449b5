"""Interval arithmetic on sorted arrays: union, covered length, what is left uncovered.

Every function sorts once and answers with ``searchsorted``: O((n + m) log m), never a
pair-by-pair comparison. Intervals are half-open ``[start, end)`` in any one unit.
"""

from __future__ import annotations

import numpy as np

__all__ = ["covered", "merge", "subtract"]


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as sorted, disjoint ``(starts, ends)``; empty ones dropped."""
    s = np.asarray(starts, float)
    e = np.asarray(ends, float)
    keep = e > s
    s, e = s[keep], e[keep]
    if not len(s):
        return s, e
    o = np.argsort(s, kind="stable")
    s, e = s[o], np.maximum.accumulate(e[o])
    # a new block starts where an interval begins after every earlier one has ended
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    idx = np.flatnonzero(new)
    last = np.r_[idx[1:] - 1, len(s) - 1]
    return s[idx], e[last]


def covered(union: tuple[np.ndarray, np.ndarray], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How much of each ``[a_i, b_i)`` the disjoint sorted ``union`` covers."""
    us, ue = union
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    if not len(us):
        return np.zeros(np.broadcast(a, b).shape)
    cum = np.r_[0.0, np.cumsum(ue - us)]

    def upto(t: np.ndarray) -> np.ndarray:  # covered length of (-inf, t)
        k = np.searchsorted(us, t, side="right")
        j = np.maximum(k - 1, 0)
        part = np.clip(t - us[j], 0.0, ue[j] - us[j])
        return np.where(k > 0, cum[j] + part, 0.0)

    return np.maximum(upto(np.maximum(a, b)) - upto(a), 0.0)


def subtract(a: float, b: float, union: tuple[np.ndarray, np.ndarray]) -> list[tuple[float, float]]:
    """The parts of ``[a, b)`` that ``union`` leaves uncovered (for drawing)."""
    us, ue = union
    i = np.searchsorted(ue, a, side="right")
    out, t = [], a
    while i < len(us) and us[i] < b:
        if us[i] > t:
            out.append((t, float(us[i])))
        t = max(t, float(ue[i]))
        i += 1
    if t < b:
        out.append((t, b))
    return out
