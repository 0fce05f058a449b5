"""SIGTERM as Ctrl-C: a block within which SIGTERM raises ``KeyboardInterrupt``, so that
cleanup code runs and a command ends with its one line and exit code 130. Stdlib only."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["terminate_raises"]


@contextmanager
def terminate_raises() -> Iterator[None]:
    """Within the block, SIGTERM (where it would kill the process outright) raises
    ``KeyboardInterrupt`` instead, so that cleanup code runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.getsignal(signal.SIGTERM)
    if old not in (signal.SIG_DFL, None):
        yield
        return

    def handler(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
