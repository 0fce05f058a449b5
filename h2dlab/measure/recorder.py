"""Rows to disk as they are measured, a stop flag for signals, and ``--resume``.

Rows are appended to ``<out>.partial.csv`` and flushed as they are handed over (a sweep
hands fast copies' rows over in batches, at most ``harness.FLUSH_AFTER_S`` after they were
measured), so an interrupt or an out-of-memory size loses nothing and a process killed
outright at most the last second's rows; at the end the partial file becomes the
output (written, then renamed). The partial file belongs to one run (see ``partial``:
created exclusively, never through a link, locked). A resumed run must have the same spec as the first
(compared field by field) and the rows on disk must follow its plan.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from h2dlab.errors import AlreadyDone, UsageError
from h2dlab.interrupts import signals_held
from h2dlab.measure.census import census, census_seconds
from h2dlab.measure.row_line import csv_line
from h2dlab.measure.spec import differences
from h2dlab.recording import datasets
from h2dlab.recording.env import collect_env
from h2dlab.recording.partial import claim, partial_path, reopen, replace_locked

__all__ = [
    "Recording",
    "RowWriter",
    "StopFlag",
    "check_resume",
    "existing_rows",
    "foreign_parts",
    "refuse_foreign",
    "partial_path",
    "progress_bar",
]


class StopFlag:
    """Set by SIGINT/SIGTERM (or :meth:`request`); the harness stops after the copy in flight.

    ``bool(flag)`` is True once a stop was asked for; ``signum`` says which signal.
    """

    def __init__(self) -> None:
        self.signum: int | None = None

    def __bool__(self) -> bool:
        return self.signum is not None

    def request(self, signum: int = signal.SIGINT) -> None:
        """Ask for a stop, as if ``signum`` had arrived (e.g. from a stop button)."""
        if self.signum is None:
            self.signum = int(signum)

    @contextmanager
    def installed(self) -> Iterator[StopFlag]:
        """Within the block, SIGINT, SIGTERM and SIGHUP set this flag (a second one raises
        ``KeyboardInterrupt``). Outside the main thread signals cannot be caught: the
        flag is then set only by :meth:`request`."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        stops = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
        old = {s: signal.getsignal(s) for s in stops}  # SIGHUP: a closed terminal or ssh session

        def handler(signum, frame):  # noqa: ARG001
            if self.signum is not None:  # a second Ctrl-C: stop now
                raise KeyboardInterrupt
            self.signum = signum

        for s in old:
            signal.signal(s, handler)
        try:
            yield self
        finally:
            for s, h in old.items():
                signal.signal(s, h)


class RowWriter:
    """Append rows to ``<out>.partial.csv``, flushed one by one; ``finish()`` turns the
    partial file into ``out`` in its own format.

    The partial file is this run's alone (see :mod:`h2dlab.recording.partial`): created exclusively
    and locked for a new run (``force`` discards the rows of an unfinished one), reopened
    and locked for a resume, whose rows (``resume_rows``) it already holds; a partial
    file with an older header (schema version 1) is rewritten with today's before new
    rows are appended to it.
    """

    def __init__(
        self,
        out: Path,
        resume_rows: pd.DataFrame | None = None,
        *,
        fd: int | None = None,
        force: bool = False,
    ) -> None:
        self.out = Path(out)
        self.partial = partial_path(self.out)
        self.columns = list(datasets.COLUMNS)
        self.n = 0
        header = ",".join(self.columns) + "\n"
        if fd is None:  # a new run, or a resume of a finished table: a new partial file
            fd = claim(self.out, force=force)
            text = header + self._rows_text(resume_rows)
            self.fh = open(fd, "w", newline="", closefd=True)
            self.fh.write(text)
        else:  # resume_rows were read from this very file
            first = os.pread(fd, len(header.encode()) + 1, 0).decode(errors="replace")
            if first.split("\n")[0] + "\n" != header:
                fd = replace_locked(fd, self.out, header + self._rows_text(resume_rows))
            self.fh = open(fd, "a", newline="", closefd=True)
        self.n = 0 if resume_rows is None else len(resume_rows)
        self.fh.flush()

    def _rows_text(self, rows: pd.DataFrame | None) -> str:
        if rows is None or not len(rows):
            return ""
        return rows.reindex(columns=self.columns).to_csv(index=False, header=False)

    def _write(self, row: dict[str, Any]) -> None:
        # One CSV line by hand: pandas' DataFrame(...).to_csv() of one row took about 1 ms,
        # host work between two timed copies. ``csv_line`` writes what pandas would.
        self.fh.write(csv_line([row.get(c) for c in self.columns]))
        self.n += 1

    def write(self, row: dict[str, Any], flush: bool = True) -> None:
        """Append one row and flush it (``flush=False``: the caller flushes after a batch)."""
        self._write(row)
        if flush:
            self.fh.flush()

    def flush(self) -> None:
        """Flush the rows written so far to the partial file."""
        self.fh.flush()

    def close(self) -> None:
        """Close the partial file, releasing the run's lock (idempotent)."""
        if not self.fh.closed:
            self.fh.close()

    def finish(self, env: dict[str, Any]) -> pd.DataFrame:
        """Write ``out`` (and its env.json) from the partial file, then remove the partial
        file; the lock is held until then, so no other run can take the rows midway."""
        self.fh.flush()
        try:
            df = datasets.read(self.partial) if self.n else datasets.empty_table()
            datasets.save(df, self.out, env=env)
            self.partial.unlink(missing_ok=True)
            datasets.env_path(self.partial).unlink(missing_ok=True)
        finally:
            self.close()
        return df


def existing_rows(out: str | Path) -> tuple[pd.DataFrame | None, dict[str, Any] | None]:
    """Rows already measured for ``out`` (partial file first) and its env, for a resume.

    Raises ``UsageError`` when a table or env.json there cannot be read (cut short, empty,
    not h2dlab's): such a run cannot be continued, only replaced."""
    out = Path(out)
    partial = partial_path(out)
    try:
        if partial.exists():
            df = datasets.read(partial) if partial.stat().st_size else datasets.empty_table()
            if len(df) or not out.exists():
                ids = df["run_id"].unique() if len(df) else None  # another run's env.json is not used
                env = datasets.read_env(partial, run_ids=ids) or datasets.read_env(out, run_ids=ids)
                return df, env
            # an empty partial file beside a table: a resume stopped before it had copied the
            # table's rows over; the table holds them still
        if out.exists():
            df = datasets.read(out)
            return df, df.attrs.get("env")
        env = datasets.read_env(out)
    except datasets.SchemaError as exc:
        raise UsageError(f"cannot resume: {exc}; force a new run to replace it") from None
    return None, env


def foreign_parts(out: str | Path, done: pd.DataFrame) -> list[str]:
    """What the table at ``out`` holds that h2dlab did not write, as short phrases: columns
    outside the schema (``done`` is the table as read), and an .xlsx's sheets beyond its first."""
    from h2dlab.recording.schema import COLUMNS, OPTIONAL_COLUMNS

    parts = []
    cols = [str(c) for c in done.columns if c not in COLUMNS and c not in OPTIONAL_COLUMNS]
    if cols:
        parts.append(f"column{'s' if len(cols) > 1 else ''} {', '.join(repr(c) for c in cols[:5])}")
    if datasets.suffix_of(out) == ".xlsx":
        try:
            import openpyxl

            wb = openpyxl.load_workbook(out, read_only=True)
            sheets = wb.sheetnames[1:]
            wb.close()
        except Exception:  # noqa: BLE001 - it was read a moment ago; unreadable now: say so
            sheets = ["(the workbook's other sheets could not be listed)"]
        if sheets:
            parts.append(f"sheet{'s' if len(sheets) > 1 else ''} {', '.join(repr(s) for s in sheets[:5])}")
    return parts


def refuse_foreign(out: str | Path, done: pd.DataFrame) -> None:
    """Refuse to resume the stopped table at ``out`` when it holds what h2dlab did not write:
    the resume writes the table again from its rows, and the user's additions would be lost
    (as a finished table, it is left as it is; ``UsageError``, exit 2, names what and what to do)."""
    parts = foreign_parts(out, done)
    if parts:
        raise UsageError(
            f"cannot resume {out}: it holds {' and '.join(parts)} that h2dlab did not write, and the "
            "resume writes the table again without them; move them to another file first, "
            "or measure into a new --out"
        )


def check_resume(
    done: pd.DataFrame,
    planned: list[dict[str, Any]],
    recorded_spec: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
) -> None:
    """Refuse to resume a run whose spec or rows do not match this one.

    Raises ``UsageError`` naming the fields that differ, or the first row off the plan.
    """
    if recorded_spec and not isinstance(recorded_spec, dict):  # data: a damaged env.json
        raise UsageError(
            "cannot resume: its env.json's spec is not a JSON object: force a new run to replace it"
        )
    if recorded_spec and spec is not None:
        diff = differences(recorded_spec, spec)
        if diff:
            raise UsageError(
                f"cannot resume: this run's spec differs from the first run's ({'; '.join(diff)}): "
                "resume with the first run's spec, or force a new run to replace it"
            )
    if len(done) > len(planned):
        raise UsageError(f"cannot resume: the file holds {len(done)} rows but the plan has {len(planned)}")
    for rec, want in zip(done.to_dict("records"), planned, strict=False):
        got = (rec["strategy"], int(rec["size_bytes"]), int(rec["rep"]), bool(rec["warmup"]))
        if got != (want["strategy"], want["size_bytes"], want["rep"], want["warmup"]):
            raise UsageError(
                f"cannot resume: row {want['order']} on disk is {got}, not the planned "
                f"{(want['strategy'], want['size_bytes'], want['rep'], want['warmup'])}: "
                "resume with the first run's spec"
            )


def progress_bar(total: int, initial: int, desc: str, enabled: bool):
    """A tqdm bar on stderr, or None when disabled or tqdm is missing."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    from h2dlab.escape import terminal_text

    err = getattr(sys.stderr, "unfiltered", sys.stderr)  # the command's filter would show its \r as text
    return tqdm(
        total=total, initial=initial, desc=terminal_text(desc), unit="copy", file=err, dynamic_ncols=True
    )


class Recording:
    """One run's output bookkeeping, shared by sweep() and forum(): run id, rows, the
    partial file, the env.json written at the start, resume.

    Parameters
    ----------
    out
        The table to write (None: rows kept in memory only).
    spec
        The run spec's dict (stored as ``env['spec']``, compared on resume).
    planned
        The planned rows.
    resume
        Continue the run already in ``out``. A finished table (every planned row, no
        partial file) is never rewritten: ``AlreadyDone`` (a ``UsageError``) says so. A
        stopped table holding what the kit did not write (a user's column or sheet) is
        refused (``UsageError``, :func:`refuse_foreign`): its resume would write it again
        without them.
    argv
        The command line recorded in env.json.
    force
        Start a new run even if ``out`` exists or an unfinished run left its partial
        file (both are replaced). Without it they are kept and ``UsageError`` says so.
        A partial file a live run is writing is never taken (``OutputBusy``).
    """

    def __init__(
        self,
        out: str | Path | None,
        spec: dict[str, Any],
        planned: list[dict[str, Any]],
        resume: bool = False,
        argv: list[str] | None = None,
        force: bool = False,
    ) -> None:
        self.out = Path(out) if out is not None else None
        self.spec, self.planned, self.argv = spec, planned, argv
        self.rows: list[dict[str, Any]] = []
        self.run_id = uuid.uuid4().hex[:12]
        self.start_at = 0
        self.t_offset = 0.0
        done, fd = None, None
        if resume:
            if self.out is None:
                raise UsageError("resuming needs the output file of the run to continue")
            fd = reopen(self.out)  # locked; a torn last line cut
            try:
                done, env = existing_rows(self.out)
                if done is None:
                    raise UsageError(f"nothing to resume: {self.out} has not been started")
                check_resume(done, planned, (env or {}).get("spec"), spec)
                if fd is None and len(done) >= len(planned):  # no partial file: a whole table
                    raise AlreadyDone(
                        f"{self.out} is finished ({len(done)} of {len(planned)} planned rows): "
                        "nothing to resume; it is left as it is"
                    )
                if fd is None:  # a stopped table is rewritten whole: what the kit did not write is refused
                    refuse_foreign(self.out, done)
            except BaseException:
                if fd is not None:
                    os.close(fd)
                raise
            if len(done):
                self.run_id = str(done["run_id"].iloc[0])
                self.t_offset = float(np.nanmax(done["t_s"].to_numpy(dtype=float), initial=0.0)) + 1.0
            self.start_at = len(done)
            self.rows = done.to_dict("records")
        elif self.out is not None and (self.out.exists() or self.out.is_symlink()) and not force:
            raise UsageError(
                f"{self.out} exists and is kept: choose another output, or force a new run to replace it"
            )
        self.writer = None
        if self.out is not None:
            self.writer = RowWriter(self.out, done, fd=fd, force=force)
            # The fingerprint of the run in progress lives beside its partial file (with
            # this process's id, named by a second run that finds the output busy), so a
            # run that fails early leaves the env.json of an existing table alone.
            env = self._env(gpu=False)
            env["pid"] = os.getpid()
            datasets.write_env(env, datasets.env_path(self.writer.partial))
        self.t0 = time.perf_counter()

    def elapsed(self) -> float:
        """Seconds since the run began (continuing the first part's clock on resume)."""
        return self.t_offset + time.perf_counter() - self.t0

    def _env(self, gpu: bool) -> dict[str, Any]:
        env = collect_env(argv=self.argv, gpu=gpu)
        env["spec"] = self.spec
        env["run_id"] = self.run_id
        env["planned_rows"] = len(self.planned)
        return env

    def write(self, row: dict[str, Any]) -> None:
        """Stamp the run id on ``row``, keep it and flush it to the partial file."""
        self.write_all([row])

    def write_all(self, rows: list[dict[str, Any]]) -> None:
        """:meth:`write` for several rows, in order, flushed once after the last (and even
        with none: what an interrupted call left in the buffer). A row joins ``self.rows``
        once it is in the file's buffer, so ``len(self.rows)`` says how many went. Signals
        wait until every row is written and counted (``interrupts.signals_held``): a second
        Ctrl-C can neither drop the rows still waiting nor have one written twice."""
        with signals_held():
            for row in rows:
                row["run_id"] = self.run_id
                if self.writer is not None:
                    self.writer.write(row, flush=False)
                self.rows.append(row)
            if self.writer is not None:
                self.writer.flush()

    def finish(self, stop: StopFlag, gpu: bool) -> pd.DataFrame:
        """The table of every row kept; ``out`` and its env.json written if there is an ``out``.

        ``attrs``: ``env``, ``stopped`` (a stop was asked for before every planned row was
        measured), ``planned_rows``. A run on a GPU that was not stopped spins a stall census
        first (``census.census``, about a second, after its last copy), stored as
        ``env['stall_census']``.

        The stop flag covers the finish too: a SIGINT or SIGTERM while the table is written
        only sets it, and the table is written. A second one stops the write: the partial
        file keeps every row and the ``KeyboardInterrupt`` says how to resume.
        """
        with stop.installed():
            try:
                return self._finish(stop, gpu)
            except KeyboardInterrupt:
                raise KeyboardInterrupt(self._resume_hint()) from None

    def interrupted(self, exc: KeyboardInterrupt) -> KeyboardInterrupt:
        """``exc``, a ``KeyboardInterrupt`` that ended the measuring loop at once (a second
        Ctrl-C or SIGTERM), saying where the rows measured so far are kept and how to resume
        (raise it once they are written); one that already says something, as it is."""
        return exc if str(exc) else KeyboardInterrupt(self._resume_hint())

    def _resume_hint(self) -> str:
        """Where the rows are and how to resume, for a loop or a finish cut short."""
        if self.writer is None:
            return f"{len(self.rows)} of {len(self.planned)} rows measured, none kept (no output file)"
        if self.argv:
            flags = ("--resume", "--force")  # and argparse's abbreviations of them (--res)
            again = [
                a
                for a in self.argv
                if not (a[:2] == "--" and len(a) > 3 and any(f.startswith(a) for f in flags))
            ]
            how = f"resume with: {shlex.join([*again, '--resume'])}"
        else:
            how = "resume it (resume=True)"
        return (
            f"the table was not written; {len(self.rows)} of {len(self.planned)} rows kept in "
            f"{self.writer.partial}; {how}"
        )

    def _finish(self, stop: StopFlag, gpu: bool) -> pd.DataFrame:
        # Measured before the fingerprint: collect_env's reads are not part of it.
        stalls = census() if gpu and not stop and census_seconds() > 0 else None
        env = self._env(gpu=gpu)
        env["measured_rows"] = len(self.rows)
        env["stopped_by_signal"] = stop.signum
        if stalls is not None:
            env["stall_census"] = stalls
        if self.writer is not None:
            df = self.writer.finish(env)
        else:
            df = datasets.validate(pd.DataFrame(self.rows) if self.rows else datasets.empty_table())
        df = df.sort_values("order", kind="stable").reset_index(drop=True) if len(df) else df
        df.attrs["env"] = env
        df.attrs["stopped"] = bool(stop) and len(self.rows) < len(self.planned)  # else: whole
        df.attrs["planned_rows"] = len(self.planned)
        return df
