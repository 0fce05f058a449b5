"""The one exception for a caller's mistake.

``UsageError`` is a ``ValueError``: library callers may catch either. The ``h2dlab``
command turns a ``UsageError`` (and nothing else) into one line on stderr and exit
code 2; every other exception keeps its traceback, because it is a bug or a fault of
the machine, not a mistake in what was asked.
"""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(ValueError):
    """A value the caller gave cannot be used; the message says what to do instead.

    Messages are written in library terms (parameter names, not command-line flags).
    """
