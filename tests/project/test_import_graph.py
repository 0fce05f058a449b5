"""The package's import graph, read from the source with ``ast`` (nothing is imported): no
import circle, no module imports the command line, reading a table imports no analysis,
and, in the folder layout, a lower layer never imports a higher one (issue 29)."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PKG = ROOT / "h2dlab"

#: The layers, lowest first (docs/ARCHITECTURE.md): a module may import its own layer and
#: those below. measure/, transfer/ and recording/ are one layer: the tables' side.
LAYERS = {"measure": 0, "transfer": 0, "recording": 0, "explain": 1, "findings": 2, "show": 3, "cli": 4}
#: doctor/ reads traces with what the recording, explain and findings layers offer and draws in
#: the house style of show/; only
#: the command line imports it.
DOCTOR_READS = {"measure", "transfer", "recording", "explain", "findings", "show", "doctor"}

#: What reading a table may import: the table layer and the kit's base (``h2dlab``, errors).
#: A module name here is the module's dotted name (the folder move rewrites them).
TABLE_LAYER = {
    "h2dlab",
    "h2dlab.recording.catalog",
    "h2dlab.recording.datasets",
    "h2dlab.errors",
    "h2dlab.interrupts",
    "h2dlab.recording.places",
    "h2dlab.escape",  # stdlib only: a table written as xlsx keeps formula-like text as text
    "h2dlab.recording.folder",
    "h2dlab.recording.plan",
    "h2dlab.recording.schema",
    "h2dlab.recording.tableio",
    "h2dlab.units",
}


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _known(name: str) -> str:
    """``name`` or the nearest package of it that is a module of the kit."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def imports_of(module: str, top_level_only: bool = False) -> set[str]:
    """The kit's modules ``module`` imports (anywhere in it, or at module level only)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    if top_level_only:  # also those under a module-level ``if``/``try`` (e.g. TYPE_CHECKING aside)
        nodes = [n for top in tree.body for n in ast.walk(top) if not _in_def(top)]
    out = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {_known(a.name) for a in node.names if a.name.split(".")[0] == "h2dlab"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            if base.split(".")[0] != "h2dlab":
                continue
            for a in node.names:
                full = f"{base}.{a.name}"
                out.add(full if full in MODULES else _known(base))
    out.discard(module)
    return out


def _in_def(node: ast.AST) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))


GRAPH = {m: imports_of(m) for m in MODULES}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
            elif w not in graph:
                continue
            elif w not in index:
                index[w] = low[w] = counter[0]
                counter[0] += 1
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(graph[w]))))
            elif w in on:
                low[v] = min(low[v], index[w])
    return found


def _is_cli(module: str) -> bool:
    parts = module.split(".")
    return module == "h2dlab.__main__" or (
        len(parts) > 1 and (parts[1] == "cli" or parts[1].startswith("cli_"))
    )


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in {*LAYERS, "doctor"} else None


def _closure(module: str, graph: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += graph.get(m, ())
    return seen


def test_the_graph_sees_every_module_and_its_imports():
    assert len(MODULES) > 50
    # the reader resolves both forms: ``from h2dlab import x`` and ``from h2dlab.x import y``
    assert any(GRAPH[m] for m in MODULES if m != "h2dlab")
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_the_package():
    assert _circles(GRAPH) == []


def test_no_module_imports_the_command_line():
    offenders = sorted(
        f"{m} imports {d}" for m, deps in GRAPH.items() if not _is_cli(m) for d in deps if _is_cli(d)
    )
    assert offenders == []


def test_reading_a_table_imports_no_analysis():
    """``datasets`` and what it imports (also inside its functions) stay in the table layer."""
    datasets = next(m for m in MODULES if m.endswith(".datasets"))
    table_layer = {_known(m) for m in TABLE_LAYER}
    assert datasets in table_layer
    assert _closure(datasets, GRAPH) <= table_layer, sorted(_closure(datasets, GRAPH) - table_layer)


def test_lower_layers_never_import_higher_ones():
    layered = [m for m in MODULES if _layer(m)]
    if not layered:
        pytest.skip("the folder layout (h2dlab/measure/, explain/ ...) is not applied yet")
    offenders = []
    for m in layered:
        mine = _layer(m)
        for d in GRAPH[m]:
            theirs = _layer(d)
            if theirs is None or theirs == mine:
                continue
            if mine == "doctor":
                ok = theirs in DOCTOR_READS
            elif theirs == "doctor":
                ok = mine == "cli"
            else:
                ok = LAYERS[theirs] <= LAYERS[mine]
            if not ok:
                offenders.append(f"{m} ({mine}) imports {d} ({theirs})")
    assert offenders == []


def test_modules_outside_the_layers_are_the_kits_base():
    """In the folder layout only the package's base sits beside the folders: it imports
    nothing from a layer above the tables."""
    if not any(_layer(m) for m in MODULES):
        pytest.skip("the folder layout is not applied yet")
    base = [m for m in MODULES if m.count(".") == 1 and not _layer(m + ".x") and m != "h2dlab.__main__"]
    offenders = [
        f"{m} imports {d}"
        for m in base
        for d in GRAPH[m]
        if _layer(d) not in (None, "measure", "transfer", "recording")
    ]
    assert offenders == []


#: Measuring modules the explaining side reads at import time: the run's settings
#: (``spec.MAX_PAUSE_MS``) and, through ``env``, the optional NVML binding.
EXPLAIN_READS_FROM_MEASURE = {"h2dlab.measure.spec", "h2dlab.measure.nvml"}


def test_explaining_a_table_walks_explain_and_the_table_layer_only():
    """What ``outliers`` imports at module level, and so on down, stays in explain/ and
    recording/ (plus the base and :data:`EXPLAIN_READS_FROM_MEASURE`)."""
    if not any(_layer(m) for m in MODULES):
        pytest.skip("the folder layout is not applied yet")
    top = {m: imports_of(m, top_level_only=True) for m in MODULES}
    outliers = next(m for m in MODULES if m.endswith(".outliers"))
    allowed = {_known(m) for m in EXPLAIN_READS_FROM_MEASURE}
    walk = _closure(outliers, top)
    strays = sorted(m for m in walk if _layer(m) not in (None, "explain", "recording") and m not in allowed)
    assert strays == []
