"""The exceptions the ``h2dlab`` command turns into one line instead of a traceback.

``UsageError`` is a ``ValueError``: library callers may catch either. The ``h2dlab``
command turns a ``UsageError`` into one line on stderr and exit code 2 (the command
line or its input is wrong), and an ``Unavailable`` (a ``UsageError`` too, so callers
that catch that keep working) into one line and exit code 1: what was asked is right,
but this machine cannot do it. Every other exception keeps its traceback, because it
is a bug, not a mistake in what was asked.
"""

from __future__ import annotations

__all__ = ["AlreadyDone", "Unavailable", "UsageError"]


class UsageError(ValueError):
    """A value the caller gave cannot be used; the message says what to do instead.

    Messages are written in library terms (parameter names, not command-line flags). A file
    name or a file's text in one is shown, never obeyed, wherever it is printed (a script's
    traceback too): its control and format characters are written ``\\uXXXX``
    (``escape.terminal_text``; a line break too: the kit writes none in a message).
    """

    def __init__(self, *args: object) -> None:
        from h2dlab.escape import terminal_text

        super().__init__(*(terminal_text(a) if isinstance(a, str) else a for a in args))


class Unavailable(UsageError):
    """This machine lacks what the request needs (CUDA); the
    message says what can be done here instead (e.g. replay the recorded data). A GPU
    index the machine does not have is a ``UsageError`` (exit 2), like ``--gpus``."""


class AlreadyDone(UsageError):
    """What was asked is already done, and nothing was changed: a ``--resume`` of a table
    whose every planned row is measured. The ``h2dlab`` command says so in one line and
    exits 0 (the table the user asked for is there); a library caller gets a
    ``UsageError``, so that it never takes the untouched table for a new run."""
