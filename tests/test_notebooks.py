"""The notebooks: thin (no def/class), paired with their jupytext .py files, committed with
outputs, and executable in replay mode on a CPU-only machine (rendered by `h2dlab report`)."""

import ast
import json
from pathlib import Path

import jupytext
import pytest

from h2dlab import report

NB = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = report.NOTEBOOKS


@pytest.mark.parametrize("name", NAMES)
def test_no_function_or_class_definitions(name):
    tree = ast.parse((NB / f"{name}.py").read_text())
    bad = [
        type(n).__name__
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
    ]
    assert not bad, f"{name} defines {bad}: move it into the h2dlab package"


@pytest.mark.parametrize("name", NAMES)
def test_jupytext_pair_agrees(name):
    py = jupytext.read(NB / f"{name}.py")
    ipynb = jupytext.read(NB / f"{name}.ipynb")
    src = lambda nb: [(c.cell_type, c.source.strip()) for c in nb.cells]  # noqa: E731
    assert src(py) == src(ipynb), f"{name}.py and {name}.ipynb differ: run `make notebooks`"


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_has_outputs_and_no_errors(name):
    nb = json.loads((NB / f"{name}.ipynb").read_text())
    outs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    assert not [o for o in outs if o["output_type"] == "error"]
    images = [o for o in outs if "image/png" in o.get("data", {})]
    assert images, f"{name} carries no figure"
    params = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1 and 'MODE = "auto"' in "".join(params[0]["source"])


@pytest.mark.slow
def test_notebooks_execute_in_replay_mode(rendered):
    rc, out = rendered
    assert rc == 0
    for name in report.REPORTED:
        html = (out / f"{name}.html").read_text()
        assert "Replay</b> of recorded data" in html
        assert "Traceback" not in html
    assert (out / "h2dlab-tables.xlsx").stat().st_size > 10_000
