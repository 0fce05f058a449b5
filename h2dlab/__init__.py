"""h2dlab: measure and explain host-to-device copies in PyTorch.

Data flows one way: measure -> table -> analyse -> figure -> notebook. Importing the
package imports nothing else (no torch, no pandas): import the module you need, e.g.
``from h2dlab.measure import sweep``, ``from h2dlab.spec import SweepSpec``,
``from h2dlab import datasets, model, outliers, plots``. The layout is drawn in
README.md ("Layout").
"""

__all__ = ["SCHEMA_VERSION", "__version__"]

__version__ = "0.1.0"

# Bumped whenever the measurement method or the table's columns change (pyperf style).
# 2: direction, n_tensors, page faults, cpu_ms, gc_count, SM clock, GPU procs;
# 3: run_delay_ms, nivcsw, nvcsw, cpu_moved, proc_cpu_ms, proc_faults, issue_ms, gc_ms (scheduler evidence);
# 4: others_cpu_ms, others_window_ms, busiest_cpu_ms, busiest_thread, n_threads (other threads, own CPU clocks)
# 5: others_wait_ms, longest_wait_ms (the other threads' run-queue wait during the copy)
# 6: no new column; measure's loop does at most ~0.2 ms of host work between two timed copies
#    (light evidence by default: sm_clock_mhz, gpu_procs, others_*, busiest_*, n_threads are
#    NaN unless the run's spec says evidence "full"), and the end event follows the copy
#    directly (issue_ms now includes recording it). Earlier measure runs' copies followed
#    1-6 ms of the kit's own work: their small copies are costs after an idle gap.
SCHEMA_VERSION = 6


def __getattr__(name: str):  # h2dlab.doctor(path) and h2dlab.profile(): imported on first use
    if name in ("doctor", "profile"):
        import importlib

        mod = importlib.import_module("h2dlab.doctor")
        return mod if name == "doctor" else mod.profile
    raise AttributeError(f"module 'h2dlab' has no attribute {name!r}")
