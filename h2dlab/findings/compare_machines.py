"""A recording beside the bundled H200 and the forum's A100: one tidy table.

``compare(rec)`` puts the same few numbers side by side for each machine: bandwidth per
strategy at 1 GiB (or the largest size swept), the small-copy floor, what
``pin_memory()`` costs per GiB, and the pinned-cache growth spikes of the forum protocol
run in size order. A machine that lacks the data for a number (the A100 has only the
forum's table) simply has no row for it. No torch here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from h2dlab.explain.model import timed, value_ms
from h2dlab.findings.advice import bandwidth, small_copy_floor
from h2dlab.findings.claims import host_alloc_growth
from h2dlab.recording import datasets
from h2dlab.recording.env import day_span
from h2dlab.recording.session import BUNDLED, Recorded

__all__ = ["COLUMNS", "METRICS", "compare", "definitions", "summary", "wide"]

#: The table's columns: one row per (machine, metric, strategy). ``date``: the day (or
#: ``first to last`` day) of the runs a row reads, from their env.json; "" where it gives none.
COLUMNS = ["machine", "gpu", "date", "metric", "strategy", "size_bytes", "value", "lo", "hi", "unit", "n"]
#: metric -> what it means (units are GB/s = 1e9 bytes/s, µs, ms).
METRICS = {
    "bandwidth": "GB/s at 1 GiB (or the largest size swept), median; lo/hi from the quartiles",
    "small_copy": "µs per copy at the smallest size swept (CUDA events, else host clock), median",
    "forum_bandwidth": "GB/s of the forum protocol's copies at its largest size, median over runs",
    "pin_cost": "ms per GiB of the forum protocol's pin_memory() at sizes >= 64 MiB, median",
    "growth_spikes": "new pinned blocks in the forum protocol run in size order (first run), count",
    "growth_cost": "ms per MiB that a new pinned block of >= 16 MiB added in that run, median over blocks",
}
_GIB = 2**30


def _row(machine, gpu, metric, strategy, size, value, lo=np.nan, hi=np.nan, n=1) -> dict:
    unit = {"bandwidth": "GB/s", "forum_bandwidth": "GB/s", "small_copy": "µs", "pin_cost": "ms/GiB"}
    unit |= {"growth_spikes": "blocks", "growth_cost": "ms/MiB"}
    return dict(
        machine=machine, gpu=gpu, metric=metric, strategy=strategy, size_bytes=size,
        value=float(value), lo=float(lo), hi=float(hi), unit=unit[metric], n=int(n),
    )  # fmt: skip


def _sweep_rows(sweep: pd.DataFrame, machine: str, gpu: str) -> list[dict]:
    rows = []
    m = bandwidth(sweep).table
    sizes = sorted(m.size_bytes.unique())
    at = _GIB if _GIB in sizes else max(s for s in sizes if s <= _GIB) if min(sizes) <= _GIB else sizes[0]
    for _, r in m[m.size_bytes == at].iterrows():
        rows.append(
            _row(machine, gpu, "bandwidth", r.strategy, at, r.gbps, r.gbps_lo, r.gbps_hi, r.get("n", 1))
        )
    floor = small_copy_floor(sweep).table
    t = timed(sweep)
    smallest = int(t.size_bytes.min())
    n = t[t.size_bytes == smallest].groupby("strategy").size()
    for _, r in floor.iterrows():
        rows.append(
            _row(
                machine, gpu, "small_copy", r.strategy, smallest, r.event_us, r.q1_us, r.q3_us, n[r.strategy]
            )
        )
    return rows


def _forum_rows(forum: pd.DataFrame, machine: str, gpu: str) -> list[dict]:
    rows = []
    d = forum[forum.error == ""].assign(_ms=value_ms(forum[forum.error == ""]))
    d = d[d._ms > 0]
    top = int(d.size_bytes.max())
    for s in ("pinned_to_cuda", "direct_to_cuda"):
        v = d[(d.strategy == s) & (d.size_bytes == top)]._ms
        if len(v):
            gbps = top / v / 1e6
            rows.append(
                _row(machine, gpu, "forum_bandwidth", s, top, gbps.median(), gbps.min(), gbps.max(), len(v))
            )
    pin = d[(d.strategy == "pin_memory") & (d.size_bytes >= 64 * 2**20)]
    if len(pin):
        per = pin._ms / (pin.size_bytes / _GIB)
        q1, q3 = per.quantile([0.25, 0.75])
        rows.append(_row(machine, gpu, "pin_cost", "pin_memory", np.nan, per.median(), q1, q3, len(per)))
    names = forum.attrs.get("run_names") or {}
    ascending = [rid for rid in forum.run_id.unique() if not str(names.get(rid, "")).startswith("shuffled")]
    if ascending:
        first = forum[forum.run_id == sorted(ascending, key=lambda r: str(names.get(r, r)))[0]]
        g = host_alloc_growth(first, strategies=("pin_memory",))
        rows.append(_row(machine, gpu, "growth_spikes", "pin_memory", np.nan, g["new_blocks"]))
        c = g["ms_per_mib"]
        if c["n"]:
            rows.append(
                _row(machine, gpu, "growth_cost", "pin_memory", np.nan, c["median"], c["q1"], c["q3"], c["n"])
            )
    return rows


def _days(df: pd.DataFrame) -> str:
    """The day of ``df``'s runs (``first to last`` where they differ), from their env.json's
    ``date``; "" where none gives one."""
    envs = df.attrs.get("envs") if isinstance(df.attrs.get("envs"), dict) else {}
    found = [e for e in envs.values() if isinstance(e, dict)]
    one = df.attrs.get("env")
    found = found or ([one] if isinstance(one, dict) else [])
    return day_span(found)


def _dated(rows: list[dict], source: pd.DataFrame) -> list[dict]:
    return [{**r, "date": _days(source)} for r in rows]


def summary(rec: Recorded | pd.DataFrame, machine: str) -> pd.DataFrame:
    """The comparison's rows for one recording (or for a forum-protocol table alone)."""
    if isinstance(rec, pd.DataFrame):  # a forum table such as forum_a100
        gpu = str(datasets.run_env(rec).get("gpu_name") or "?").split(" (")[0]
        return pd.DataFrame(_dated(_forum_rows(rec, machine, gpu), rec), columns=COLUMNS)
    gpu = str(rec.machine().get("gpu_name") or "no GPU")
    rows: list[dict] = []
    if rec.has("sweep"):
        # the run every notebook's sweep figure reads; a recording without it (the plan
        # retired pow2) must not fall back to all its sweep runs pooled together
        run = next((r for r in ("pow2-interleaved", "pow2") if rec.has("sweep", r)), None)
        sweep = rec.table("sweep", run) if run else rec.table("sweep")
        rows += _dated(_sweep_rows(sweep, machine, gpu), sweep)
    if rec.has("forum"):
        forum = rec.table("forum")
        rows += _dated(_forum_rows(forum, machine, gpu), forum)
    return pd.DataFrame(rows, columns=COLUMNS)


def compare(rec: Recorded | str | None = None, *, label: str | None = None) -> pd.DataFrame:
    """A recording beside the bundled H200 recording and the forum's A100 table.

    Parameters
    ----------
    rec
        A recording (``session.recording(...)``) or its folder; ``None``: the two
        references alone.
    label
        The recording's name in the ``machine`` column (default: its folder's name).

    Returns
    -------
    pandas.DataFrame
        Tidy rows (:data:`COLUMNS`), one per (machine, metric, strategy); metrics in
        :data:`METRICS`. The references' machines are ``"H200 (bundled)"`` and
        ``"A100 (forum)"``.
    """
    parts = []
    if rec is not None:
        rec = rec if isinstance(rec, Recorded) else Recorded(rec)
        parts.append(summary(rec, label or rec.name))
    parts.append(summary(Recorded(BUNDLED), "H200 (bundled)"))
    parts.append(summary(datasets.load("forum_a100"), "A100 (forum)"))
    return pd.concat(parts, ignore_index=True)


def wide(table: pd.DataFrame) -> pd.DataFrame:
    """``compare()``'s table with one column per machine (values rounded to 0.01), metrics as
    rows in their order, for a notebook to show."""
    keys = ["metric", "strategy", "unit"]
    return table.pivot_table(index=keys, columns="machine", values="value", sort=False).round(2)


def definitions() -> pd.DataFrame:
    """What each metric of ``compare()`` reads (:data:`METRICS`), one row each."""
    return pd.Series(METRICS, name="what each metric reads").rename_axis("metric").to_frame()
