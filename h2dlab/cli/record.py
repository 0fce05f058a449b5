"""``h2dlab record``: the whole recording plan for this machine, into one folder.

This module is the command line: it picks the experiments of
:data:`h2dlab.recording.plan.PLAN` for this machine (``--quick``, ``--only``, ``--device``),
prints them (``--dry-run``), starts the folder (``recording.json`` and the folder's own
env.json) or takes an interrupted one back (``--resume``), and hands it to
:func:`h2dlab.recording.run.record`, which runs each experiment in a fresh process of the
kit's own CLI, writing ``<folder>/<kind>/<run>.csv.gz`` and its env.json.
Exit codes: 0 all recorded, 1 an experiment failed (the others still ran), 2 a usage
mistake, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from h2dlab.cli.common import names
from h2dlab.errors import Unavailable, UsageError
from h2dlab.escape import terminal_text
from h2dlab.recording.folder import (
    default_folder,
    is_recording,
    load_manifest,
    new_manifest,
    read_manifest,
    write_manifest,
)
from h2dlab.recording.plan import PLAN, Experiment, experiment_from_dict, experiments, plan_lines, select
from h2dlab.recording.run import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    dangling_tables,
    lost_tables,
    record,
    recording_lock,
    refuse_linked_kind_folders,
)

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "add_parser", "record", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``record`` subcommand to the ``h2dlab`` parser's subparsers."""
    r = subparsers.add_parser("record", help="record this machine: the whole plan into one folder")
    r.add_argument("--quick", action="store_true", help="the short plan (every figure, ~3 min on an H200)")
    r.add_argument("--out", default=None, help="the recording folder [runs folder/<host>-<gpu>-<date>]")
    r.add_argument(
        "--resume", default=None, metavar="FOLDER", help="finish the interrupted recording in FOLDER"
    )
    r.add_argument(
        "--dry-run", action="store_true", help="print the plan and its estimated time; measure nothing"
    )
    r.add_argument("--only", default=None, help="comma list of experiments (runs or kinds) to record")
    r.add_argument(
        "--device", default="cuda", help="cuda, cuda:N, or cpu (the sweep only, host copies) [cuda]"
    )
    r.add_argument(
        "--json",
        action="store_true",
        help="one JSON object on stdout at the end: the folder, each experiment's status and table",
    )
    r.add_argument("--plan", default=None, help=argparse.SUPPRESS)  # a JSON list of experiments, for tests
    return r


def _gpus(device: str) -> tuple[int, str | None]:
    """(GPU count, GPU name) without starting a CUDA context in this process."""
    if device == "cpu":
        return 0, None
    import torch

    if not torch.cuda.is_available():
        raise Unavailable(
            "this machine has no CUDA GPU: record needs one (use --device cpu for a CPU recording "
            "of the sweep only, or --dry-run to see the plan)"
        )
    from h2dlab.recording.live import gpu_name

    name = gpu_name()
    return torch.cuda.device_count(), name


def _load_plan(path: str) -> tuple[Experiment, ...]:
    try:
        rows = json.loads(Path(path).read_text())
        return tuple(experiment_from_dict(d) for d in rows)
    except (OSError, ValueError, TypeError, AttributeError, RecursionError) as exc:
        raise UsageError(f"cannot read the plan {path}: {exc}") from None


def _for_device(exps: list[Experiment], device: str, quick: bool) -> list[dict[str, Any]]:
    """The runs to store in recording.json, with ``--device`` where it is not plain cuda."""
    out = []
    for e in exps:
        d = {**e.to_dict(quick), "name": e.name, "status": "pending"}
        if device != "cuda" and "--gpus" not in e.args and "--device" not in e.args:
            d["args"] = [*d["args"], "--device", device]
        if device == "cpu" and "--strategies" in d["args"]:  # keep the ones a CPU runs
            from h2dlab.measure.strategies import REGISTRY

            i = d["args"].index("--strategies") + 1
            keep = [s for s in d["args"][i].split(",") if s not in REGISTRY or not REGISTRY[s].needs_cuda]
            d["args"] = [*d["args"][:i], ",".join(keep), *d["args"][i + 1 :]]
        out.append(d)
    return out


def _print_plan(runs: list[dict[str, Any]], quick: bool, gpus: int, device: str, folder: Path) -> None:
    from h2dlab.cli.results import emit, emitting

    if emitting():  # --dry-run --json: the plan as one object
        emit({"command": "record", "dry_run": True, "folder": folder, "device": device, "gpus": gpus,
              "estimated_s": sum(r["seconds"] for r in runs),
              "experiments": [{k: r[k] for k in ("name", "kind", "run", "args", "env", "seconds")} for r in runs]})  # fmt: skip
        return
    n = f"{len(runs)} experiment{'s' if len(runs) != 1 else ''}"
    print(f"h2dlab record{' --quick' if quick else ''}: {n} into {folder}")
    print("\n".join(plan_lines(runs, gpus, device)))


def _left_out(only: str, plan: tuple[Experiment, ...], quick: bool, gpus: int, device: str) -> str | None:
    """Why the first ``--only`` name the chosen plan lacks, though the whole plan has it, is
    left out (``--quick``, ``--device cpu``, too few GPUs); None when no such name."""
    chosen = {n for e in _chosen(plan, quick, gpus, device) for n in (e.run, e.name, e.kind)}
    for w in (w.strip() for w in only.split(",")):
        found = [e for e in plan if w in (e.run, e.name, e.kind)]
        if w in chosen or not found:
            continue
        if device == "cpu" and all(e.kind != "sweep" for e in found):
            return f"{w} needs a CUDA GPU (--device cpu records the sweep only): drop --device cpu"
        if quick and not any(e.in_quick() for e in found):
            return f"{w} is not in the --quick plan: drop --quick"
        need = min(e.min_gpus for e in found)
        return f"{w} needs {need} GPUs; this machine has {gpus}"
    return None


def _chosen(plan: tuple[Experiment, ...] | None, quick: bool, gpus: int, device: str) -> list[Experiment]:
    """The experiments of ``plan`` (default the kit's) a recording with these options runs."""
    exps = experiments(quick, max(gpus, 1), plan)
    return [e for e in exps if e.kind == "sweep"] if device == "cpu" else exps


def _where_from(out: str | None) -> str:
    """What chose the recording's folder, for a message that refuses it."""
    runs = os.environ.get("H2DLAB_RUNS", "").strip()
    if out:
        return "choose another --out"
    if runs:
        return (
            f"H2DLAB_RUNS={runs} names where recordings go: point it at a folder you can write, or give --out"
        )
    return "give --out a folder you can write"


def _check_new_folder(folder: Path, out: str | None = None) -> None:
    """Refuse a new recording's folder that is a file, lies under a file, or already
    holds something (``out``: the --out given, else the folder is H2DLAB_RUNS's)."""
    above = next((p for p in folder.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise UsageError(f"cannot create {folder}: {above} is a file ({_where_from(out)})")
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder} is a file: give --out a folder for the recording")
    if is_recording(folder):
        how = (
            f"resume it with --resume {folder}"
            if read_manifest(folder) is not None
            else "no recording.json to resume"
        )
        raise UsageError(f"{folder} holds a recording ({how}): choose another --out")
    if folder.is_dir() and any(folder.iterdir()):
        raise UsageError(f"{folder} is not empty and not a recording: choose another --out")


def run(
    args: argparse.Namespace, argv: list[str] | None = None, *, options: Callable[[str], set[str]]
) -> int:
    """Run ``h2dlab record``; returns the exit code (0; 1, also via Unavailable; 2 via UsageError; 130).
    ``argv``: the command line after ``h2dlab`` (recorded in env.json; default ``sys.argv``);
    ``options``: the option strings each subcommand accepts (``record_run.options_of`` of the
    CLI's parser, handed down by :mod:`h2dlab.cli.main`)."""
    if argv is None:
        argv = sys.argv[1:] if sys.argv[1:2] == ["record"] else ["record"]
    from h2dlab.recording.env_folder import note_resume, write_folder_env  # pandas: not for --help

    command = shlex.join(["h2dlab", *argv])
    for flag, value in (("--out", args.out), ("--resume", args.resume)):
        if value is not None and not str(value).strip():
            raise UsageError(f"{flag} is empty: give a folder, or leave {flag} out")
    if args.resume:
        if args.out or args.quick or args.only or args.plan or args.device != "cuda":
            raise UsageError("--resume takes its plan from the folder: give no other option with it")
        folder = Path(args.resume)
        manifest = load_manifest(folder)
        if manifest.get("device", "cuda") != "cpu" and not args.dry_run:
            _gpus(manifest.get("device", "cuda"))  # refuses without CUDA
        if args.dry_run:
            refuse_linked_kind_folders(folder, manifest["experiments"], "the resume would run nothing")
            lost = lost_tables(folder, manifest["experiments"])  # a resume measures them again
            for r in dangling_tables(folder, manifest["experiments"]):
                print(
                    terminal_text(f"{r['kind']}/{r['run']}: noted done, its table a link to a missing file"),
                    file=sys.stderr,
                )
            todo = [r for r in manifest["experiments"] if r["status"] != "done" or r in lost]
            _print_plan(
                todo, manifest.get("quick", False), manifest.get("gpu_count", 1), manifest["device"], folder
            )
            return 0
        with recording_lock(folder):  # a second recorder of this folder is refused here
            manifest = load_manifest(folder)  # as the recorder that held the lock left it
            note_resume(folder, command=command, quick=bool(manifest.get("quick")), device=manifest["device"])
            return _recorded(folder, record(folder, manifest, options))
    device = str(args.device)
    if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", device):
        raise UsageError(f"unknown device {device!r}: use cuda, cuda:N or cpu")
    if args.dry_run and device != "cpu":
        try:
            gpus, name = _gpus(device)
        except UsageError:
            gpus, name = 1, None
            print("(no CUDA GPU here: the plan of a machine with one GPU)")
    else:
        gpus, name = _gpus(device)
    plan = _load_plan(args.plan) if args.plan else None
    exps = _chosen(plan, args.quick, gpus, device)
    names(args.only, "--only")  # refuses an empty entry before select() reads the list
    try:
        exps = select(exps, args.only)
    except ValueError as exc:
        raise UsageError(_left_out(args.only, plan or PLAN, args.quick, gpus, device) or str(exc)) from None
    folder = Path(args.out) if args.out else default_folder(name)
    runs = _for_device(exps, device, args.quick)
    _check_new_folder(folder, args.out)  # a dry run says so too
    if args.dry_run:
        _print_plan(runs, args.quick, gpus, device, folder)
        return 0
    if not runs:
        raise UsageError("no experiment left to record: check --only")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {folder}: {exc.strerror} ({_where_from(args.out)})") from None
    manifest = new_manifest(runs, quick=args.quick, device=device, gpus=gpus, gpu_name=name, command=command)
    with recording_lock(folder):
        write_manifest(folder, manifest)
        write_folder_env(folder, command=command, quick=args.quick, device=device, gpu_name=name)
        return _recorded(folder, record(folder, manifest, options))


def _recorded(folder: Path, code: int) -> int:
    """``code``, after ``--json``'s object: the folder and, per experiment, its status and table."""
    from h2dlab.cli.results import emit, emitting

    if emitting():
        runs = (read_manifest(folder) or {}).get("experiments", [])
        emit({"command": "record", "exit_code": code, "folder": folder, "experiments": [
            {"name": r.get("name"), "status": r.get("status"), "wall_s": r.get("wall_s"), "rc": r.get("rc"),
             "table": folder / str(r.get("kind")) / f"{r.get('run')}.csv.gz"} for r in runs]})  # fmt: skip
    return code
