"""``python -m h2dlab``: the ``h2dlab`` command."""

from h2dlab.cli import run

run()
