"""The sweep on several GPUs at once: ``concurrent(spec, gpus=...)``.

One process per GPU (torch.multiprocessing), each pinned to the CPUs nearest its GPU
where NVML says, each running ``measure.sweep`` with the same spec on its own device.
Before every (strategy, size) cell the processes meet in a collective (gloo), so they
start each cell together and, when any of them is asked to stop, all stop together.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import tempfile
import uuid
from pathlib import Path

import pandas as pd
import torch

from h2dlab.errors import UsageError
from h2dlab.measure.device import resolve_device
from h2dlab.measure.harness import resolve_spec, sweep
from h2dlab.measure.nvml import nvml_for_cuda
from h2dlab.measure.plan import plan_spec
from h2dlab.measure.recorder import StopFlag
from h2dlab.measure.spec import SweepSpec
from h2dlab.recording import datasets
from h2dlab.recording.env import collect_env
from h2dlab.units import parse_int

__all__ = ["DEFAULT_SIZES", "concurrent", "nearest_cpus", "parse_gpus"]

#: Sizes of a concurrent sweep when none are given: powers of two, 1 MiB - 1 GiB.
DEFAULT_SIZES = tuple(2**k for k in range(20, 31))


def parse_gpus(text: str, available: int) -> tuple[list[int], list[int]]:
    """Which devices, and how many at once.

    Parameters
    ----------
    text
        ``'all'``, ``'0,1'``, ``'N'`` (GPUs 0..N-1) or ``'1..N'`` (1 to N GPUs copying
        at once, in turn).
    available
        Devices on this machine.

    Returns
    -------
    tuple of (list of int, list of int)
        Device indices, and the world sizes to run.
    """
    text = str(text).strip()
    try:  # ASCII digits only (int() takes '١' and '1_0'); a count past the machine's is
        # refused below before any list of that length is made
        if text == "all":
            ids, worlds = list(range(available)), [available]
        elif ".." in text:
            lo, hi = (parse_int(v) for v in text.split("..", 1))
            if lo < 1 or hi < lo:
                raise ValueError
            ids, worlds = list(range(min(hi, available + 1))), list(range(lo, min(hi, available + 1) + 1))
        elif "," in text:
            ids = [parse_int(v) for v in text.split(",")]
            worlds = [len(ids)]
        else:
            n = parse_int(text)
            if n < 1:
                raise ValueError
            ids, worlds = list(range(min(n, available + 1))), [n]
    except ValueError:
        raise UsageError(f"cannot read the GPU list {text!r}: write all, 0,1, N or 1..N") from None
    if len(set(ids)) != len(ids):
        raise UsageError(f"the GPU list {text!r} names a GPU twice")
    bad = [i for i in ids if i >= available or i < 0]
    if bad:
        raise UsageError(
            f"the GPU list {text!r}: there is no device {bad[0]}; this machine has {available} (0..{available - 1})"
        )
    return ids, worlds


def nearest_cpus(index: int) -> list[int] | None:
    """CPUs nearest CUDA device ``index`` according to NVML, or None where it cannot say
    (``nvml.nvml_for_cuda``: CUDA_VISIBLE_DEVICES is honoured)."""
    found = nvml_for_cuda(index)
    if found is None:
        return None
    pynvml, h = found
    try:
        words = pynvml.nvmlDeviceGetCpuAffinity(h, (os.cpu_count() + 63) // 64)
        cpus = [w * 64 + b for w, mask in enumerate(words) for b in range(64) if mask >> b & 1]
        allowed = os.sched_getaffinity(0)
        cpus = [c for c in cpus if c in allowed]
        return cpus or None
    except Exception:  # noqa: BLE001 - no topology: leave the affinity alone
        return None


class _SharedStop(StopFlag):
    """A stop flag that the parent process can also set (through an Event)."""

    def __init__(self, event) -> None:
        super().__init__()
        self.event = event

    def __bool__(self) -> bool:
        return self.signum is not None or self.event.is_set()


def _worker(rank: int, ids: list[int], spec: SweepSpec, init_file: str, folder: str, progress, event) -> None:
    import torch.distributed as dist

    world = len(ids)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        cuda = torch.device(spec.device).type == "cuda"
        cpus = nearest_cpus(ids[rank]) if cuda else None
        if cpus:
            os.sched_setaffinity(0, cpus)
        stop = _SharedStop(event)

        def together(flag: StopFlag) -> None:
            # Every rank runs the same plan, so this collective is reached the same
            # number of times by all; if any rank was asked to stop, all stop here.
            t = torch.tensor([1 if flag else 0])
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            if t.item():
                flag.request(flag.signum or signal.SIGINT)

        rank_spec = dataclasses.replace(spec, device=f"cuda:{ids[rank]}" if cuda else "cpu")
        sweep(
            rank_spec,
            out=Path(folder) / f"rank{rank}.csv",
            before_cell=together,
            progress=progress and rank == 0,
            stop=stop,
        )
        (Path(folder) / f"rank{rank}.cpus").write_text(",".join(map(str, cpus or [])))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def concurrent(
    spec: SweepSpec,
    *,
    gpus: str = "all",
    out: str | Path,
    argv: list[str] | None = None,
    progress: bool = False,
    stop: StopFlag | None = None,
) -> pd.DataFrame:
    """Run ``spec`` on several GPUs at once and save one table.

    Parameters
    ----------
    spec
        The sweep each process runs; its ``device`` names the kind (``'cuda'``, or
        ``'cpu'`` to run the same code path with host copies, ``gpus`` then counting
        processes). Every option of the spec is honoured, as in ``measure.sweep``.
    gpus
        See :func:`parse_gpus`; with ``'1..N'``, 1, 2, ..., N GPUs run in turn.
    out
        The table to write, with its env.json.
    argv, progress
        As for ``measure.sweep`` (progress is shown by rank 0).
    stop
        A stop flag: a signal or ``stop.request()`` stops every process after its copy
        in flight; the rows measured are kept and no further world size runs.

    Returns
    -------
    pandas.DataFrame
        Rows with ``gpu`` (device index) and ``world`` (GPUs copying at once);
        ``attrs``: ``env``, ``stopped``, ``planned_rows``.
    """
    import torch.multiprocessing as mp

    dev_type = torch.device(spec.device).type
    if dev_type == "cuda":
        resolve_device("cuda")
        available = torch.cuda.device_count()
    else:
        available = max(1, os.cpu_count() or 1)
    ids, worlds = parse_gpus(gpus, available)
    resolved, _ = resolve_spec(dataclasses.replace(spec, device="cpu" if dev_type == "cpu" else "cuda"))
    spec = dataclasses.replace(resolved, device=dev_type)
    out = Path(out)
    stop = stop if stop is not None else StopFlag()
    event = mp.get_context("spawn").Event()
    frames, cpu_map = [], {}
    planned = len(plan_spec(spec)) * sum(worlds)
    run_id = uuid.uuid4().hex[:12]
    with stop.installed():
        for world in worlds:
            if stop:
                break
            with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.w{world}.") as folder:
                init_file = str(Path(folder) / "rendezvous")
                ctx = mp.spawn(
                    _worker,
                    args=(ids[:world], spec, init_file, folder, progress, event),
                    nprocs=world,
                    join=False,
                )
                while not ctx.join(timeout=0.2):
                    if stop and not event.is_set():
                        event.set()  # tell every process: stop after the copy in flight
                for rank in range(world):
                    df = datasets.read(Path(folder) / f"rank{rank}.csv")
                    env = df.attrs.get("env") or {}
                    if env.get("stopped_by_signal") is not None:
                        stop.request(env["stopped_by_signal"])
                    df["run_id"] = run_id
                    df["gpu"] = ids[rank] if dev_type == "cuda" else rank
                    df["world"] = world
                    frames.append(df)
                    cpu_map[f"world{world}_rank{rank}"] = (Path(folder) / f"rank{rank}.cpus").read_text()
    table = pd.concat(frames, ignore_index=True) if frames else datasets.empty_table()
    env = collect_env(argv=argv, gpu=dev_type == "cuda")
    env["spec"] = {**spec.to_dict(), "kind": "concurrent", "gpus": ids, "worlds": worlds}
    env["run_id"] = run_id
    env["cpu_affinity_per_rank"] = cpu_map
    env["measured_rows"] = len(table)
    env["stopped_by_signal"] = stop.signum
    datasets.save(table, out, env=env)
    table.attrs["env"] = env
    table.attrs["stopped"] = bool(stop)
    table.attrs["planned_rows"] = planned
    return table
