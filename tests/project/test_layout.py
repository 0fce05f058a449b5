"""The module layout (issue 12): split modules keep their public names, import on their own,
and no module reaches for another's private names. No line cap (issue 29: a module is as
long as its one job needs); the import graph is checked in tests/project/test_import_graph.py."""

import ast
import importlib
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: (old home, name, new home): names that moved when a module was split, still reachable from
#: where notebooks, the README and the CLI import them.
MOVED = [
    ("h2dlab.explain.model", "check_values", "h2dlab.explain.rows"),
    ("h2dlab.explain.model", "timed", "h2dlab.explain.rows"),
    ("h2dlab.explain.model", "value_ms", "h2dlab.explain.rows"),
    ("h2dlab.explain.model", "MODEL_COLUMNS", "h2dlab.explain.rows"),
    ("h2dlab.explain.model", "MEASURED_COLUMNS", "h2dlab.explain.rows"),
    ("h2dlab.findings.claims", "Finding", "h2dlab.explain.finding"),
    ("h2dlab.findings.claims", "spread", "h2dlab.explain.finding"),
    ("h2dlab.findings.claims", "clocks", "h2dlab.findings.clocks"),
    ("h2dlab.findings.advice", "size_text", "h2dlab.explain.finding"),
    ("h2dlab.findings.advice", "bandwidth", "h2dlab.findings.speed"),
    ("h2dlab.findings.advice", "memory_kind", "h2dlab.findings.speed"),
    ("h2dlab.findings.advice", "small_copy_floor", "h2dlab.findings.speed"),
    ("h2dlab.findings.advice", "host_copy_ceiling", "h2dlab.findings.speed"),
    ("h2dlab.findings.speed", "small_copy_floor", "h2dlab.explain.spacing"),
    *[
        ("h2dlab.show.plots", name, "h2dlab.show.plots_style")
        for name in (
            "PALETTE", "CAUSE_COLORS", "SHORT_CAUSE", "subplots", "axes_or_new", "size_label", "size_axis",
            "provenance", "footnote", "legend_outside", "place_labels", "timed_rows", "palette_for",
            "pcie_limit_gbps", "hline_label", "pow2_boundaries",
        )
    ],
    ("h2dlab.show.plots", "staged_timeline", "h2dlab.show.plots_fastpath"),
    ("h2dlab.show.plots", "advice_bars", "h2dlab.show.plots_compare"),
    ("h2dlab.show.plots", "batch_overhead", "h2dlab.show.plots_transfer"),
    *[("h2dlab.measure.timing", name, "h2dlab.measure.failures") for name in ("CudaFault", "error_text", "is_cuda_fault", "is_oom")],
]  # fmt: skip


@pytest.mark.parametrize(
    ("old", "name", "new"), MOVED, ids=[f"{o.rpartition('.')[2]}.{n}" for o, n, _ in MOVED]
)
def test_moved_name_is_the_same_object_in_its_old_home(old, name, new):
    o = importlib.import_module(old)
    n = importlib.import_module(new)
    assert name in o.__all__ and name in n.__all__
    assert getattr(o, name) is getattr(n, name)


@pytest.mark.parametrize(
    "module",
    [
        "h2dlab.explain.rows",
        "h2dlab.explain.finding",
        "h2dlab.findings.speed",
        "h2dlab.show.plots_style",
        "h2dlab.show.plots_frame",
        "h2dlab.show.plots_compare",
        "h2dlab.show.plots_transfer",
        "h2dlab.show.plots_fastpath",
    ],
)
def test_module_imports_first_in_a_fresh_interpreter(module):
    # A module imported before its re-exporting parent must not hit a half-initialised import cycle.
    r = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr


def test_no_module_imports_a_private_name_from_another():
    offenders = []
    for path in sorted((ROOT / "h2dlab").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("h2dlab"):
                offenders += [
                    f"{path.name}: from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert offenders == []
