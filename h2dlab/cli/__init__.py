"""The ``h2dlab`` command (``main``) and its subcommands. Nothing in the package imports
it; ``python -m h2dlab`` and ``python -m h2dlab.cli`` run it.
"""
