"""The module layout (issue 12): split modules keep their public names, import on their own,
and no module reaches for another's private names."""

import ast
import importlib
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: (old home, name, new home): names that moved when a module was split, still reachable from
#: where notebooks, the README and the CLI import them.
MOVED = [
    ("model", "check_values", "rows"),
    ("model", "timed", "rows"),
    ("model", "value_ms", "rows"),
    ("model", "MODEL_COLUMNS", "rows"),
    ("model", "MEASURED_COLUMNS", "rows"),
    ("findings", "Finding", "finding"),
    ("findings", "spread", "finding"),
    ("findings", "clocks", "findings_clocks"),
    ("advice", "size_text", "finding"),
    ("advice", "bandwidth", "findings_speed"),
    ("advice", "memory_kind", "findings_speed"),
    ("advice", "small_copy_floor", "findings_speed"),
    ("findings_speed", "small_copy_floor", "findings_spacing"),
    ("advice", "host_copy_ceiling", "findings_speed"),
    *[
        ("plots", name, "plots_style")
        for name in (
            "PALETTE", "CAUSE_COLORS", "SHORT_CAUSE", "subplots", "axes_or_new", "size_label", "size_axis",
            "provenance", "footnote", "legend_outside", "place_labels", "timed_rows", "palette_for",
            "pcie_limit_gbps", "hline_label", "pow2_boundaries",
        )
    ],
    ("plots", "staged_timeline", "plots_fastpath"),
    ("plots", "advice_bars", "plots_compare"),
    ("plots", "batch_overhead", "plots_transfer"),
    *[("timing", name, "failures") for name in ("CudaFault", "error_text", "is_cuda_fault", "is_oom")],
]  # fmt: skip


@pytest.mark.parametrize(("old", "name", "new"), MOVED, ids=[f"{o}.{n}" for o, n, _ in MOVED])
def test_moved_name_is_the_same_object_in_its_old_home(old, name, new):
    o = importlib.import_module(f"h2dlab.{old}")
    n = importlib.import_module(f"h2dlab.{new}")
    assert name in o.__all__ and name in n.__all__
    assert getattr(o, name) is getattr(n, name)


@pytest.mark.parametrize(
    "module",
    [
        "rows",
        "finding",
        "findings_speed",
        "plots_style",
        "plots_frame",
        "plots_compare",
        "plots_transfer",
        "plots_fastpath",
    ],
)
def test_module_imports_first_in_a_fresh_interpreter(module):
    # A module imported before its re-exporting parent must not hit a half-initialised import cycle.
    r = subprocess.run(
        [sys.executable, "-c", f"import h2dlab.{module}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr


def test_no_module_imports_a_private_name_from_another():
    offenders = []
    for path in sorted((ROOT / "h2dlab").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("h2dlab"):
                offenders += [
                    f"{path.name}: from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert offenders == []
