"""h2dlab: measure and explain host-to-device copies in PyTorch.

Data flows one way: measure -> table -> analyse -> figure -> notebook.
Only the measuring modules are imported here, so ``import h2dlab`` stays light
(torch, numpy and pandas) on a bare GPU box.
"""

__version__ = "0.1.0"

# Bumped whenever the measurement method or the table's columns change (pyperf style).
SCHEMA_VERSION = 2  # 2: direction, n_tensors, page faults, cpu_ms, gc_count, SM clock, GPU procs
