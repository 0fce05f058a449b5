"""The fleet's GPUs, one row each, and which are sick and why.

:func:`gpu_table` reduces the fleet table to one row per rank: the GB/s of the median
copy at each group's largest size (``h2d_pinned_alone_gbps``, ...), its coefficient of
variation (``..._cv``), the small-copy latency and the rank's facts. :func:`judge` flags a
GPU, each flag with a sentence a person can check, when

- ``slow``: a bandwidth is below :data:`PEER_RATIO` x the median of its identical GPUs
  (same ``gpu_name``, at least :data:`MIN_PEERS`), or its robust z (0.6745 (x - median) /
  MAD) is below :data:`ROBUST_Z`; the MAD is floored at :data:`MAD_FLOOR` of the median so
  that a fleet of near-identical links does not flag noise (a z of -3.5 then means at
  least about 5 % below); the small-copy latency likewise, above;
- ``link_degraded``: the link ran below the generation or width NVML says the GPU and
  its slot can reach (``MaxPcieLink*``), read while copies ran;
- ``wrong_numa``: the process's CPUs lie wholly on other NUMA nodes than the GPU's;
- ``replays``: the PCIe replay counter rose during the survey;
- ``unsteady``: a pinned bandwidth cell measured alone varied more than :data:`CV_MAX`
  (pageable cells only where no pinned copy was made, on the CPU: pageable copies vary with
  the host, 4-9 % at 256 MiB in the bundled H200 recording);
- ``regressed`` (with a baseline): a bandwidth below :data:`BASELINE_RATIO` x the same
  GPU's in a previous survey;
- ``error``, ``no_result``: the rank measured nothing, or not everything.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "BASELINE_RATIO",
    "CV_MAX",
    "FLAGS",
    "MAD_FLOOR",
    "MIN_PEERS",
    "PEER_RATIO",
    "ROBUST_Z",
    "gpu_table",
    "judge",
    "metric_columns",
]

PEER_RATIO = 0.9
ROBUST_Z = -3.5
MAD_FLOOR = 0.01
MIN_PEERS = 3
CV_MAX = 0.05
BASELINE_RATIO = 0.95
FLAGS = ("error", "no_result", "link_degraded", "wrong_numa", "replays", "slow", "unsteady", "regressed")
_FACTS = (
    "host",
    "local_rank",
    "node_rank",
    "gpu_uuid",
    "gpu_pci_bus_id",
    "gpu_name",
    "gpu_numa_node",
    "cpu_numa_nodes",
    "link_gen_load",
    "link_width_load",
    "link_gen_max",
    "link_width_max",
    "link_source",
    "replays_before",
    "replays_after",
    "omp_num_threads",
)


def _group_of(strategy: str) -> str:
    return "pinned" if "pinned" in strategy else "pageable"


def metric_columns(gpus: pd.DataFrame) -> list[str]:
    """The bandwidth columns of a :func:`gpu_table` (``*_gbps``), in order."""
    return [c for c in gpus.columns if c.endswith("_gbps")]


def gpu_table(fleet: pd.DataFrame) -> pd.DataFrame:
    """One row per rank of a fleet table: its facts, ``status`` (``ok`` only when every
    cell was measured), each bandwidth (GB/s of the median timed copy at the group's
    largest size; CUDA events where there are any, else the host clock), its ``_cv``
    and ``_n`` (copies), and ``latency_us`` (median of the smallest host-to-device copy
    alone, pinned where measured)."""
    df = fleet.copy()
    df["error"] = df["error"].fillna("")
    df["t_ms"] = df["event_ms"].where(df["event_ms"].notna(), df["wall_ms"])
    df["group"] = df["strategy"].map(_group_of)
    facts = [c for c in _FACTS if c in df.columns]
    out = df.groupby("rank", sort=True)[facts].first()
    states = df.groupby("rank")["status"].agg(lambda s: set(s.fillna("")))
    out["status"] = states.map(lambda s: "ok" if s == {"ok"} else ("error" if "error" in s else "no result"))
    errs = df[df["error"] != ""].groupby("rank")["error"].first()
    out["error"] = errs.reindex(out.index).fillna("")
    timed = df[(df["error"] == "") & ~df["warmup"].astype(bool) & df["t_ms"].notna()]
    cell = ["rank", "phase", "group", "direction"]
    top = timed[timed["size_bytes"] == timed.groupby(cell)["size_bytes"].transform("max")]
    agg = top.groupby(cell).agg(
        size=("size_bytes", "first"), med=("t_ms", "median"), mean=("t_ms", "mean"),
        std=("t_ms", "std"), n=("t_ms", "size"),
    )  # fmt: skip
    agg = agg.reset_index()
    agg["name"] = agg["direction"] + "_" + agg["group"] + "_" + agg["phase"]
    agg["gbps"] = agg["size"] / agg["med"] / 1e6
    agg["cv"] = agg["std"] / agg["mean"]
    for what in ("gbps", "cv", "n"):
        wide = agg.pivot(index="rank", columns="name", values=what)
        wide.columns = [f"{c}_{what}" for c in wide.columns]
        out = out.join(wide)
    h2d = timed[(timed["direction"] == "h2d") & (timed["phase"] == "alone")]
    pinned = h2d[h2d["group"] == "pinned"]
    pick = pd.concat([pinned, h2d[~h2d["rank"].isin(pinned["rank"])]])
    small = pick[pick["size_bytes"] == pick.groupby("rank")["size_bytes"].transform("min")]
    if len(small):
        out["latency_us"] = small.groupby("rank")["t_ms"].median() * 1e3
    out = out.reset_index()
    metrics = sorted(c for c in out.columns if c.endswith("_gbps"))
    extra = sorted(c for c in out.columns if c.endswith(("_cv", "_n")))
    rest = [c for c in out.columns if c not in metrics and c not in extra]
    return out[rest + metrics + extra]


def _label(metric: str) -> str:
    direction, group, phase = metric.removesuffix("_gbps").split("_", 2)
    where = "alone" if phase == "alone" else "with its node's GPUs copying too"
    return f"{direction.upper()} {group} ({where})"


def _known(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and np.isnan(v)) and v != ""


def _nodes(text: Any) -> set[int]:
    if not _known(text):
        return set()
    return {int(float(x)) for x in str(text).split(",") if x.strip()}


def judge(gpus: pd.DataFrame, baseline: pd.DataFrame | None = None) -> pd.DataFrame:
    """``gpus`` (:func:`gpu_table`) with ``flag`` (flag names, comma-separated, in
    :data:`FLAGS` order; empty when healthy), ``reason`` (one sentence per flag) and, per
    bandwidth, ``<metric>_peer_ratio`` and ``<metric>_z``.

    Parameters
    ----------
    gpus
        One row per GPU.
    baseline
        A previous survey's :func:`gpu_table`: adds ``regressed`` where the same GPU
        (by ``gpu_uuid``, else host and local rank) lost more than 5 %.
    """
    out = gpus.copy()
    found: dict[int, dict[str, str]] = {i: {} for i in out.index}
    peers = out["gpu_name"].where(out["gpu_name"].map(_known), "no GPU (host copies)")
    for metric in [*metric_columns(out), *(["latency_us"] if "latency_us" in out else [])]:
        higher_better = metric != "latency_us"
        x = out[metric].astype(float)
        med = x.groupby(peers).transform("median")
        n = x.groupby(peers).transform("count")
        mad = (x - med).abs().groupby(peers).transform("median").clip(lower=MAD_FLOOR * med)
        z = 0.6745 * (x - med) / mad
        ratio = x / med
        if higher_better:
            out[f"{metric}_peer_ratio"], out[f"{metric}_z"] = ratio, z
            bad = (n >= MIN_PEERS) & ((ratio < PEER_RATIO) | (z < ROBUST_Z))
        else:
            bad = (n >= MIN_PEERS) & ((ratio > 1 / PEER_RATIO) | (z > -ROBUST_Z))
        for i in out.index[bad.fillna(False).to_numpy()]:
            if higher_better:
                said = (
                    f"{_label(metric)} ran at {x[i]:.1f} GB/s, {ratio[i]:.2f}x the median of its "
                    f"{int(n[i])} identical GPUs ({med[i]:.1f} GB/s; robust z {z[i]:.1f})."
                )
            else:
                said = (
                    f"its smallest copy took {x[i]:.1f} us, {ratio[i]:.2f}x the median of its "
                    f"{int(n[i])} identical GPUs ({med[i]:.1f} us; robust z {z[i]:.1f})."
                )
            found[i]["slow"] = (found[i].get("slow", "") + " " + said).strip()
    for i, r in out.iterrows():
        if r.get("status") == "error":
            found[i]["error"] = f"the rank failed: {r.get('error') or 'no reason given'}."
        elif r.get("status") == "no result":
            found[i]["no_result"] = f"{str(r.get('error') or 'no result').rstrip('.')}."
        gen, width = r.get("link_gen_load"), r.get("link_width_load")
        gmax, wmax = r.get("link_gen_max"), r.get("link_width_max")
        if all(_known(v) for v in (gen, width, gmax, wmax)) and (gen < gmax or width < wmax):
            found[i]["link_degraded"] = (
                f"its PCIe link ran at Gen{int(gen)} x{int(width)} while copies ran, below the "
                f"Gen{int(gmax)} x{int(wmax)} that the GPU and its slot can reach"
                + (" (the kernel's sysfs)." if r.get("link_source") == "sysfs" else " (NVML).")
            )
        gpu_node, cpu_nodes = r.get("gpu_numa_node"), _nodes(r.get("cpu_numa_nodes"))
        if _known(gpu_node) and cpu_nodes and int(gpu_node) not in cpu_nodes:
            found[i]["wrong_numa"] = (
                f"the GPU hangs off NUMA node {int(gpu_node)} but the process ran on the CPUs of node(s) "
                f"{', '.join(map(str, sorted(cpu_nodes)))}: every copy crosses the link between sockets."
            )
        before, after = r.get("replays_before"), r.get("replays_after")
        if _known(before) and _known(after) and after > before:
            found[i]["replays"] = (
                f"the PCIe replay counter rose from {int(before)} to {int(after)} during the survey: "
                "the link resent packets it had corrupted."
            )
        alone = [m for m in metric_columns(out) if m.endswith("_alone_gbps") and _known(r.get(m))]
        pinned = [m for m in alone if "_pinned_" in m]
        for metric in pinned or alone:  # pageable copies vary with the host (4-9 % on the H200)
            cv = r.get(metric.removesuffix("_gbps") + "_cv")
            if _known(cv) and cv > CV_MAX:
                said = (
                    f"{_label(metric)} varied by {cv:.0%} (coefficient of variation) over its "
                    f"{int(r.get(metric.removesuffix('_gbps') + '_n'))} copies, above {CV_MAX:.0%}."
                )
                found[i]["unsteady"] = (found[i].get("unsteady", "") + " " + said).strip()
    if baseline is not None and len(baseline):
        _regressions(out, baseline, found)
    out["flag"] = [",".join(f for f in FLAGS if f in found[i]) for i in out.index]
    out["reason"] = [" ".join(found[i][f] for f in FLAGS if f in found[i]) for i in out.index]
    return out


def _key(df: pd.DataFrame) -> pd.Series:
    where = df["host"].astype(str) + "/" + df["local_rank"].astype("Int64").astype(str)
    return pd.Series(
        np.where(df["gpu_uuid"].map(_known), df["gpu_uuid"].astype(object), where), index=df.index
    )


def _regressions(out: pd.DataFrame, baseline: pd.DataFrame, found: dict[int, dict[str, str]]) -> None:
    before = baseline.assign(_key=_key(baseline)).drop_duplicates("_key").set_index("_key")
    keys = _key(out)
    for metric in metric_columns(out):
        if metric not in before:
            continue
        for i in out.index:
            k = keys[i]
            if k not in before.index:
                continue
            x, b = out.at[i, metric], before.at[k, metric]
            if _known(x) and _known(b) and b > 0 and x / b < BASELINE_RATIO:
                said = f"{_label(metric)} ran at {x:.1f} GB/s, {x / b:.2f}x its {b:.1f} GB/s in the baseline survey."
                found[i]["regressed"] = (found[i].get("regressed", "") + " " + said).strip()
