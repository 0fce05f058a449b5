"""``python -m h2dlab.cli``: the ``h2dlab`` command (as ``python -m h2dlab``)."""

from h2dlab.__main__ import run

if __name__ == "__main__":
    run()
