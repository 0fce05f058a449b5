"""The fast path users import: ``to_device()``, the Stager (a pinned ring that threads
stage chunks through while the copy engine runs) and ``pinned()``. Imports only torch.

``from h2dlab.transfer import NAME`` reads NAME from :mod:`h2dlab.transfer.fastpath` when first
used (importing the package alone imports nothing else).
"""

import importlib


def __getattr__(name: str):
    module = importlib.import_module("h2dlab.transfer.fastpath")
    if name in module.__all__:
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
