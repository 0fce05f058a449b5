"""Every third-party package h2dlab/ imports is declared in pyproject.toml (issue 35: tqdm and
tensordict were imported but not declared where they are used), and an optional one's absence
is a plain sentence, not an ImportError.

The imports are read with ``ast`` (nothing is executed); an import name maps to the
distribution that provides it (``IPython`` -> ``ipython``, ``pynvml`` -> ``nvidia-ml-py``).
An import guarded by ``try: ... except ImportError`` is optional: it must be in an extra.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
tomllib = pytest.importorskip("tomllib")  # Python >= 3.11 (CI's); 3.10 skips these

#: import name -> distribution, where they differ
DISTRIBUTION = {"IPython": "ipython", "jupyter_client": "jupyter-client", "pynvml": "nvidia-ml-py"}
#: caught by an ``except`` naming one of these, an import is optional
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist(spec: str) -> str:
    return _norm(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec).group(1))


def _guarded(handlers: list[ast.ExceptHandler]) -> bool:
    names = set()
    for h in handlers:
        t = h.type
        for e in t.elts if isinstance(t, ast.Tuple) else [t]:
            if isinstance(e, ast.Name):
                names.add(e.id)
    return bool(names & IMPORT_ERRORS)


def third_party_imports(folder: Path) -> dict[str, dict[str, list[str]]]:
    """distribution -> {"required": [where], "optional": [where]} for every import under folder."""
    found: dict[str, dict[str, list[str]]] = {}

    def visit(node: ast.AST, where: str, optional: bool) -> None:
        if isinstance(node, ast.Try):
            guard = optional or _guarded(node.handlers)
            for child in node.body:
                visit(child, where, guard)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, where, optional)
            return
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top == "h2dlab" or top == "__future__":
                continue
            dist = _norm(DISTRIBUTION.get(top, top))
            kind = "optional" if optional else "required"
            found.setdefault(dist, {"required": [], "optional": []})[kind].append(f"{where}:{node.lineno}")
        for child in ast.iter_child_nodes(node):
            visit(child, where, optional)

    for path in sorted(folder.rglob("*.py")):
        visit(ast.parse(path.read_text(), str(path)), str(path.relative_to(ROOT)), False)
    return found


@pytest.fixture(scope="module")
def package_imports() -> dict[str, dict[str, list[str]]]:
    return third_party_imports(ROOT / "h2dlab")


@pytest.fixture(scope="module")
def declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_dist(s) for s in project["dependencies"]}
    extras = {k: {_dist(s) for s in v} for k, v in project["optional-dependencies"].items()}
    return core, extras


def test_the_walk_sees_guarded_imports_as_optional(tmp_path):
    (tmp_path / "m.py").write_text(
        "import numpy\ntry:\n    import tqdm\nexcept ImportError:\n    tqdm = None\n"
        "def f():\n    try:\n        from IPython import display\n    except (ValueError, ModuleNotFoundError):\n"
        "        pass\n    try:\n        import pandas\n    except Exception:\n        pass\n"
    )
    global ROOT
    root, ROOT = ROOT, tmp_path
    try:
        got = third_party_imports(tmp_path)
    finally:
        ROOT = root
    assert got == {
        "numpy": {"required": ["m.py:1"], "optional": []},
        "tqdm": {"required": [], "optional": ["m.py:3"]},
        "ipython": {"required": [], "optional": ["m.py:8"]},
        "pandas": {"required": ["m.py:12"], "optional": []},  # `except Exception` is not an import guard
    }


def test_every_third_party_import_of_the_package_is_declared(declared, package_imports):
    core, extras = declared
    anywhere = core.union(*extras.values())
    undeclared = {d: w for d, w in package_imports.items() if d not in anywhere}
    assert not undeclared, f"imported by h2dlab/ but not in pyproject.toml: {undeclared}"


def test_an_optional_import_is_in_an_extra(declared, package_imports):
    core, extras = declared
    in_extra = set().union(*extras.values())
    loose = {
        d: w["optional"]
        for d, w in package_imports.items()
        if w["optional"] and d not in in_extra and d not in core
    }
    assert not loose, f"optional imports in no extra: {loose}"


def test_progress_bars_and_tensordict_have_extras_of_their_own(declared, package_imports):
    """tqdm draws measure's and record's progress (both fall back to plain lines): a user who
    measures gets it with `h2dlab[progress]`, not only with the notebooks; tensordict is one
    batch method and the benchmarks' rows: its own extra, never a core dependency."""
    core, extras = declared
    assert extras.get("progress") == {"tqdm"}
    assert extras.get("tensordict") == {"tensordict"} and "tensordict" not in core
    users = package_imports
    assert {w.split(":")[0] for w in users["tqdm"]["optional"]} == {
        "h2dlab/measure/recorder.py",
        "h2dlab/recording/run.py",
    }
    assert not users["tqdm"]["required"]
    # tensordict: checked by TensorDictPin.unavailable, then imported where the method prepares
    assert {w.split(":")[0] for d in ("required", "optional") for w in users["tensordict"][d]} == {
        "h2dlab/measure/batch_methods.py"
    }


def test_without_tensordict_its_batch_method_says_how_to_get_it(monkeypatch):
    import torch

    from h2dlab.measure import batch_methods

    monkeypatch.setitem(sys.modules, "tensordict", None)  # `import tensordict` now fails
    why = batch_methods.METHODS["tensordict"].unavailable(torch.device("cpu"))
    assert why == "unavailable: tensordict is not installed (pip install 'h2dlab[tensordict]')"


def test_without_tqdm_records_progress_is_plain_lines_even_on_a_terminal(monkeypatch, capsys):
    from h2dlab.recording import run

    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    p = run._Progress(total=120.0, n=2)
    assert p.bar is None
    p.start(1, {"name": "sweep/pow2", "seconds": 60.0})
    p.end({"name": "sweep/pow2", "seconds": 60.0, "status": "done"}, "done in 58 s")
    p.close()
    out = capsys.readouterr().out
    assert "[1/2] sweep/pow2 (est. 60 s; about 2.0 min left)" in out and "done in 58 s" in out
