"""Where this process sits in the fleet, read from the launcher's environment.

No launcher is ours: ``torchrun`` (torch.distributed.elastic) sets ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` (the node),
``MASTER_ADDR``/``MASTER_PORT`` and ``TORCHELASTIC_RUN_ID``; Slurm's ``srun`` sets
``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NTASKS``, ``SLURM_NODEID`` (and
``SLURM_STEP_TASKS_PER_NODE`` or ``SLURM_TASKS_PER_NODE``, e.g. ``2(x4)``); Open MPI's
``mpirun`` sets ``OMPI_COMM_WORLD_RANK``, ``OMPI_COMM_WORLD_LOCAL_RANK``,
``OMPI_COMM_WORLD_SIZE`` and ``OMPI_COMM_WORLD_LOCAL_SIZE``. A plain process is rank 0
of a world of 1. torchrun's variables win where several are set (torchrun inside a
Slurm allocation). ``H2DLAB_SURVEY_HOST`` names the host in the table instead of the
machine's own name (several agents on one machine, as the tests run them).
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from collections.abc import Mapping

from h2dlab.errors import UsageError

__all__ = ["HOST_VAR", "MAX_WORLD", "Place", "place_from_env"]

#: The most ranks one survey takes (GPUs of the largest fleets, with room to spare).
MAX_WORLD = 2**20
#: Names the host in the survey's table (default: the machine's host name).
HOST_VAR = "H2DLAB_SURVEY_HOST"


@dataclasses.dataclass(frozen=True)
class Place:
    """One process's place: its ranks, its node and the launcher that said so."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    host: str
    launcher: str  # "torchrun", "slurm", "openmpi" or "none"
    job_id: str  # the launcher's id of this job ("" where it gives none)
    rendezvous: bool  # MASTER_ADDR and MASTER_PORT are set: torch.distributed can start from env://


def _whole(env: Mapping[str, str], name: str) -> int:
    text = env[name].strip()
    if not re.fullmatch(r"[0-9]+", text):
        raise UsageError(f"the launcher set {name}={env[name]!r}, which is not a whole number")
    return int(text)


def _slurm_tasks_here(env: Mapping[str, str]) -> int | None:
    """Tasks on this node from ``SLURM_STEP_TASKS_PER_NODE``/``SLURM_TASKS_PER_NODE``
    (``'2(x3),1'``: node by node), picked by ``SLURM_NODEID``; None where unreadable."""
    text = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    if not text or "SLURM_NODEID" not in env:
        return None
    counts: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*([0-9]+)(?:\(x([0-9]+)\))?\s*", part)
        if m is None:
            return None
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    node = _whole(env, "SLURM_NODEID")
    return counts[node] if node < len(counts) else None


def place_from_env(env: Mapping[str, str] | None = None) -> Place:
    """This process's :class:`Place`, from ``env`` (default ``os.environ``).

    Raises
    ------
    UsageError
        A launcher's variable that is not a whole number, or ranks that contradict
        each other (a rank not below the world size).
    """
    env = os.environ if env is None else env
    host = (env.get(HOST_VAR) or "").strip() or socket.gethostname()
    if "RANK" in env and "WORLD_SIZE" in env:  # torchrun (or anything that speaks env://)
        rank, world = _whole(env, "RANK"), _whole(env, "WORLD_SIZE")
        local = _whole(env, "LOCAL_RANK") if "LOCAL_RANK" in env else rank
        local_world = _whole(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else world
        node = _whole(env, "GROUP_RANK") if "GROUP_RANK" in env else (rank - local) // max(local_world, 1)
        launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "env"
        job = env.get("TORCHELASTIC_RUN_ID", "")
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        rank, world = _whole(env, "SLURM_PROCID"), _whole(env, "SLURM_NTASKS")
        local = _whole(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0
        # the job's SLURM_TASKS_PER_NODE (where the step's is missing) may count more tasks than this step has
        local_world = min(_slurm_tasks_here(env) or 1, max(world, 1))
        node = _whole(env, "SLURM_NODEID") if "SLURM_NODEID" in env else 0
        job = env.get("SLURM_JOB_ID", "")
        if job and env.get("SLURM_STEP_ID"):  # several srun steps of one job: one store each
            job = f"{job}.{env['SLURM_STEP_ID']}"
        launcher = "slurm"
    elif "OMPI_COMM_WORLD_RANK" in env and "OMPI_COMM_WORLD_SIZE" in env:
        rank, world = _whole(env, "OMPI_COMM_WORLD_RANK"), _whole(env, "OMPI_COMM_WORLD_SIZE")
        local = _whole(env, "OMPI_COMM_WORLD_LOCAL_RANK") if "OMPI_COMM_WORLD_LOCAL_RANK" in env else 0
        local_world = _whole(env, "OMPI_COMM_WORLD_LOCAL_SIZE") if "OMPI_COMM_WORLD_LOCAL_SIZE" in env else 1
        node = (rank - local) // max(local_world, 1)  # Open MPI names no node index; by-slot mapping
        launcher, job = "openmpi", env.get("OMPI_MCA_orte_jobid", "")
    else:
        rank, local, world, local_world, node, launcher, job = 0, 0, 1, 1, 0, "none", ""
    if world > MAX_WORLD:  # rank 0 keeps one entry per rank: 10**11 of them would fill its memory
        raise UsageError(
            f"the launcher says a world of {world:,} ranks, more than the {MAX_WORLD:,} a survey takes"
        )
    if world < 1 or not 0 <= rank < world:
        raise UsageError(
            f"the launcher says rank {rank} of a world of {world}: a rank must lie in 0..world-1"
        )
    if local_world > world:  # each rank takes a turn per local rank: 10**9 turns never end
        raise UsageError(
            f"the launcher says {local_world:,} ranks on this node, more than the world's {world:,}"
        )
    if local_world < 1 or not 0 <= local < local_world:
        raise UsageError(
            f"the launcher says local rank {local} of {local_world} on this node: it must lie in 0..{local_world - 1}"
        )
    rendezvous = bool(env.get("MASTER_ADDR")) and bool(env.get("MASTER_PORT"))
    if job == "none":  # torchrun's default --rdzv-id
        job = ""
    return Place(rank, local, world, local_world, node, host, launcher, job, rendezvous)
