"""Find the slow copies and say why: ``detect()`` then ``explain()``.

detect() compares each row with what its size should cost. With repetitions (3 or more
timed rows of a strategy at a size) the expectation is that cell's median; with single
shots (the forum's table) it is the physical model, overhead + bytes / bandwidth, fitted
through the strategy's rows with a Cauchy loss, so neither a spike nor a stretch of slow
rows can pull it up. Residuals are
in log space, so a 100x range of latencies is handled alike, and the noise scale is the
median absolute deviation of those residuals. Only slow rows are flagged: a spike is a
copy that took longer than it should.

explain() then looks along time (``order``) for stretches of slow rows with a
change-point method (ruptures' PELT), and gives every flagged row one cause:

- ``context_init``: the first timed operation of the run, seconds not milliseconds;
- ``host_alloc_growth``: a pinned request whose power-of-two block no cached block could
  serve, so PyTorch's caching host allocator called ``cudaHostAlloc``; evidence from the
  ``num_host_alloc`` counter where the run has it, else from the sizes and their order;
- ``device_alloc``: the copy made more new device segments (``cudaMalloc``) than its
  neighbours, after ``empty_cache()``;
- ``episode``: part of a time-ordered stretch of slow rows;
- ``unexplained``: none of the above, said plainly.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from h2dlab.model import value_ms

#: A row is flagged when it is this many noise scales slower than expected ...
Z_THRESHOLD = 5.0
#: ... and at least this much slower (ratio), so that tiny but consistent deviations in
#: very quiet data are not called spikes.
MIN_RATIO = 1.5
#: Noise scale floor (log units, ~1 %): the quietest cells still jitter this much.
MIN_SIGMA = 0.01
#: Cells with this many timed rows use their own median as the expectation.
MIN_REPS = 3
#: A first operation this slow (ms) is context start-up, not an ordinary spike.
CONTEXT_INIT_MS = 50.0

PINNING_STRATEGIES = ("pin_memory", "pin_then_copy")
CAUSES = ("context_init", "host_alloc_growth", "device_alloc", "episode", "unexplained")


def _mib(n: float) -> str:
    v = n / 2**20
    return f"{v:.2f} MiB" if v < 1024 else f"{v / 1024:.2f} GiB"


def robust_curve(size: np.ndarray, log_y: np.ndarray):
    """Expected log-time for single-shot rows: the physical model, overhead + bytes /
    bandwidth, fitted with a Cauchy loss on log residuals (a spike's pull fades to
    nothing). Two parameters, so a stretch of slow rows cannot bend it to itself; a
    smoother with more freedom was tried and bent towards the sparse small sizes of
    the forum's grid. Returns a function giving log-time at any size."""
    from h2dlab.model import _fit_one

    a, b = _fit_one(size, np.exp(log_y), loss="cauchy")
    return lambda s: np.log(a + np.asarray(s, float) * b)


def detect(
    df: pd.DataFrame, *, z_threshold: float = Z_THRESHOLD, min_ratio: float = MIN_RATIO
) -> pd.DataFrame:
    """Add ``expected_ms``, ``robust_z`` and ``is_outlier`` to every row.

    Groups are (run_id, strategy). Error rows get NaN and are never flagged. Warm-up
    rows are scored against the timed rows' expectation but do not shape it.
    """
    out = df.copy()
    out["expected_ms"] = np.nan
    out["robust_z"] = np.nan
    v = value_ms(out)
    usable = (out["error"] == "") & (v > 0)
    for _, g in out[usable].groupby(["run_id", "strategy"], sort=False):
        idx = g.index
        y = np.log(v[idx].to_numpy(float))
        size = g["size_bytes"].to_numpy(float)
        train = ~g["warmup"].to_numpy(bool)
        if train.sum() < 3:
            continue
        exp_log = np.full(len(g), np.nan)
        reps = g[train].groupby("size_bytes").size()
        many = reps.index[reps >= MIN_REPS]
        if len(many):
            cell_med = pd.Series(y[train]).groupby(size[train]).median()
            m = np.isin(size, many)
            exp_log[m] = cell_med.reindex(size[m]).to_numpy()
        rest = np.isnan(exp_log)
        if rest.any():
            if len(np.unique(size[train])) >= 4:
                at = robust_curve(size[train], y[train])
                exp_log[rest] = at(size[rest])
            else:
                exp_log[rest] = np.median(y[train])
        r = y - exp_log
        sigma = max(1.4826 * float(np.nanmedian(np.abs(r[train] - np.nanmedian(r[train])))), MIN_SIGMA)
        out.loc[idx, "expected_ms"] = np.exp(exp_log)
        out.loc[idx, "robust_z"] = r / sigma
    ratio = value_ms(out) / out["expected_ms"]
    # Warm-ups are labelled already and expected to be slow: scored, never flagged.
    out["is_outlier"] = (out["robust_z"] > z_threshold) & (ratio > min_ratio) & ~out["warmup"].astype(bool)
    out["is_outlier"] = out["is_outlier"].fillna(False).astype(bool)
    return out


def _episodes(r: np.ndarray, sigma: float, min_len: int = 4) -> list[tuple[int, int]]:
    """Stretches [start, end) of slow rows in time order.

    PELT (ruptures, l2 cost) cuts the residual series where its level changes; a
    segment is slow when at least 3/4 of its rows are slow (residual above both 3
    noise scales and log 1.25), so two isolated spikes never make an episode.
    Adjacent slow segments (a decay seen as steps) are merged, and each stretch is
    grown over slow neighbours and trimmed of normal rows at its ends.
    """
    import ruptures as rpt

    n = len(r)
    if n < 2 * min_len:
        return []
    hi = r > max(3.0 * sigma, math.log(1.25))
    rc = np.clip(r, -10 * sigma, None).reshape(-1, 1)  # fast rows cannot form episodes
    pen = 3.0 * (3.0 * sigma) ** 2 * math.log(n)
    bkps = rpt.Pelt(model="l2", min_size=3, jump=1).fit(rc).predict(pen=pen)
    segs: list[list[int]] = []
    start = 0
    for end in bkps:
        if hi[start:end].mean() >= 0.75:
            if segs and segs[-1][1] == start:
                segs[-1][1] = end
            else:
                segs.append([start, end])
        start = end
    out = []
    for a, b in segs:
        while a > 0 and hi[a - 1]:
            a -= 1
        while b < n and hi[b]:
            b += 1
        while a < b and not hi[a]:
            a += 1
        while b > a and not hi[b - 1]:
            b -= 1
        if b - a >= min_len and (not out or a >= out[-1][1]):
            out.append((a, b))
    return out


def explain(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``episode`` (id or -1), ``cause`` and ``evidence`` to ``detect()``'s output.

    ``cause`` and ``evidence`` are filled for flagged rows (``is_outlier``) only;
    every other row gets empty strings. Causes with direct evidence (context start-up,
    allocator growth) are decided first; episodes are then looked for among the rows
    those causes leave unexplained, so a burst of first-time allocations is not
    called a time-correlated episode.
    """
    if "is_outlier" not in df.columns:
        df = detect(df)
    out = df.copy()
    out["episode"] = -1
    out["cause"] = ""
    out["evidence"] = ""
    v = value_ms(out)

    specific: dict[int, tuple[str, str]] = {}
    for _, run in out.groupby("run_id", sort=False):
        first_order = run["order"].min()
        for strategy, g in run.groupby("strategy", sort=False):
            g = g.sort_values(["order", "rep"], kind="stable")
            seen_buckets: set[int] = set()
            dev_typ = g["device_allocs"].median() if g["device_allocs"].notna().any() else np.nan
            for i, row in g.iterrows():
                bucket = int(math.ceil(math.log2(max(row["size_bytes"], 1))))
                new_bucket = bucket not in seen_buckets
                seen_buckets.add(bucket)
                if row["is_outlier"]:
                    found = _specific_cause(row, v[i], strategy, first_order, bucket, new_bucket, dev_typ)
                    if found:
                        specific[i] = found

    next_id = 0
    for _, g in out[out["robust_z"].notna()].groupby(["run_id", "strategy"], sort=False):
        g = g.sort_values(["order", "rep"], kind="stable")
        r = np.log(v[g.index].to_numpy(float) / g["expected_ms"].to_numpy(float))
        sigma = max(1.4826 * float(np.median(np.abs(r - np.median(r)))), MIN_SIGMA)
        r[np.isin(g.index, list(specific))] = 0.0  # explained rows are neutral here
        for a, b in _episodes(r, sigma):
            out.loc[g.index[a:b], "episode"] = next_id
            next_id += 1

    for i in out.index[out["is_outlier"]]:
        row = out.loc[i]
        cause, ev = specific.get(i) or _generic_cause(row, v[i], int(row["episode"]))
        out.at[i, "cause"] = cause
        out.at[i, "evidence"] = ev
    return out


def _slow(row, val) -> str:
    exp = row["expected_ms"]
    return f"{val:.2f} ms where {exp:.2f} ms was expected ({val / exp:.1f}x)"


def _specific_cause(row, val, strategy, first_order, bucket, new_bucket, dev_typ) -> tuple[str, str] | None:
    """context_init, host_alloc_growth or device_alloc, with evidence; else None."""
    exp = row["expected_ms"]
    slow = _slow(row, val)
    wall, event = row["wall_ms"], row["event_ms"]
    if row["order"] == first_order and row["wall_ms"] >= CONTEXT_INIT_MS:
        if np.isfinite(event):
            return "context_init", (
                f"first timed operation of the run: {wall:.1f} ms by the host clock, of which "
                f"{wall - event:.1f} ms passed before the GPU recorded the start event (CUDA context "
                f"start-up); the operation itself took {event:.2f} ms by CUDA events"
            )
        return "context_init", (
            f"first timed operation of the run, {wall:.1f} ms ({wall / exp:.0f}x the {exp:.2f} ms expected): "
            f"it includes CUDA context start-up"
        )
    block = _mib(2.0**bucket)
    if strategy in PINNING_STRATEGIES:
        allocs = row["host_allocs"]
        if np.isfinite(allocs) and allocs > 0:
            return "host_alloc_growth", (
                f"{slow}; num_host_alloc rose by {int(allocs)}: the pinned request of "
                f"{_mib(row['size_bytes'])} rounds up to a {block} block and no cached block was free in "
                f"that size, so the host allocator called cudaHostAlloc"
            )
        if not np.isfinite(allocs) and new_bucket:
            return "host_alloc_growth", (
                f"{slow}; the pinned request of {_mib(row['size_bytes'])} rounds up to a {block} block, larger "
                f"or other than any block an earlier request in this run needed, so the host allocator had to "
                f"call cudaHostAlloc (inferred from sizes and order: the table has no counters)"
            )
    dallocs = row["device_allocs"]
    if np.isfinite(dallocs) and dallocs > 0 and (not np.isfinite(dev_typ) or dallocs > dev_typ):
        pre = "empty_cache() before this copy released the cached segment, so " if row["empty_cache"] else ""
        return "device_alloc", (
            f"{slow}; {pre}the copy waited on {int(dallocs)} new cudaMalloc segment(s), where its neighbours "
            f"needed {0 if not np.isfinite(dev_typ) else int(dev_typ)}"
        )
    return None


def _generic_cause(row, val, episode) -> tuple[str, str]:
    slow = _slow(row, val)
    dallocs = row["device_allocs"]
    if episode >= 0:
        return "episode", (
            f"{slow}; one of a stretch of consecutive slow copies in time order (episode {episode}): a "
            f"time-correlated slowdown, not a property of this size"
        )
    why = []
    if np.isfinite(row["host_allocs"]) and row["host_allocs"] == 0:
        why.append("no new pinned block")
    if np.isfinite(dallocs):
        why.append(f"{int(dallocs)} new device segment(s), no more than its neighbours")
    if row["empty_cache"] and not np.isfinite(dallocs):
        why.append(
            "empty_cache() ran before it, as before every copy of its kind, and the table has no "
            "counters to tell more"
        )
    tail = "; ".join(why) if why else "the table carries no counters for it"
    return "unexplained", f"{slow}; an isolated slow copy: {tail}"


def summary(explained: pd.DataFrame) -> pd.DataFrame:
    """Flagged rows per (run, strategy) and cause."""
    f = explained[explained["is_outlier"]]
    return f.groupby(["run_id", "strategy", "cause"]).size().rename("rows").reset_index()
