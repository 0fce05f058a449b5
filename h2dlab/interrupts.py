"""SIGTERM and SIGHUP as Ctrl-C: a block within which they raise ``KeyboardInterrupt``, so
that cleanup code runs (a report's kernel is shut down and its connection file removed, a
table keeps its rows) and a command ends with its one line and exit code 130. SIGHUP comes
when the terminal or ssh session closes. Stdlib only."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["STOPPING", "signals_held", "terminate_raises"]

#: The signals that would end the process outright and are taken as Ctrl-C instead.
STOPPING = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


@contextmanager
def terminate_raises() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP (where they would kill the process outright)
    raise ``KeyboardInterrupt`` instead, so that cleanup code runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    taken = [s for s in STOPPING if signal.getsignal(s) in (signal.SIG_DFL, None)]  # another handler is kept
    with _handled_by(taken, handler):
        yield


@contextmanager
def signals_held() -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP are noted, not acted on; when it ends,
    each one noted goes to the handler that was in place (a stop flag's, Python's Ctrl-C,
    or the default, which ends the process). For a few steps that must all happen or none,
    such as a row written to its file and counted as written. A Python handler runs only in
    the main thread, so the block holds nothing elsewhere (nor needs to)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = (signal.SIGINT, *STOPPING)
    noted: list[int] = []

    def note(signum, frame):  # noqa: ARG001
        noted.append(signum)

    old = {s: signal.getsignal(s) for s in held}
    try:
        with _handled_by(held, note):
            yield
    finally:
        for s in noted:  # after the block, in order, to the handler that was in place
            handler = old[s]
            if callable(handler):
                handler(s, None)
            elif handler in (signal.SIG_DFL, None):
                signal.raise_signal(s)


@contextmanager
def _handled_by(signals, handler) -> Iterator[None]:
    """Within the block, ``handler`` handles ``signals``; each one's own handler after it."""
    old = {s: signal.getsignal(s) for s in signals}
    for s in signals:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s in signals:
            signal.signal(s, old[s])
