"""``h2dlab record``: the whole recording plan for this machine, into one folder.

Each experiment of :data:`h2dlab.record_plan.PLAN` runs in a fresh process of the
kit's own CLI (``python -m h2dlab.cli ...`` with the plan's environment), writing
``<folder>/<kind>/<run>.csv.gz`` and its env.json; ``<folder>/recording.json`` says
which finished, and ``<folder>/record.log`` keeps what each printed. Ctrl-C or
SIGTERM stops the experiment in flight after its copy in flight (its rows are kept
in its partial file) and ``h2dlab record --resume <folder>`` finishes the rest.
Exit codes: 0 all recorded, 1 an experiment failed (the others still ran), 2 a usage
mistake, 130 interrupted.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from h2dlab.errors import Unavailable, UsageError
from h2dlab.record_env import note_resume, write_folder_env
from h2dlab.record_plan import (
    MANIFEST,
    Experiment,
    default_folder,
    experiment_from_dict,
    experiments,
    finished,
    new_manifest,
    plan_lines,
    read_manifest,
    select,
    write_manifest,
)

__all__ = ["add_parser", "run"]

EXIT_FAILED, EXIT_INTERRUPTED = 1, 130


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
    from h2dlab.session import gpu_name

    name = gpu_name()
    return torch.cuda.device_count(), name


def _load_plan(path: str) -> tuple[Experiment, ...]:
    try:
        rows = json.loads(Path(path).read_text())
        return tuple(experiment_from_dict(d) for d in rows)
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise UsageError(f"cannot read the plan {path}: {exc}") from None


def _for_device(exps: list[Experiment], device: str, quick: bool) -> list[dict[str, Any]]:
    """The runs to store in recording.json, with ``--device`` where it is not plain cuda."""
    out = []
    for e in exps:
        d = {**e.to_dict(quick), "name": e.name, "status": "pending"}
        if device != "cuda" and "--gpus" not in e.args and "--device" not in e.args:
            d["args"] = [*d["args"], "--device", device]
        if device == "cpu" and "--strategies" in d["args"]:  # keep the ones a CPU runs
            from h2dlab.strategies import REGISTRY

            i = d["args"].index("--strategies") + 1
            keep = [s for s in d["args"][i].split(",") if s not in REGISTRY or not REGISTRY[s].needs_cuda]
            d["args"] = [*d["args"][:i], ",".join(keep), *d["args"][i + 1 :]]
        out.append(d)
    return out


def _print_plan(runs: list[dict[str, Any]], quick: bool, gpus: int, device: str, folder: Path) -> None:
    print(f"h2dlab record{' --quick' if quick else ''}: {len(runs)} experiments into {folder}")
    print("\n".join(plan_lines(runs, gpus, device)))


def run(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Run ``h2dlab record``; returns the exit code (0; 1, also via Unavailable; 2 via UsageError; 130).
    ``argv``: the command line after ``h2dlab`` (recorded in env.json; default ``sys.argv``)."""
    if argv is None:
        argv = sys.argv[1:] if sys.argv[1:2] == ["record"] else ["record"]
    command = shlex.join(["h2dlab", *argv])
    if args.resume:
        if args.out or args.quick or args.only or args.plan or args.device != "cuda":
            raise UsageError("--resume takes its plan from the folder: give no other option with it")
        folder = Path(args.resume)
        manifest = read_manifest(folder)
        if manifest is None:
            raise UsageError(f"{folder} holds no {MANIFEST}: not a recording that `h2dlab record` started")
        if manifest.get("device", "cuda") != "cpu" and not args.dry_run:
            _gpus(manifest.get("device", "cuda"))  # refuses without CUDA
        if args.dry_run:
            todo = [r for r in manifest["experiments"] if r["status"] != "done"]
            _print_plan(
                todo, manifest.get("quick", False), manifest.get("gpu_count", 1), manifest["device"], folder
            )
            return 0
        note_resume(folder, command=command, quick=bool(manifest.get("quick")), device=manifest["device"])
        return _record(folder, manifest)
    device = str(args.device)
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
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
    exps = experiments(args.quick, max(gpus, 1), plan)
    if device == "cpu":
        exps = [e for e in exps if e.kind == "sweep"]
    try:
        exps = select(exps, args.only)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    folder = Path(args.out) if args.out else default_folder(name)
    runs = _for_device(exps, device, args.quick)
    if args.dry_run:
        _print_plan(runs, args.quick, gpus, device, folder)
        return 0
    if not runs:
        raise UsageError("no experiment left to record: check --only")
    if folder.exists() and (read_manifest(folder) is not None or any(folder.iterdir())):
        raise UsageError(f"{folder} is not empty: resume it with --resume {folder}, or choose another --out")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {folder}: {exc.strerror}") from None
    manifest = new_manifest(runs, quick=args.quick, device=device, gpus=gpus, gpu_name=name, command=command)
    write_manifest(folder, manifest)
    write_folder_env(folder, command=command, quick=args.quick, device=device, gpu_name=name)
    return _record(folder, manifest)


class _Stop:
    """SIGINT/SIGTERM: remember, and pass the signal on to the experiment in flight."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.proc: subprocess.Popen | None = None

    def __call__(self, signum, frame) -> None:  # noqa: ARG002
        first = self.signum is None
        self.signum = signum
        if self.proc is not None and self.proc.poll() is None:
            # the first stop lets the child finish its copy in flight; a second one ends it now
            self.proc.send_signal(signum if first else signal.SIGINT)


class _Progress:
    """One bar over the estimated seconds (tqdm on a terminal, plain lines otherwise)."""

    def __init__(self, total: float, n: int) -> None:
        self.total, self.n, self.done, self.what = total, n, 0.0, ""
        self.bar = None
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm

                self.bar = tqdm(
                    total=round(total),
                    unit="s",
                    ncols=min(shutil.get_terminal_size((100, 20)).columns or 100, 120),
                    bar_format="{percentage:3.0f}%|{bar}| {desc}",
                )
            except ImportError:
                pass

    def start(self, i: int, r: dict[str, Any]) -> None:
        left = self.total - self.done
        self.what = f"[{i}/{self.n}] {r['name']}"
        if self.bar is not None:
            self.bar.set_description_str(self.what)
        else:
            print(
                f"[{i}/{self.n}] {r['name']} (est. {r['seconds']:.0f} s; about {left / 60:.1f} min left)",
                flush=True,
            )

    def tick(self, elapsed: float, est: float) -> None:
        if self.bar is not None:
            at = self.done + min(elapsed, 0.98 * est)  # an experiment over its estimate waits at 98 %
            left = max(self.total - at, 0)
            self.bar.n = round(at)
            self.bar.set_description_str(f"{self.what}, ~{int(left) // 60}:{int(left) % 60:02d} left (est.)")

    def end(self, r: dict[str, Any], what: str) -> None:
        self.done += r["seconds"]
        if self.bar is not None:
            self.bar.n = round(self.done)
            self.bar.refresh()
            if r["status"] != "done":
                self.bar.write(f"{r['name']}: {what}")
        else:
            print(f"      {what}", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _options(cmd: str) -> set[str]:
    """The option strings the subcommand ``cmd`` accepts (the real parser's)."""
    from h2dlab.cli import build_parser

    subs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(subs.choices[cmd]._option_string_actions) if cmd in subs.choices else set()


def _command(r: dict[str, Any], folder: Path) -> list[str]:
    out = folder / r["kind"] / f"{r['run']}.csv.gz"
    cmd = [sys.executable, "-m", "h2dlab.cli", *r["args"], "--out", str(out)]
    opts = _options(r["args"][0])
    if "--no-progress" in opts:
        cmd.append("--no-progress")
    started = out.exists() or Path(f"{out}.partial.csv").exists()
    if "--resume" in opts and "--gpus" not in r["args"] and started:
        cmd.append("--resume")  # the run's own resume continues its rows exactly
    elif started and "--force" in opts:
        cmd.append("--force")  # an unfinished run that cannot resume starts again (never unasked)
    return cmd


def _tail(log: Path, n: int = 3) -> str:
    try:
        lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])


def _record(folder: Path, manifest: dict[str, Any]) -> int:
    """Run every experiment of ``manifest`` not yet done; keep recording.json current."""
    import h2dlab
    from h2dlab.tableio import read_env

    runs = manifest["experiments"]
    todo = [r for r in runs if r["status"] != "done"]
    kit = str(Path(h2dlab.__file__).resolve().parent.parent)  # the children import this very kit
    base_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [kit, os.environ.get("PYTHONPATH")])),
    }
    base_env.pop("PYTORCH_CUDA_ALLOC_CONF", None)  # the plan says where it applies; none inherited
    log = folder / "record.log"
    stop = _Stop()
    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    bar = _Progress(sum(r["seconds"] for r in todo), len(todo))
    t_all = time.time()
    try:
        for i, r in enumerate(todo, 1):
            if stop.signum is not None:
                break
            out = folder / r["kind"] / f"{r['run']}.csv.gz"
            out.parent.mkdir(parents=True, exist_ok=True)
            bar.start(i, r)
            t0 = time.time()
            if finished(out):  # finished before the recorder could note it
                rc = 0
            else:
                cmd = _command(r, folder)
                with open(log, "a") as fh:
                    fh.write(
                        f"\n== {r['name']} {time.strftime('%Y-%m-%dT%H:%M:%S')}: {shlex.join(cmd[3:])}\n"
                    )
                    fh.flush()
                    stop.proc = subprocess.Popen(
                        cmd,
                        stdout=fh,
                        stderr=subprocess.STDOUT,
                        env={**base_env, **r["env"]},
                        start_new_session=True,
                    )
                    while stop.proc.poll() is None:
                        time.sleep(0.25)
                        bar.tick(time.time() - t0, r["seconds"])
                    rc = stop.proc.returncode
                    stop.proc = None
            r["wall_s"], r["rc"] = round(time.time() - t0, 1), rc
            if rc == 0 and finished(out):
                r["status"] = "done"
                if manifest.get("device") != "cpu":  # as torch names it (what live mode compares)
                    manifest["gpu_name"] = (read_env(out) or {}).get("gpu_name") or manifest.get("gpu_name")
            elif stop.signum is not None or rc in (EXIT_INTERRUPTED, -signal.SIGINT, -signal.SIGTERM):
                r["status"] = "interrupted"
                stop.signum = stop.signum or signal.SIGINT
            else:
                r["status"] = "failed"
            manifest["updated"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
            manifest["status"] = "complete" if all(x["status"] == "done" for x in runs) else "incomplete"
            write_manifest(folder, manifest)
            bar.end(
                r,
                f"done in {r['wall_s']:.0f} s"
                if r["status"] == "done"
                else f"{r['status'].upper()} (exit {rc}): {_tail(log)}",
            )
    finally:
        bar.close()
        for s, h in old.items():
            signal.signal(s, h)
    failed = [r["name"] for r in runs if r["status"] == "failed"]
    done = sum(r["status"] == "done" for r in runs)
    took = time.time() - t_all
    if stop.signum is not None:
        print(
            f"h2dlab: interrupted: {done} of {len(runs)} experiments recorded in {folder}; "
            f"finish with: h2dlab record --resume {shlex.quote(str(folder))}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    print(f"recorded {done} of {len(runs)} experiments into {folder} in {took:.0f} s", file=sys.stderr)
    if failed:
        print(
            f"h2dlab: error: failed: {', '.join(failed)} (see {log}); retry them with: "
            f"h2dlab record --resume {shlex.quote(str(folder))}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return 0
