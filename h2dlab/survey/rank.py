"""One rank's part of a survey: measure its GPU, alone and with its node's other GPUs,
and leave everything in files before and between collectives.

Files, in ``DIR/ranks/`` (every node must be able to write ``DIR``: a shared folder):
``rNNNNN.json`` (who this rank is, its GPU, its link and NUMA facts and its ``status``:
``started``, ``ok`` or ``error``), written before any collective and again after each
phase; ``rNNNNN-<phase>-<group>.csv.gz`` the copies of each phase (``alone``,
``together``) and group (``pinned``, ``pageable``), written row by row by the kit's own
harness (:func:`h2dlab.measure.harness.sweep`); ``rNNNNN.claim-<token>.json`` (each
process given that rank: its host and pid; a second live one measures nothing and rank 0
names both). A rank that hangs or dies thus loses only what it
had not yet written, and no other rank waits on it for longer than one barrier's timeout:
after one failed collective a rank measures on without any (``synced`` false).

``alone``: the ranks of a node take turns (barriers between turns), so each GPU copies
while its node's others idle; ``together``: every GPU of the node copies at once, each
(strategy, size) cell started by a barrier. A node with one GPU has no ``together`` phase.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import re
import signal
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from h2dlab.errors import Unavailable, UsageError
from h2dlab.measure.device import resolve_device
from h2dlab.measure.harness import sweep
from h2dlab.measure.spec import SweepSpec
from h2dlab.measure.timing import error_text
from h2dlab.recording.tableio import write_env as _write_env
from h2dlab.survey.launch import Place
from h2dlab.survey.probe import cpu_numa_nodes, gpu_facts, link_under_load, replay_count

__all__ = [
    "FAULT_VAR",
    "DuplicateRank",
    "Sync",
    "claim_file",
    "claims",
    "plan",
    "rank_file",
    "survey_rank",
    "table_file",
]

KiB, MiB, GiB = 2**10, 2**20, 2**30
#: For tests only: ``'3:kill,2:hang'`` makes global rank 3 kill itself (SIGKILL) and rank 2
#: hang (deaf to SIGTERM) right after writing its first file, as a sick node would. A rank
#: that kills itself first waits (up to a minute) for the hanging ranks' first files: its
#: launcher stops its node's other ranks when it dies, and a rank stopped that early has
#: written nothing, which would test the launch order instead of the hang.
FAULT_VAR = "H2DLAB_SURVEY_FAULT"
#: What each group copies on a GPU: pinned (the link's figures, stable) at 1 KiB for the
#: latency up to 1 GiB, pageable (the host's, they move) up to 256 MiB (1 GiB pageable
#: back to the host takes ~0.8 s a copy on the H200).
GPU_GROUPS = {
    "pinned": (("pinned_reuse", "d2h_pinned_reuse"), (KiB, 64 * MiB, 256 * MiB, GiB)),
    "pageable": (("pageable", "d2h_pageable"), (KiB, 64 * MiB, 256 * MiB)),
}
CPU_GROUPS = {"pageable": (("pageable", "d2h_pageable"), (KiB, 4 * MiB, 64 * MiB))}
PHASES = ("alone", "together")


def plan(device_type: str, sizes: tuple[int, ...] | None = None, reps: int = 10) -> dict[str, SweepSpec]:
    """The sweep of each group on a ``device_type`` (``'cuda'`` or ``'cpu'``); ``sizes``
    replaces every group's sizes (tests), ``reps`` the timed copies per cell."""
    groups = GPU_GROUPS if device_type == "cuda" else CPU_GROUPS
    return {
        g: SweepSpec(
            strategies=names, sizes=tuple(sizes or s), device=device_type, reps=reps, warmup=2, seed=0
        )
        for g, (names, s) in groups.items()
    }


def rank_file(folder: Path, rank: int) -> Path:
    """Where rank ``rank`` keeps its facts and status."""
    return Path(folder) / "ranks" / f"r{rank:05d}.json"


def table_file(folder: Path, rank: int, phase: str, group: str) -> Path:
    """Where rank ``rank`` writes the copies of one phase and group."""
    return Path(folder) / "ranks" / f"r{rank:05d}-{phase}-{group}.csv.gz"


def claim_file(folder: Path, rank: int, token: str) -> Path:
    """Where one process that was given rank ``rank`` says so (``token``: its own)."""
    return Path(folder) / "ranks" / f"r{rank:05d}.claim-{token}.json"


#: a claim holds a few facts: one larger is not read (a planted file would fill memory)
_MAX_CLAIM_BYTES = 1 << 16


def claims(folder: Path, rank: int, since: float | None = None, job_id: str = "") -> list[dict[str, Any]]:
    """The processes that claimed rank ``rank`` in this survey, oldest first: each one's
    ``host``, ``pid``, ``token`` and ``started_at``. A claim last touched before ``since``
    (``time.time()``; a rank touches its claim whenever it writes its facts) or naming
    another job than ``job_id`` (both set) is an earlier survey's in the same folder."""
    found = []
    for p in sorted((Path(folder) / "ranks").glob(f"r{rank:05d}.claim-*.json")):
        try:
            if not p.is_file() or p.stat().st_size > _MAX_CLAIM_BYTES:
                continue
            c = json.loads(p.read_text())
            mtime = p.stat().st_mtime
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(c, dict) or (since is not None and mtime < since):
            continue
        if job_id and isinstance(c.get("job_id"), str) and c["job_id"] and c["job_id"] != job_id:
            continue
        host, pid = c.get("host"), c.get("pid")
        found.append(
            {
                "host": host if isinstance(host, str) and host.isprintable() else "?",
                "pid": pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
                "token": p.name.split(".claim-", 1)[1].removesuffix(".json"),
                "started_at": c.get("started_at") if isinstance(c.get("started_at"), str) else None,
                "_mtime": mtime,
            }
        )
    return sorted(found, key=lambda c: c.pop("_mtime"))


def claimants(found: list[dict[str, Any]]) -> str:
    """The processes of :func:`claims`, in words (``node-a pid 12, node-b pid 40``)."""
    return ", ".join(f"{c['host'][:60]} pid {c['pid'] if c['pid'] is not None else '?'}" for c in found)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


class DuplicateRank(UsageError):
    """Another live process of this survey was given this process's rank (two processes,
    one ``RANK``): this one measures nothing, so that neither overwrites the other's rows."""


class Sync:
    """Start-together barriers over torch.distributed with gloo (never NCCL): from
    ``env://`` where the launcher set ``MASTER_ADDR``/``MASTER_PORT`` (torchrun), else
    from a file store in the shared folder named by the job's id (Slurm, Open MPI). A
    collective that fails or times out ends the syncing for good: the rank goes on
    alone and says so (``note``)."""

    def __init__(self, place: Place, folder: Path, timeout_s: float) -> None:
        self.world = place.world_size
        self.ok, self.note = self.world == 1, ""
        if self.world == 1:
            return
        import torch.distributed as dist

        if place.rendezvous:
            init = "env://"
        elif place.job_id:
            # the id comes from the environment: a '/' or '..' in it must not put the store
            # (a file torch.distributed writes) outside the survey's folder
            job = re.sub(r"[^A-Za-z0-9_.-]", "_", place.job_id).lstrip(".")[:100]
            init = f"file://{Path(folder).resolve() / f'.store-{job}'}"
        else:
            self.note = "no MASTER_ADDR/MASTER_PORT and no job id to name a shared store: not synced"
            return
        try:
            dist.init_process_group(
                "gloo",
                init_method=init,
                rank=place.rank,
                world_size=place.world_size,
                timeout=timedelta(seconds=timeout_s),
            )
            self.ok = True
        except Exception as exc:  # noqa: BLE001 - a rank that never came: go on unsynced
            self.note = f"the process group did not start ({error_text(exc)}): not synced"

    def barrier(self, *_: Any) -> bool:
        """Wait for every rank; False (and no collective ever again) when that fails."""
        if self.world == 1:
            return True
        if not self.ok:
            return False
        import torch.distributed as dist

        try:
            dist.barrier()
            return True
        except Exception as exc:  # noqa: BLE001 - a rank died or hung: go on unsynced
            self.ok = False
            self.note = f"a barrier failed ({error_text(exc)}): the rest not synced"
            return False

    def most(self, value: int) -> int:
        """The largest ``value`` over all ranks (``value`` itself when not synced)."""
        if self.world == 1 or not self.ok:
            return value
        import torch.distributed as dist

        t = torch.tensor([value])
        try:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        except Exception as exc:  # noqa: BLE001
            self.ok = False
            self.note = f"a collective failed ({error_text(exc)}): the rest not synced"
            return value
        return int(t.item())

    def close(self) -> None:
        if self.world > 1 and self.ok:
            import torch.distributed as dist

            dist.destroy_process_group()


def _device(device: str, place: Place) -> torch.device:
    if device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise Unavailable("no CUDA device here: survey the host copies with --device cpu")
    n = torch.cuda.device_count()
    if device == "cuda":  # one process per GPU: its local rank, or the one GPU it was given
        idx = 0 if n == 1 else place.local_rank
        if idx >= n:
            raise Unavailable(f"local rank {place.local_rank} has no GPU: this node shows {n} to it")
        return torch.device("cuda", idx)
    return resolve_device(device)


def _fault(place: Place, folder: Path) -> None:
    faults = [p.strip().partition(":") for p in os.environ.get(FAULT_VAR, "").split(",")]
    hanging = [int(r) for r, _, what in faults if r.isdigit() and what == "hang"]
    for rank, _, what in faults:
        if rank.isdigit() and int(rank) == place.rank:
            if what == "kill":
                until = time.monotonic() + 60
                while time.monotonic() < until and not all(rank_file(folder, r).exists() for r in hanging):
                    time.sleep(0.1)
                os.kill(os.getpid(), signal.SIGKILL)
            if what == "hang":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                while True:
                    time.sleep(1)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def survey_rank(
    place: Place,
    folder: Path,
    *,
    device: str = "cuda",
    sizes: tuple[int, ...] | None = None,
    reps: int = 10,
    timeout_s: float = 60.0,
    argv: list[str] | None = None,
    fresh_s: float = 300.0,
) -> dict[str, Any]:
    """Measure this rank's GPU (or host copies on the CPU) into ``folder/ranks``.

    Parameters
    ----------
    place
        Where this process sits (:func:`h2dlab.survey.launch.place_from_env`).
    folder
        The survey's folder, shared by every rank.
    device
        ``'cuda'`` (the local rank's GPU), ``'cuda:N'`` or ``'cpu'``.
    sizes, reps
        Replace the plan's sizes and timed copies per cell (:func:`plan`).
    timeout_s
        How long one barrier waits for the other ranks before this rank goes on alone.
    argv
        The command line, for each table's env.json.
    fresh_s
        A claim of this rank by another process touched within this many seconds (the
        survey's deadline) is this survey's: this process then raises
        :class:`DuplicateRank` before writing anything but its own claim.

    Returns
    -------
    dict
        What ``rNNNNN.json`` holds at the end (``status`` ``'ok'`` or ``'error'``).
        A signal (SIGTERM from the launcher) still writes it, as ``error``, and raises.
    """
    folder = Path(folder)
    (folder / "ranks").mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("H2DLAB_CENSUS_S", "0")  # the sweeps' stall census: not a survey's question
    info: dict[str, Any] = {
        **dataclasses.asdict(place),
        "status": "started",
        "error": "",
        "pid": os.getpid(),
        "started_at": _now(),
        "device": device,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch_num_threads": torch.get_num_threads(),
        "cpu_numa_nodes": cpu_numa_nodes(),
        "synced": {},
    }
    token = uuid.uuid4().hex[:12]
    mine = claim_file(folder, place.rank, token)
    mine.write_text(
        json.dumps({"host": place.host, "pid": os.getpid(), "job_id": place.job_id, "started_at": _now()})
    )
    others = []
    for c in claims(folder, place.rank, time.time() - fresh_s, place.job_id):
        if c["token"] == token:
            continue
        if c["host"] == place.host and c["pid"] is not None and not _alive(c["pid"]):
            claim_file(folder, place.rank, c["token"]).unlink(missing_ok=True)  # a restart's dead one
            continue
        others.append(c)
    if others:  # before any file of the rank is written: the first claimant's rows stay its own
        raise DuplicateRank(
            f"rank {place.rank} was given to another process of this survey too ({claimants(others)}): "
            "the launcher gave two processes one RANK; this one measured nothing (rank 0 names both)"
        )
    info["claim"] = token
    path = rank_file(folder, place.rank)

    def write_env(info: dict[str, Any], path: Path) -> None:  # the facts, and the claim kept fresh
        _write_env(info, path)
        os.utime(mine)

    write_env(info, path)  # before any collective: a rank that never gets further is still named
    _fault(place, folder)
    sync = None
    try:
        dev = _device(device, place)
        info.update(gpu_facts(dev), device=str(dev), replays_before=replay_count(dev))
        specs = plan(dev.type, sizes, reps)
        info["plan"] = {g: dataclasses.asdict(s) for g, s in specs.items()}
        write_env(info, path)
        sync = Sync(place, folder, timeout_s)
        turns = sync.most(place.local_world_size)
        synced = sync.ok
        for turn in range(turns):  # alone: the node's GPUs one after another
            synced &= sync.barrier()
            if turn == place.local_rank:
                _phase(specs, dev, folder, place, "alone", None, argv)
                info.update(link_under_load(dev))
        synced &= sync.barrier()
        info["synced"]["alone"] = synced
        write_env(info, path)
        if turns > 1:  # together: every GPU of the node at once, each cell started by a barrier
            ok_before = sync.ok
            if place.local_world_size > 1:
                _phase(specs, dev, folder, place, "together", sync.barrier, argv)
            else:  # this node's one GPU waits out the others' cells, barrier for barrier
                for spec in specs.values():
                    for _ in range(len(spec.strategies) * len(spec.sizes)):
                        sync.barrier()
            info["synced"]["together"] = ok_before and sync.ok
        info.update(replays_after=replay_count(dev), status="ok")
    except KeyboardInterrupt:
        info.update(status="error", error="stopped by a signal (the launcher ended this rank)")
        raise
    except Exception as exc:  # noqa: BLE001 - the rank's row says why; the fleet goes on
        info.update(status="error", error=error_text(exc))
    finally:
        info["sync_note"] = sync.note if sync is not None else ""
        info["finished_at"] = _now()
        write_env(info, path)
        if sync is not None:
            sync.close()
    return info


def _phase(specs, dev, folder, place, phase, before_cell, argv) -> None:
    for group, spec in specs.items():
        spec = dataclasses.replace(spec, device=str(dev))
        df = sweep(
            spec,
            out=table_file(folder, place.rank, phase, group),
            force=True,
            progress=False,
            argv=argv,
            before_cell=before_cell,
        )
        if df.attrs.get("stopped"):
            raise KeyboardInterrupt
