"""The partial file of a run in progress: owned by one run, never followed through a link.

A run's rows go to ``<out>.partial.csv`` as they are measured. That file is created
exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``: an existing file or a planted symbolic
link is refused, never truncated or followed) and locked (``flock``) for as long as the
run lasts, so a second run with the same output refuses at once instead of destroying
the first one's rows. A resume opens the existing file without following links, takes
the same lock and cuts a last line that an interrupted write left half written.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from pathlib import Path

from h2dlab.errors import UsageError
from h2dlab.recording.tableio import ENV_MAX_BYTES, read_env_bytes

__all__ = ["OutputBusy", "check_free", "claim", "holder_pid", "partial_path", "reopen", "replace_locked"]

_FLAGS = os.O_RDWR | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class OutputBusy(UsageError):
    """Another live run owns this output (its partial file is locked)."""


def partial_path(out: str | Path) -> Path:
    """Where the rows of ``out`` live while it is measured: ``<out>.partial.csv``."""
    out = Path(out)
    return out.with_name(out.name + ".partial.csv")


def holder_pid(partial: Path) -> int | None:
    """The process id recorded in the partial file's env.json by the run writing it, if any."""
    try:
        data = read_env_bytes(partial.with_name(partial.name + ".env.json"), ENV_MAX_BYTES)
        env = json.loads(data) if data is not None else {}  # over 1 MiB: no run's, names no pid
        pid = env.get("pid")
        return int(pid) if isinstance(pid, int) and not isinstance(pid, bool) else None
    except (OSError, ValueError, AttributeError, RecursionError):  # nested past the parser's depth
        return None


def _busy(partial: Path, out: Path) -> OutputBusy:
    pid = holder_pid(partial)
    who = f"another run (pid {pid})" if pid else "another run"
    return OutputBusy(
        f"{who} is writing {out} (its rows are in {partial.name}): wait for it or write elsewhere"
    )


def _open(path: Path, flags: int, out: Path) -> int:
    try:
        return os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(
                f"{path} is a symbolic link: a run's partial file is never written through a link; remove it"
            ) from None
        raise


def _lock(fd: int, partial: Path, out: Path) -> int:
    """Take the run's lock on ``fd`` (or close it and raise ``OutputBusy``); the path must
    still name the locked file (a run that just finished removes it)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise _busy(partial, out) from None
        raise
    st = os.fstat(fd)
    try:
        now = os.stat(partial, follow_symlinks=False)
    except FileNotFoundError:
        now = None
    if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise OutputBusy(f"{partial.name} changed while it was opened (another run of {out}?): try again")
    return fd


def check_free(out: str | Path) -> None:
    """Raise ``OutputBusy`` if a live run is writing ``out`` (its partial file is locked)."""
    out = Path(out)
    partial = partial_path(out)
    try:
        fd = os.open(partial, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return  # none there, or a link (which no run writes through)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise _busy(partial, out) from None
        raise
    finally:
        os.close(fd)


def claim(out: str | Path, force: bool = False) -> int:
    """Create ``<out>.partial.csv`` for a new run and lock it; returns its file descriptor.

    An existing partial file holds the rows of an unfinished run: it is kept (``UsageError``
    saying to resume or force) unless ``force``, and never taken from a live run
    (``OutputBusy``) even then. A symbolic link there is refused.
    """
    out = Path(out)
    partial = partial_path(out)
    try:
        fd = _open(partial, _FLAGS | os.O_CREAT | os.O_EXCL, out)
    except FileExistsError:
        old = _open(partial, _FLAGS, out)  # ELOOP: a link was planted there
        _lock(old, partial, out)  # OutputBusy if a live run owns it
        try:
            if not force:
                raise UsageError(
                    f"{partial} holds the rows of an unfinished run of {out.name}: "
                    "resume it, or force a new run to discard them"
                )
            partial.unlink()
            fd = _open(partial, _FLAGS | os.O_CREAT | os.O_EXCL, out)
        finally:
            os.close(old)
    return _lock(fd, partial, out)


def reopen(out: str | Path) -> int | None:
    """Open and lock the partial file of an interrupted run for a resume (None if there is
    none); a last line cut off mid-write is removed, so that new rows start on a line of
    their own."""
    out = Path(out)
    partial = partial_path(out)
    try:
        fd = _open(partial, _FLAGS, out)
    except FileNotFoundError:
        return None
    _lock(fd, partial, out)
    size = os.fstat(fd).st_size
    if size:
        data = os.pread(fd, size, 0)
        if not data.endswith(b"\n"):
            os.ftruncate(fd, data.rfind(b"\n") + 1)
    os.lseek(fd, 0, os.SEEK_END)
    return fd


def replace_locked(fd: int, out: str | Path, text: str) -> int:
    """Replace the locked partial file's content with ``text`` (a new file renamed over it,
    so a crash leaves the old or the new one whole); returns the new file's locked descriptor."""
    out = Path(out)
    partial = partial_path(out)
    tmp = partial.with_name(f".{partial.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    new = _open(tmp, _FLAGS | os.O_CREAT | os.O_EXCL, out)
    try:
        fcntl.flock(new, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else knows this name yet
        data = memoryview(text.encode())
        while data:
            data = data[os.write(new, data) :]
        os.fsync(new)
        os.replace(tmp, partial)
    except BaseException:
        os.close(new)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.lseek(new, 0, os.SEEK_END)
    return new
