"""Rows to disk as they are measured, a stop flag for signals, and ``--resume``.

Rows are appended to ``<out>.partial.csv`` and flushed one by one, so an interrupt, a
crash or an out-of-memory size loses nothing; at the end the partial file becomes the
output (written, then renamed). A resumed run must have the same spec as the first
(compared field by field) and the rows on disk must follow its plan.
"""

from __future__ import annotations

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

from h2dlab import datasets
from h2dlab.env import collect_env
from h2dlab.errors import UsageError
from h2dlab.spec import differences

__all__ = [
    "Recording",
    "RowWriter",
    "StopFlag",
    "check_resume",
    "existing_rows",
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
        """Within the block, SIGINT and SIGTERM set this flag (a second one raises
        ``KeyboardInterrupt``). Outside the main thread signals cannot be caught: the
        flag is then set only by :meth:`request`."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

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


def partial_path(out: str | Path) -> Path:
    """Where the rows of ``out`` live while it is measured: ``<out>.partial.csv``."""
    out = Path(out)
    return out.with_name(out.name + ".partial.csv")


class RowWriter:
    """Append rows to ``<out>.partial.csv``, flushed one by one; ``finish()`` turns the
    partial file into ``out`` in its own format."""

    def __init__(self, out: Path, resume_rows: pd.DataFrame | None = None) -> None:
        self.out = Path(out)
        self.partial = partial_path(self.out)
        self.columns = list(datasets.COLUMNS)
        self.n = 0
        fresh = resume_rows is None or not self.partial.exists()
        self.fh = open(self.partial, "w" if fresh else "a", newline="")
        if fresh:
            self.fh.write(",".join(self.columns) + "\n")
            if resume_rows is not None and len(resume_rows):
                for rec in resume_rows.to_dict("records"):
                    self._write(rec)
        else:
            self.n = len(resume_rows)
        self.fh.flush()

    def _write(self, row: dict[str, Any]) -> None:
        df = pd.DataFrame([{c: row.get(c) for c in self.columns}])
        self.fh.write(df.to_csv(index=False, header=False))
        self.n += 1

    def write(self, row: dict[str, Any]) -> None:
        """Append one row and flush it."""
        self._write(row)
        self.fh.flush()

    def close(self) -> None:
        """Close the partial file (idempotent)."""
        if not self.fh.closed:
            self.fh.close()

    def finish(self, env: dict[str, Any]) -> pd.DataFrame:
        """Write ``out`` (and its env.json) from the partial file, then remove the partial file."""
        self.close()
        df = datasets.read(self.partial) if self.n else datasets.empty_table()
        datasets.save(df, self.out, env=env)
        self.partial.unlink(missing_ok=True)
        return df


def existing_rows(out: str | Path) -> tuple[pd.DataFrame | None, dict[str, Any] | None]:
    """Rows already measured for ``out`` (partial file first) and its env, for a resume."""
    out = Path(out)
    partial = partial_path(out)
    env = datasets.read_env(out)
    if partial.exists():
        return datasets.read(partial), env
    if out.exists():
        return datasets.read(out), env
    return None, env


def check_resume(
    done: pd.DataFrame,
    planned: list[dict[str, Any]],
    recorded_spec: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
) -> None:
    """Refuse to resume a run whose spec or rows do not match this one.

    Raises ``UsageError`` naming the fields that differ, or the first row off the plan.
    """
    if recorded_spec and spec is not None:
        diff = differences(recorded_spec, spec)
        if diff:
            raise UsageError(
                f"cannot resume: this run's spec differs from the first run's ({'; '.join(diff)})"
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
    return tqdm(total=total, initial=initial, desc=desc, unit="copy", file=sys.stderr, dynamic_ncols=True)


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
        Continue the run already in ``out``.
    argv
        The command line recorded in env.json.
    """

    def __init__(
        self,
        out: str | Path | None,
        spec: dict[str, Any],
        planned: list[dict[str, Any]],
        resume: bool = False,
        argv: list[str] | None = None,
    ) -> None:
        self.out = Path(out) if out is not None else None
        self.spec, self.planned, self.argv = spec, planned, argv
        self.rows: list[dict[str, Any]] = []
        self.run_id = uuid.uuid4().hex[:12]
        self.start_at = 0
        self.t_offset = 0.0
        done = None
        if resume:
            if self.out is None:
                raise UsageError("resuming needs the output file of the run to continue")
            done, env = existing_rows(self.out)
            if done is None:
                raise UsageError(f"nothing to resume: {self.out} has not been started")
            check_resume(done, planned, (env or {}).get("spec"), spec)
            if len(done):
                self.run_id = str(done["run_id"].iloc[0])
                self.t_offset = float(np.nanmax(done["t_s"].to_numpy(dtype=float), initial=0.0)) + 1.0
            self.start_at = len(done)
            self.rows = done.to_dict("records")
        self.writer = RowWriter(self.out, done if resume else None) if self.out is not None else None
        self.t0 = time.perf_counter()
        if self.out is not None:
            # Written at once, so an interrupted run can be resumed; completed at the end.
            datasets.write_env(self._env(gpu=False), datasets.env_path(self.out))

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
        row["run_id"] = self.run_id
        self.rows.append(row)
        if self.writer is not None:
            self.writer.write(row)

    def finish(self, stop: StopFlag, gpu: bool) -> pd.DataFrame:
        """The table of every row kept; ``out`` and its env.json written if there is an ``out``.

        ``attrs``: ``env``, ``stopped`` (a stop was asked for), ``planned_rows``.
        """
        env = self._env(gpu=gpu)
        env["measured_rows"] = len(self.rows)
        env["stopped_by_signal"] = stop.signum
        if self.writer is not None:
            df = self.writer.finish(env)
        else:
            df = datasets.validate(pd.DataFrame(self.rows) if self.rows else datasets.empty_table())
        df = df.sort_values("order", kind="stable").reset_index(drop=True) if len(df) else df
        df.attrs["env"] = env
        df.attrs["stopped"] = bool(stop)
        df.attrs["planned_rows"] = len(self.planned)
        return df
