"""Measuring: the strategies (one class per way to copy, in one registry), the per-copy
timer, the harness (``sweep``) and the experiments (forum, batch, duplex, overlap,
concurrent). Imports torch, numpy and pandas, the table layer and transfer/; nothing above.

``from h2dlab.measure import NAME`` reads NAME from :mod:`h2dlab.measure.harness` when first
used (importing the package alone imports nothing else).
"""

import importlib


def __getattr__(name: str):
    module = importlib.import_module("h2dlab.measure.harness")
    if name in module.__all__:
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
