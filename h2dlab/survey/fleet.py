"""Rank 0's part: wait for the ranks' files until a deadline, then make the fleet table.

The fleet table is a measurement table (DESIGN.md: one row per timed copy, read by
:func:`h2dlab.recording.datasets.read` like any other) with the survey's columns added: each rank
is a run (``run_id`` ``<survey>-rNNNNN``), ``world`` how many GPUs of its node copied
at once (1: ``alone``). A (strategy, size) cell a rank left
unmeasured still has a row, with ``status`` ``error`` (the rank caught an error, said
in ``error``) or ``no result`` (the rank wrote nothing more by the deadline: it hung,
died, or never started); a rank's copies are never dropped because another failed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from h2dlab.errors import UsageError
from h2dlab.escape import terminal_text
from h2dlab.measure import strategies
from h2dlab.measure.recorder import existing_rows
from h2dlab.measure.spec import SweepSpec
from h2dlab.recording.schema import SchemaError
from h2dlab.survey.rank import PHASES, claimants, claims, rank_file, table_file

__all__ = ["FLEET_NAME", "RANK_COLUMNS", "assemble", "read_rank", "wait_for_ranks"]

FLEET_NAME = "fleet.csv.gz"
#: What each row says about its rank (besides the copy), in this order.
RANK_COLUMNS = (
    "host",
    "rank",
    "local_rank",
    "node_rank",
    "phase",
    "status",
    "flag",
    "reason",
    "gpu_uuid",
    "gpu_pci_bus_id",
    "gpu_name",
    "gpu_numa_node",
    "cpu_numa_nodes",
    "link_gen_load",
    "link_width_load",
    "link_gen_max",
    "link_width_max",
    "link_gen_device_max",
    "link_source",
    "replays_before",
    "replays_after",
    "omp_num_threads",
    "launcher",
    "synced",
)
FINAL = ("ok", "error")


#: The type each fact of a rank file must have (None always allowed): a field of another
#: type (a damaged or planted file in the shared folder) is read as unknown, so that one
#: rank's file cannot stop rank 0 from writing every other rank's rows.
_TEXT_FACTS = (
    "host", "gpu_uuid", "gpu_pci_bus_id", "gpu_name", "link_source", "launcher", "status",
    "error", "started_at", "finished_at", "job_id", "omp_num_threads", "sync_note", "device",
)  # fmt: skip
_INT_FACTS = (
    "local_rank", "node_rank", "gpu_numa_node", "link_gen_load", "link_width_load", "link_gen_max",
    "link_width_max", "link_gen_device_max", "replays_before", "replays_after",
)  # fmt: skip
_MAX_INT = 2**53
#: a rank file holds a few kB of facts: one larger is not read (a planted file would fill memory)
_MAX_RANK_FILE_BYTES = 1 << 20
#: more GPUs on one node than any launcher gives one node
_MAX_LOCAL_WORLD = 4096


def _whole(v: Any, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _checked(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` with every fact of the wrong type or out of range set to None (named in
    ``damaged_fields``)."""
    bad = [k for k in _TEXT_FACTS if info.get(k) is not None and not isinstance(info[k], str)]
    bad += [k for k in _INT_FACTS if info.get(k) is not None and not _whole(info[k], -1, _MAX_INT)]
    if info.get("local_world_size") is not None and not _whole(info["local_world_size"], 1, _MAX_LOCAL_WORLD):
        bad.append("local_world_size")
    numa = info.get("cpu_numa_nodes")
    if numa is not None and not (isinstance(numa, list) and all(_whole(n, 0, _MAX_INT) for n in numa)):
        bad.append("cpu_numa_nodes")
    synced = info.get("synced")
    if synced is not None and not (
        isinstance(synced, dict) and all(isinstance(v, bool) for v in synced.values())
    ):
        bad.append("synced")
    if bad:
        info = {**info, **dict.fromkeys(bad), "damaged_fields": bad}
    # text is printed on rank 0's terminal and stored in the table: no control character
    # (an escape sequence drives a terminal), no right-to-left override
    return {k: _printable(v) if k in _TEXT_FACTS and isinstance(v, str) else v for k, v in info.items()}


def _printable(text: str) -> str:
    """``text`` with tabs and line breaks as spaces and every other character a terminal acts
    on as U+FFFD (``escape.terminal_text``): it is stored in the table and printed."""
    return terminal_text(text.translate(_SPACES), replacement="\ufffd")


_SPACES = {9: " ", 10: " ", 13: " "}


def read_rank(folder: Path, rank: int) -> dict[str, Any] | None:
    """Rank ``rank``'s facts and status, or None where it wrote none (or a damaged one).
    A fact of the wrong type reads as None (:func:`_checked`)."""
    path = rank_file(folder, rank)
    try:
        if not path.is_file():  # a device or a pipe in the shared folder (/dev/zero, a FIFO) is no rank file
            return None
        with open(path, "rb") as fh:
            data = fh.read(_MAX_RANK_FILE_BYTES + 1)
        if len(data) > _MAX_RANK_FILE_BYTES:
            return None
        info = json.loads(data)
    except (OSError, ValueError, RecursionError):
        return None
    return _checked(info) if isinstance(info, dict) else None


def wait_for_ranks(
    folder: Path, world: int, deadline_at: float, poll_s: float = 0.5
) -> dict[int, dict[str, Any] | None]:
    """Every rank's facts once each has finished (``ok`` or ``error``) or at
    ``deadline_at`` (``time.monotonic()``), whichever comes first."""
    infos: dict[int, dict[str, Any] | None] = dict.fromkeys(range(world))
    while True:
        for r in [r for r, i in infos.items() if i is None or i.get("status") not in FINAL]:
            infos[r] = read_rank(folder, r)
        if all(i is not None and i.get("status") in FINAL for i in infos.values()):
            return infos
        if time.monotonic() >= deadline_at:
            return infos
        time.sleep(poll_s)


def _measured(folder: Path, rank: int, phase: str, group: str) -> pd.DataFrame | None:
    try:
        df, _ = existing_rows(table_file(folder, rank, phase, group))
    except (UsageError, SchemaError, OSError):
        return None  # a damaged table: its cells get rows saying so below
    return df if df is not None and len(df) else None


def _why(rank: int, info: dict[str, Any] | None, deadline_s: float | None) -> tuple[str, str]:
    """(status, reason) for a rank's unmeasured cells."""
    if info is None:
        within = f"within {deadline_s:g} s" if deadline_s is not None else "before rank 0 was stopped"
        return "no result", (
            f"no result: rank {rank} wrote nothing {within} (it never started, or cannot write the survey's folder)"
        )
    if info.get("status") == "error":
        return "error", str(info.get("error") or "error: unknown")
    if deadline_s is None:  # rank 0 was stopped before the deadline
        return "no result", (
            f"no result: rank {rank} on {info.get('host')} started at {info.get('started_at')} and had "
            "not finished when rank 0 was stopped by a signal"
        )
    return "no result", (
        f"no result: rank {rank} on {info.get('host')} started at {info.get('started_at')} and had "
        f"not finished {deadline_s:g} s after rank 0 began (hung, killed, or slower than the deadline)"
    )


def assemble(
    folder: Path,
    infos: dict[int, dict[str, Any] | None],
    specs: dict[str, SweepSpec],
    survey_id: str,
    deadline_s: float | None,
    *,
    since: float | None = None,
    job_id: str = "",
) -> pd.DataFrame:
    """The fleet table from the ranks' files (``flag`` and ``reason`` still empty).

    A rank that two or more processes claimed (:func:`h2dlab.survey.rank.claims`: one
    ``RANK`` given twice) has every row ``status`` ``error``, its ``error`` naming them:
    which GPU made its copies is unknown. ``attrs['duplicates']``: rank -> its claims.

    Parameters
    ----------
    folder
        The survey's folder.
    infos
        Each rank's facts (:func:`wait_for_ranks`), None for a rank that wrote none.
    specs
        The plan every rank ran (:func:`h2dlab.survey.rank.plan`): its cells are the
        rows a rank that measured nothing still gets.
    survey_id
        Prefix of each rank's ``run_id``.
    deadline_s
        The deadline, for the reason of a missing rank (None: rank 0 was stopped before it).
    since, job_id
        Which claims are this survey's (:func:`h2dlab.survey.rank.claims`).
    """
    frames, duplicates = [], {}
    for rank, info in sorted(infos.items()):
        claimed = claims(folder, rank, since, job_id)
        twice = None
        if len(claimed) > 1:
            duplicates[rank] = claimed
            twice = (
                f"rank {rank} was claimed by {len(claimed)} processes ({claimants(claimed)}): the "
                "launcher gave two processes one RANK, so which GPU made this rank's rows is unknown"
            )
            info = {**(info or {}), "status": "error", "error": twice}
        local_world = int(info.get("local_world_size") or 1) if info else 1
        status, why = _why(rank, info, deadline_s)
        final = info is not None and info.get("status") == "ok"
        parts = []
        for phase in PHASES:
            if phase == "together" and local_world < 2:
                continue
            world = 1 if phase == "alone" else local_world
            for group, spec in specs.items():
                got = _measured(folder, rank, phase, group)
                have = set() if got is None else set(zip(got["strategy"], got["size_bytes"], strict=True))
                if got is not None:
                    parts.append(got.assign(phase=phase, world=world))
                missing = [(s, n) for s in spec.strategies for n in spec.sizes if (s, n) not in have]
                if missing:
                    reason = why if not final else "error: the rank finished without measuring this cell"
                    parts.append(
                        pd.DataFrame(
                            {
                                "strategy": [s for s, _ in missing],
                                "size_bytes": [n for _, n in missing],
                                "direction": [strategies.direction_of(s) for s, _ in missing],
                                "shape": "",
                                "dtype": spec.dtype,
                                "rep": 0,
                                "warmup": False,
                                "t_s": np.nan,
                                "wall_ms": np.nan,
                                "event_ms": np.nan,
                                "host_allocs": np.nan,
                                "device_allocs": np.nan,
                                "empty_cache": False,
                                "n_tensors": 1,
                                "error": reason,
                                "phase": phase,
                                "world": world,
                            }
                        )
                    )
        df = pd.concat(parts, ignore_index=True)
        df["order"] = np.arange(len(df))  # one timeline per rank: alone's cells, then together's
        df["run_id"] = f"{survey_id}-r{rank:05d}"
        if twice is not None:  # no row of it stands for one GPU
            df["error"] = df["error"].fillna("").mask(df["error"].fillna("") == "", twice)
        ok = df["error"].fillna("") == ""
        df["status"] = np.where(ok, "ok", "error" if status == "error" or final else status)
        info = info or {}
        for col in RANK_COLUMNS:
            if col in ("phase", "status"):
                continue
            value = info.get(col)
            if col == "rank":
                value = rank
            elif col == "cpu_numa_nodes":
                value = ",".join(map(str, value)) if isinstance(value, list) else ""
            elif col == "synced":
                synced = info.get("synced") or {}
                df[col] = [bool(synced.get(p, False)) for p in df["phase"]]
                continue
            elif col in ("flag", "reason"):
                value = ""
            df[col] = (
                "" if value is None and col in ("host", "gpu_uuid", "gpu_pci_bus_id", "gpu_name") else value
            )
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    out.attrs["duplicates"] = duplicates
    return out
