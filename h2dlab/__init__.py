"""h2dlab: measure and explain host-to-device copies in PyTorch.

Data flows one way: measure -> recording (tables on disk) -> explain -> findings -> show,
with the command line on top; docs/ARCHITECTURE.md draws the map. Importing the package
imports nothing else (no torch, no pandas). The names a notebook needs are here, each
loaded when first used (:data:`__all__`, through the module's ``__getattr__``)::

    from h2dlab import session, plots, findings_speed      # modules
    from h2dlab import load, detect, fit, to_device        # functions

========================  =============================================================
modules                   ``datasets`` (tables by name), ``session`` (a recording in a
                          notebook), ``outliers``, ``model``, ``advice``, ``factors``,
                          ``findings_speed``, ``findings_transfer``, ``forum_claims``,
                          ``findings_spacing`` (back to back or after a gap),
                          ``findings_tutorial``, ``findings_workload`` (the answer),
                          ``compare_machines``, ``plots``
measure                   ``sweep``, ``SweepSpec``, ``strategies`` (the registry)
the fast path             ``to_device``, ``pinned``
tables                    ``load`` (``datasets.load``); a recording:
                          ``session.recording``
explain                   ``fit`` (``model.fit``), ``detect``, ``summary``, ``ruled_out``
                          (``outliers``; ``outliers.explain`` names each spike's cause)
show                      ``Explorer`` (notebook 05's explorer)
========================  =============================================================

No public name is a subpackage's (measure, transfer, recording, explain, findings, show,
cli) but ``doctor``, a callable module (``h2dlab.doctor(trace)``): those are the folders. Everything else is reached through its module.
"""

import importlib

#: Public name -> "module" or "module:attribute", imported on first use.
_PUBLIC = {
    "advice": "h2dlab.findings.advice",
    "compare_machines": "h2dlab.findings.compare_machines",
    "datasets": "h2dlab.recording.datasets",
    "factors": "h2dlab.findings.factors",
    "findings_speed": "h2dlab.findings.speed",
    "findings_transfer": "h2dlab.findings.transfer",
    "findings_spacing": "h2dlab.explain.spacing",
    "findings_tutorial": "h2dlab.findings.tutorial",
    "findings_workload": "h2dlab.findings.workload",
    "forum_claims": "h2dlab.findings.forum_claims",
    "model": "h2dlab.explain.model",
    "outliers": "h2dlab.explain.outliers",
    "plots": "h2dlab.show.plots",
    "session": "h2dlab.recording.session",
    "strategies": "h2dlab.measure.strategies",
    "sweep": "h2dlab.measure.harness:sweep",
    "SweepSpec": "h2dlab.measure.spec:SweepSpec",
    "to_device": "h2dlab.transfer.fastpath:to_device",
    "pinned": "h2dlab.transfer.fastpath:pinned",
    "load": "h2dlab.recording.datasets:load",
    "fit": "h2dlab.explain.model:fit",
    "detect": "h2dlab.explain.outliers:detect",
    "ruled_out": "h2dlab.explain.outliers:ruled_out",
    "summary": "h2dlab.explain.outliers:summary",
    "Explorer": "h2dlab.show.explore:Explorer",
    "doctor": "h2dlab.doctor",  # a callable module: h2dlab.doctor(trace_path)
    "profile": "h2dlab.doctor:profile",
}

__all__ = ["SCHEMA_VERSION", "__version__", *sorted(_PUBLIC)]

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


def __getattr__(name: str):
    """A public name of :data:`__all__`, imported on first use."""
    target = _PUBLIC.get(name)
    if target is None:
        raise AttributeError(f"module 'h2dlab' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    found = importlib.import_module(module)
    return getattr(found, attr) if attr else found


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
