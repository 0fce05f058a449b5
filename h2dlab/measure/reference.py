"""The built-in reference check: the kit's own medians beside ``torch.utils.benchmark``'s.

For each strategy and size of a finished sweep, ``torch.utils.benchmark.Timer`` times the
same copy followed by ``torch.cuda.synchronize()`` with ``blocked_autorange`` (blocks of
back-to-back calls, the median per call), in the same process. The kit's figure is the
median of its timed rows: CUDA-event time on a GPU (host clock on the CPU). The event time
may read shorter than copy + synchronize (it leaves out the launch and the wait's return),
but not several times longer: that would mean the kit's event window or its loop holds
something other than the copy (DESIGN.md, "measure like the reference").

``measure --reference`` stores :func:`compare`'s rows in the run's env.json under
``reference``; ``benchmarks/bench_transfer.py`` writes them to its results under the same key.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd
import torch

from h2dlab.measure import strategies
from h2dlab.measure.device import random_source

__all__ = ["MIN_RUN_TIME_S", "compare", "kit_medians_us", "reference_medians_us"]

#: ``blocked_autorange``'s ``min_run_time`` per (strategy, size): 0.4 s keeps ten cells
#: under ~6 s on an H200 and gives a 10 us copy thousands of calls.
MIN_RUN_TIME_S = 0.4


def kit_medians_us(df: pd.DataFrame) -> dict[tuple[str, int], tuple[float, str]]:
    """Per ``(strategy, size_bytes)``: the median of the timed rows without error, in us,
    and which clock it is (``"event"`` where ``event_ms`` is finite, else ``"wall"``)."""
    t = df[~df["warmup"].astype(bool) & (df["error"].fillna("").astype(str) == "")]
    out: dict[tuple[str, int], tuple[float, str]] = {}
    for (name, size), g in t.groupby(["strategy", "size_bytes"], sort=True):
        ev = g["event_ms"].to_numpy(dtype=float)
        ev = ev[np.isfinite(ev)]
        if len(ev):
            out[(str(name), int(size))] = (float(np.median(ev)) * 1e3, "event")
        else:
            out[(str(name), int(size))] = (float(np.median(g["wall_ms"].to_numpy(dtype=float))) * 1e3, "wall")
    return out


def reference_medians_us(
    names: Iterable[str],
    sizes: Iterable[int],
    device: str | torch.device,
    *,
    seed: int = 0,
    min_run_time_s: float = MIN_RUN_TIME_S,
) -> dict[tuple[str, int], dict[str, float]]:
    """``torch.utils.benchmark``'s time of each strategy's copy plus a synchronisation.

    Parameters
    ----------
    names, sizes
        The strategies and sizes (bytes) to time; each strategy is prepared as the sweep
        prepares it (``Strategy.prepare``), then ``strat.copy(x); torch.cuda.synchronize()``
        is the statement (no synchronisation on the CPU).
    device
        Where to copy to.
    seed
        Seeds the copied bytes (as ``measure --seed``).
    min_run_time_s
        ``blocked_autorange``'s ``min_run_time``.

    Returns
    -------
    dict
        ``(strategy, size_bytes)`` -> ``reference_median_us``, ``reference_iqr_us``,
        ``reference_blocks`` and ``reference_calls_per_block``.
    """
    from torch.utils import benchmark

    dev = torch.device(device)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    sizes = sorted(set(int(n) for n in sizes))
    src = random_source(max(sizes), seed)
    out: dict[tuple[str, int], dict[str, float]] = {}
    for name in names:
        for size in sizes:
            strat = strategies.get(name)
            x = src[:size]
            strat.prepare(x, dev)
            try:
                timer = benchmark.Timer(
                    stmt="strat.copy(x); sync()", globals={"strat": strat, "x": x, "sync": sync}
                )
                m = timer.blocked_autorange(min_run_time=min_run_time_s)
            finally:
                strat.cleanup()
            out[(name, size)] = {
                "reference_median_us": float(m.median) * 1e6,
                "reference_iqr_us": float(m.iqr) * 1e6,
                "reference_blocks": float(len(m.times)),
                "reference_calls_per_block": float(m.number_per_run),
            }
    return out


def compare(
    kit: dict[tuple[str, int], tuple[float, str]], ref: dict[tuple[str, int], dict[str, float]]
) -> list[dict[str, Any]]:
    """One row per cell both timed: ``strategy``, ``size_bytes``, ``kit_median_us``,
    ``kit_clock``, ``reference_median_us`` (and its IQR and block counts) and ``ratio``
    (kit over reference), by strategy then size."""
    rows = []
    for key in sorted(set(kit) & set(ref)):
        k_us, clock = kit[key]
        r = ref[key]
        rows.append(
            {
                "strategy": key[0],
                "size_bytes": key[1],
                "kit_median_us": k_us,
                "kit_clock": clock,
                **r,
                "ratio": k_us / r["reference_median_us"] if r["reference_median_us"] > 0 else float("nan"),
            }
        )
    return rows


def attach(df: pd.DataFrame, out: Any, device: str, seed: int = 0) -> list[dict[str, Any]]:
    """Time the reference for every (strategy, size) of the sweep ``df`` and store
    :func:`compare`'s rows in ``out``'s env.json under ``reference`` (and in
    ``df.attrs['env']``); one line per cell on stderr. Returns the rows."""
    import sys

    from h2dlab.recording import datasets

    names = list(dict.fromkeys(df["strategy"].astype(str)))
    sizes = sorted({int(n) for n in df["size_bytes"]})
    rows = compare(kit_medians_us(df), reference_medians_us(names, sizes, device, seed=seed))
    env = dict(df.attrs.get("env") or {})
    env["reference"] = rows
    df.attrs["env"] = env
    if out is not None:
        datasets.write_env(env, datasets.env_path(out))
    for r in rows:
        print(
            f"reference {r['strategy']:>22s} {r['size_bytes']:>11d} B: kit {r['kit_median_us']:10.1f} us "
            f"({r['kit_clock']}), torch.utils.benchmark {r['reference_median_us']:10.1f} us, "
            f"ratio {r['ratio']:.2f}",
            file=sys.stderr,
        )
    return rows
