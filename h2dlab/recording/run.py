"""Running a recording: every experiment of its ``recording.json`` not yet done, each in
a fresh process of the kit's own CLI (``python -m h2dlab ...`` with the plan's
environment), with one progress bar over the estimated seconds.

Each writes ``<folder>/<kind>/<run>.csv.gz`` and its env.json; ``recording.json`` is
rewritten after every experiment (status, wall time, exit code) and ``record.log`` keeps
what each printed. Ctrl-C or SIGTERM stops the experiment in flight after its copy in
flight (its rows are kept in its partial file); :func:`record` then returns
:data:`EXIT_INTERRUPTED`. ``h2dlab record`` (:mod:`h2dlab.cli.record`) starts it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import errno
import fcntl
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from h2dlab.errors import UsageError
from h2dlab.escape import terminal_text
from h2dlab.recording.folder import (
    MANIFEST,
    RECORDING_OUT_VAR,
    experiment_problem,
    finished,
    repeated_output,
    write_manifest,
)

__all__ = [
    "CLI_MODULE",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "LOCK_NAME",
    "options_of",
    "record",
    "recording_lock",
]

EXIT_FAILED, EXIT_INTERRUPTED = 1, 130
#: The module each experiment runs as (``python -m``): the kit's command line.
CLI_MODULE = "h2dlab.cli.main"


#: The lock file a recorder holds (``flock``) in its recording folder while it runs.
LOCK_NAME = ".record.lock"


@contextlib.contextmanager
def recording_lock(folder: str | Path) -> Iterator[None]:
    """Hold the recording folder's lock (``flock`` on :data:`LOCK_NAME`, this process's id
    written in it) for the block; released when the block ends or the process dies.

    Raises
    ------
    UsageError
        Another recorder holds it: two recorders of one folder ran the same experiments
        at once and each rewrote recording.json over the other's.
    """
    path = Path(folder) / LOCK_NAME
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        raise UsageError(f"cannot lock the recording {folder} ({path.name}: {exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            held = os.pread(fd, 32, 0).decode(errors="replace").strip()
            who = f"pid {held}" if held.isdigit() else "another process"
            raise UsageError(
                f"{folder} is being recorded by {who}: wait for it to end (or stop it), then resume"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _not_its_own(out: Path, r: dict[str, Any]) -> str | None:
    """Why the finished-looking table ``out`` is not experiment ``r``'s own whole run, or
    None when it is: its env.json must name the table's run (another run's, copied beside
    it, vouches for nothing) and a command whose ``--out`` is ``<kind>/<run>`` (a copy of a
    twin experiment's table, ``forum/ascending-1`` as ``ascending-2``, would be marked done
    unrun, and its run counted twice)."""
    from h2dlab.recording.datasets import timeline
    from h2dlab.recording.schema import SchemaError
    from h2dlab.recording.tableio import read

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # another run's env.json: said when the table is read
            df = timeline(str(out)) if r["kind"] == "overlap" else read(out)  # overlap: a timeline
            env = df.attrs.get("env")
    except (SchemaError, OSError) as exc:
        return f"it cannot be read ({str(exc).splitlines()[0][:200]})"
    if env is None:
        return "it has no env.json of its own"
    return _written_by_another(env, r)


def _written_by_another(env: dict[str, Any], r: dict[str, Any]) -> str | None:
    """Why the env.json ``env`` was not written by experiment ``r``'s command (its ``--out``
    must be ``<kind>/<run>``), or None when it was."""
    try:
        words = shlex.split(str(env.get("command") or ""))
    except ValueError:
        words = []
    given = [w.split("=", 1)[1] for w in words if w.startswith("--out=")]
    given += [words[k + 1] for k, w in enumerate(words[:-1]) if w == "--out"]
    want = (str(r["kind"]), f"{r['run']}.csv.gz")
    if not any(Path(g).parts[-2:] == want for g in given):
        return f"its env.json says it was written by another command ({' '.join(words)[:120] or 'none'})"
    return None


def _reference_missing(out: Path, r: dict[str, Any]) -> bool:
    """Whether experiment ``r`` asks for the reference check (``measure --reference``) and its
    whole table at ``out`` holds none: the check was stopped after the sweep (the measure
    said so and exited 130). Such a run is measured again (``--force``): the check times the
    sweep's own cells in the sweep's own process, and ``--resume`` of a whole table does nothing."""
    from h2dlab.recording.schema import SchemaError
    from h2dlab.recording.tableio import read_env

    if "--reference" not in r["args"] or not finished(out):
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # another run's env.json: _not_its_own says so
            return not (read_env(out) or {}).get("reference")
    except SchemaError:
        return False


#: The signals that stop a recording: Ctrl-C, SIGTERM, and SIGHUP (a closed terminal or
#: ssh session), which is passed on as SIGTERM: the experiment runs in its own session, so
#: no hang-up would reach it, and it keeps its rows on SIGTERM.
STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


class _Stop:
    """SIGINT/SIGTERM/SIGHUP: remember, and pass the signal on to the experiment in flight."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.proc: subprocess.Popen | None = None

    def __call__(self, signum, frame) -> None:  # noqa: ARG002
        first = self.signum is None
        self.signum = signum
        if self.proc is not None and self.proc.poll() is None:
            # the first stop lets the child finish its copy in flight; a second one ends it now
            passed = signal.SIGTERM if signum == getattr(signal, "SIGHUP", None) else signum
            self.proc.send_signal(passed if first else signal.SIGINT)


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
                    file=getattr(sys.stderr, "unfiltered", sys.stderr),  # its \r: not the command's filter
                    unit="s",
                    ncols=min(shutil.get_terminal_size((100, 20)).columns or 100, 120),
                    bar_format="{percentage:3.0f}%|{bar}| {desc}",
                )
            except ImportError:
                pass

    def start(self, i: int, r: dict[str, Any]) -> None:
        left = self.total - self.done
        self.what = terminal_text(f"[{i}/{self.n}] {r['name']}")  # a name from recording.json
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


def options_of(parser: argparse.ArgumentParser) -> Callable[[str], set[str]]:
    """A function naming the option strings each subcommand of ``parser`` accepts (the CLI
    hands its own parser down, so nothing here imports the CLI)."""
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))

    def options(cmd: str) -> set[str]:
        return set(subs.choices[cmd]._option_string_actions) if cmd in subs.choices else set()

    return options


def python_command() -> list[str]:
    """This Python, told not to put the current directory first on ``sys.path`` (``-P``,
    Python 3.11+): a recording folder someone sent, with an ``h2dlab/`` planted in it, must
    not be what ``-m h2dlab...`` runs. Children also start in the kit's own folder."""
    return [sys.executable, "-P"] if sys.version_info >= (3, 11) else [sys.executable]


def open_log(log: Path):
    """``record.log`` for appending, never through a link planted in its place (O_NOFOLLOW)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(log, flags, 0o644)
    except OSError as exc:
        raise UsageError(f"{log}: cannot write the recording's log ({exc.strerror}): is it a link?") from None
    return os.fdopen(fd, "a")


def table_path(folder: Path, r: dict[str, Any]) -> Path:
    """Where run ``r`` of the recording in ``folder`` writes its table: ``<kind>/<run>.csv.gz``."""
    return Path(folder) / r["kind"] / f"{r['run']}.csv.gz"


def lost_tables(folder: Path, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of ``runs`` noted done whose table is not in ``folder`` (deleted, or a folder
    copied in part): a resume measures them again, and its plan (``--dry-run``) lists them."""
    gone = []
    for r in runs:
        table = table_path(folder, r)
        # a link (even a dangling one: an unmounted disk, or planted) is never written through
        if r["status"] == "done" and not table.exists() and not table.is_symlink():
            gone.append(r)
    return gone


def refuse_linked_kind_folders(folder: Path, runs: list[dict[str, Any]], then: str) -> None:
    """``UsageError`` where the kind folder of any of ``runs`` is a link: a run would land
    wherever it points (another recording's folder). ``then``: what was done, for the line."""
    linked = sorted({r["kind"] for r in runs if (Path(folder) / r["kind"]).is_symlink()})
    if linked:
        raise UsageError(
            terminal_text(
                f"{folder}: the kind folder(s) {', '.join(linked)} are links: h2dlab never writes a run "
                f"through a link; replace each with a real folder: {then}"
            )
        )


def dangling_tables(folder: Path, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of ``runs`` noted done whose table is a link to nothing (an unmounted disk, or
    planted): not measured again through the link, and said."""
    return [
        r
        for r in runs
        if r["status"] == "done" and table_path(folder, r).is_symlink() and not table_path(folder, r).exists()
    ]


def _orphan_env_of_its_own(out: Path, r: dict[str, Any]) -> dict[str, Any] | None:
    """The env.json of run ``r``'s table at ``out`` where it alone is left (the table and its
    partial file gone) and was written by ``r``'s own command, else None."""
    from h2dlab.recording.schema import SchemaError
    from h2dlab.recording.tableio import env_path, read_env

    if out.exists() or out.is_symlink() or Path(f"{out}.partial.csv").exists():
        return None
    if not env_path(out).is_file() or env_path(out).is_symlink():
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = read_env(out)
    except (SchemaError, OSError, ValueError):
        return None
    return env if isinstance(env, dict) and _written_by_another(env, r) is None else None


def keep_orphan_env(out: Path, r: dict[str, Any]) -> Path | None:
    """Where run ``r``'s table at ``out`` is gone and only its own env.json is left, move that
    env.json aside, as ``<table>.kept-<run_id>.env.json`` beside it, so that the run starts
    again without writing over it: the table may live on under another name or format, and
    no sibling file is read to find out. Returns the new path, or None where nothing moved."""
    from h2dlab.recording.tableio import env_path

    env = _orphan_env_of_its_own(out, r)
    if env is None:
        return None
    run_id = "".join(c for c in str(env.get("run_id") or "") if c.isalnum())[:32]
    for n in range(1000):
        kept = out.with_name(f"{out.name}.kept-{run_id or 'run'}{f'-{n}' if n else ''}.env.json")
        if not (kept.exists() or kept.is_symlink()):
            os.replace(env_path(out), kept)
            return kept
    return None


def _child_command(r: dict[str, Any], folder: Path, options: Callable[[str], set[str]]) -> list[str]:
    """The command line of run ``r`` into ``folder`` (its own ``--resume`` where it started);
    ``options(cmd)``: the option strings the subcommand ``cmd`` accepts."""
    out = table_path(folder, r).resolve()
    cmd = [*python_command(), "-m", CLI_MODULE, *r["args"], "--out", str(out)]
    opts = options(r["args"][0])
    if "--no-progress" in opts:
        cmd.append("--no-progress")
    started = out.exists() or Path(f"{out}.partial.csv").exists()
    if started and "--force" in opts and _reference_missing(out, r):
        cmd.append("--force")  # whole, but its reference check was stopped: measured again
    elif "--resume" in opts and "--gpus" not in r["args"] and started:
        cmd.append("--resume")  # the run's own resume continues its rows exactly
    elif started and "--force" in opts:
        cmd.append("--force")  # an unfinished run that cannot resume starts again (never unasked)
    return cmd


def _tail(log: Path, n: int = 3) -> str:
    try:
        lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    starts = [i for i, x in enumerate(lines) if x.startswith("== ")]  # this attempt's lines only
    lines = lines[starts[-1] + 1 :] if starts else lines
    return " | ".join(lines[-n:])


def record(folder: Path, manifest: dict[str, Any], options: Callable[[str], set[str]]) -> int:
    """Run every experiment of ``manifest`` not yet done; keep recording.json current.

    Parameters
    ----------
    folder
        The recording folder (``recording.json`` is there).
    manifest
        Its recording.json as a dict; each experiment's ``status``, ``wall_s`` and ``rc``
        are filled in as it ends, and the file rewritten.
    options
        The option strings a subcommand of the kit's CLI accepts (:func:`options_of` of
        its parser), to add ``--no-progress``, ``--resume`` or ``--force`` where they exist.

    Returns
    -------
    int
        0 all recorded, :data:`EXIT_FAILED` an experiment failed (the others still ran),
        :data:`EXIT_INTERRUPTED` stopped by SIGINT/SIGTERM (resume with ``--resume``).
    """
    import h2dlab
    from h2dlab.recording.tableio import read_env

    runs = manifest["experiments"]
    for r in runs:  # what recording.json says is run: only the plan's commands and settings
        why = experiment_problem(r)
        if why:
            raise UsageError(
                f"{folder / MANIFEST}: experiment {r.get('name', '?')!r}: {why}: nothing was run"
            )
    repeated = repeated_output(runs)
    if repeated:
        raise UsageError(f"{folder / MANIFEST}: {repeated}: nothing was run")
    refuse_linked_kind_folders(folder, runs, "nothing was run")
    for r in dangling_tables(folder, runs):
        print(
            terminal_text(
                f"h2dlab record: {r['kind']}/{r['run']} is noted done, but its table is a link to a missing "
                "file: it is not measured again through the link; remove the link to measure it again"
            ),
            file=sys.stderr,
        )
    for r in lost_tables(folder, runs):  # noted done, its table gone (deleted, copied in part)
        r["status"] = "pending"
        print(
            terminal_text(
                f"h2dlab record: {r['kind']}/{r['run']} was done but its table is gone: measured again"
            ),
            file=sys.stderr,
        )
    todo = [r for r in runs if r["status"] != "done"]
    kit = str(Path(h2dlab.__file__).resolve().parent.parent)  # the children import this very kit
    folder = folder.resolve()
    base_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [kit, os.environ.get("PYTHONPATH")])),
    }
    base_env.pop("PYTORCH_CUDA_ALLOC_CONF", None)  # the plan says where it applies; none inherited
    log = folder / "record.log"
    stop = _Stop()
    old = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    bar = _Progress(sum(r["seconds"] for r in todo), len(todo))
    t_all = time.time()
    try:
        for i, r in enumerate(todo, 1):
            if stop.signum is not None:
                break
            out = table_path(folder, r)
            done_so_far = sum(x["status"] == "done" for x in runs)
            refuse_linked_kind_folders(
                folder, [r], f"stopped before {r['kind']}/{r['run']} ({done_so_far} done)"
            )
            out.parent.mkdir(parents=True, exist_ok=True)
            kept = keep_orphan_env(out, r)  # its table gone, its own env.json left: moved aside, kept
            if kept is not None:
                print(
                    terminal_text(
                        f"h2dlab record: {r['kind']}/{r['run']}: its old env.json is kept as {kept.name}"
                    ),
                    file=sys.stderr,
                )
            bar.start(i, r)
            t0 = time.time()
            impostor = None
            if finished(out) and not _reference_missing(
                out, r
            ):  # finished before the recorder noted it, or another's
                impostor = _not_its_own(out, r)
                rc = 0 if impostor is None else EXIT_FAILED
                if impostor is not None:
                    with open_log(log) as fh:
                        fh.write(
                            f"\n== {r['name']}: not run: {out} looks finished but is not this experiment's: "
                            f"{impostor}; move it away, then resume\n"
                        )
            else:
                # again at the last moment: a kind folder made a link while the recording ran
                refuse_linked_kind_folders(
                    folder, [r], f"stopped before {r['kind']}/{r['run']} ({done_so_far} done)"
                )
                cmd = _child_command(r, folder, options)
                with open_log(log) as fh:
                    fh.write(
                        f"\n== {r['name']} {time.strftime('%Y-%m-%dT%H:%M:%S')}: {shlex.join(cmd[3:])}\n"
                    )
                    fh.flush()
                    stop.proc = subprocess.Popen(
                        cmd,
                        stdout=fh,
                        stderr=subprocess.STDOUT,
                        env={**base_env, **r["env"], RECORDING_OUT_VAR: str(out.resolve())},
                        cwd=kit,
                        start_new_session=True,
                    )
                    while stop.proc.poll() is None:
                        time.sleep(0.25)
                        bar.tick(time.time() - t0, r["seconds"])
                    rc = stop.proc.returncode
                    stop.proc = None
            r["wall_s"], r["rc"] = round(time.time() - t0, 1), rc
            if rc == 0 and finished(out) and _not_its_own(out, r) is None:  # by this child, or before
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
