"""The notebooks: thin (at most 60 code lines, no def/class, no multi-line pandas chains),
reading their data through ``session.recording``, with no measurement typed into their
prose, paired with their jupytext .py files, committed with outputs (at most one figure per
section), and executable in replay mode on a CPU-only machine (rendered by `h2dlab report`)."""

import ast
import json
import re
from pathlib import Path

import jupytext
import pytest

from h2dlab.show import report

NB = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = report.NOTEBOOKS
#: The teaching notebooks rewritten for issue 14 (05 is the interactive explorer).
THIN = report.REPORTED
MAX_CODE_LINES = 60


def cells(name, kind):
    return [c for c in jupytext.read(NB / f"{name}.py").cells if c.cell_type == kind]


def code_lines(name):
    """Non-blank, non-comment lines of the notebook's code cells."""
    lines = [ln.strip() for c in cells(name, "code") for ln in c.source.splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


@pytest.mark.parametrize("name", NAMES)
def test_no_function_or_class_definitions(name):
    tree = ast.parse((NB / f"{name}.py").read_text())
    bad = [
        type(n).__name__
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
    ]
    assert not bad, f"{name} defines {bad}: move it into the h2dlab package"


@pytest.mark.parametrize("name", THIN)
def test_at_most_60_code_lines(name):
    n = len(code_lines(name))
    assert n <= MAX_CODE_LINES, (
        f"{name} has {n} code lines (limit {MAX_CODE_LINES}): move work into the package"
    )


def test_code_line_count_counts_what_it_should(tmp_path, monkeypatch):
    src = "# %%\nimport a\n\n# a comment\nb = 1  # trailing\n\n# %% [markdown]\n# text\n"
    (tmp_path / "x.py").write_text(src)
    monkeypatch.setattr(__import__(__name__), "NB", tmp_path)
    assert code_lines("x") == ["import a", "b = 1  # trailing"]


def chain_length(node):
    """Longest run of calls chained by attribute access, e.g. ``a.b().c().d()`` -> 3."""
    best = 0
    for n in ast.walk(node):
        k, cur = 0, n
        while isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute):
            k, cur = k + 1, cur.func.value
        best = max(best, k)
    return best


@pytest.mark.parametrize("name", THIN)
def test_no_multi_line_pandas_chains(name):
    for c in cells(name, "code"):
        for stmt in ast.parse(c.source).body:
            multi = stmt.end_lineno > stmt.lineno
            assert not (multi and chain_length(stmt) >= 2), f"{name}: multi-line chain\n{ast.unparse(stmt)}"
        assert not [ln for ln in c.source.splitlines() if ln.strip().startswith(".")], name


@pytest.mark.parametrize("name", THIN)
def test_data_comes_through_session_recording(name):
    src = "\n".join(c.source for c in cells(name, "code"))
    assert "rec = session.recording(DATA, mode=MODE)" in src and "rec.banner()" in src
    assert "Session(" not in src and "run_named(" not in src
    # Only the forum's published table, the bundled benchmark and the bundled OpenMP
    # experiment (a controlled comparison no recording plan makes) are read outside the recording.
    loads = re.findall(r"datasets\.load\w*\(([^)]*)\)", src)
    assert set(loads) <= {'"forum_a100"', '"h200"', '"h200_omp"'}, loads


@pytest.mark.parametrize("name", THIN)
def test_parameters_cell(name):
    params = [c for c in cells(name, "code") if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1
    assert params[0].source.strip().splitlines() == ['DATA = "h200"', 'MODE = "replay"']


#: Digits a markdown cell may carry: the forum's own question (sequence lengths 966 and 1026,
#: quoted from the post) and notebook numbers (01-05) when one notebook names another.
ALLOWED_NUMBERS = {"966", "1026", "01", "02", "03", "04", "05"}
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")


def typed_numbers(markdown):
    """Numbers in a markdown cell that could be measurements: outside inline code and
    links, not a section number of a heading, not in :data:`ALLOWED_NUMBERS`."""
    text = re.sub(r"`[^`]*`", " ", markdown)  # code (shapes, sizes in code, CLI arguments)
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets
    text = re.sub(r"(?m)^#+ \d+ ·", "#", text)  # "## 3 · ..." section numbers
    return [n for n in NUMBER.findall(text) if n not in ALLOWED_NUMBERS]


def test_typed_numbers_detector():
    assert typed_numbers("pinned runs at 55.1 GB/s and 19 ms") == ["55.1", "19"]
    assert typed_numbers("## 3 · On an A100 and an H200, PCIe Gen5 x16, bf16, `2**30`") == []
    assert typed_numbers("why is 1026 faster than 966? see notebook 02; [x](https://a.b/1.2)") == []
    assert typed_numbers("a spike of 7.88 MiB at row 180") == ["7.88", "180"]


@pytest.mark.parametrize("name", THIN)
def test_no_number_typed_into_prose(name):
    found = {n for c in cells(name, "markdown") for n in typed_numbers(c.source)}
    assert not found, f"{name}: numbers typed into markdown {sorted(found)}: compute them in a code cell"


@pytest.mark.parametrize("name", THIN)
def test_numbered_sections_pose_a_question(name):
    md = [c.source for c in cells(name, "markdown") if re.match(r"## \d+ ·", c.source)]
    assert md, name
    assert not [m.splitlines()[0] for m in md if "?" not in m], "each numbered section asks its question"


@pytest.mark.parametrize("name", THIN)
def test_report_hides_the_code_that_builds_prose_and_figures(name):
    # Tag decided by helper "ux": `hide-input` shows a cell's output without its code. The
    # parameters and set-up cells stay visible: they say which data the notebook reads.
    code = cells(name, "code")
    assert "parameters" in code[0].metadata.get("tags", []) and "session.recording" in code[1].source
    bare = [c.source.splitlines()[0] for c in code[2:] if "hide-input" not in c.metadata.get("tags", [])]
    assert not bare, f"{name}: code cells without the hide-input tag: {bare}"


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


@pytest.mark.parametrize("name", THIN)
def test_committed_notebook_shows_at_most_one_figure_per_section(name):
    nb = json.loads((NB / f"{name}.ipynb").read_text())
    section, figures = "intro", {}
    for c in nb["cells"]:
        if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("## "):
            section = "".join(c["source"]).splitlines()[0]
        for o in c.get("outputs", []):
            figures[section] = figures.get(section, 0) + ("image/png" in o.get("data", {}))
    assert max(figures.values()) <= 1, {s: n for s, n in figures.items() if n > 1}


@pytest.mark.slow
def test_notebooks_execute_in_replay_mode(rendered):
    rc, out = rendered
    assert rc == 0
    for name in report.REPORTED:
        html = (out / f"{name}.html").read_text()
        assert "Traceback (most recent call last)" not in html and "jupyter.error" not in html
        assert "NVIDIA H200" in html  # the banner names the recording's GPU
    assert (out / "h2dlab-tables.xlsx").stat().st_size > 10_000


@pytest.mark.parametrize("path", sorted(NB.glob("*.ipynb")), ids=lambda p: p.stem)
def test_a_rendered_notebook_keeps_no_folder_of_the_machine_that_rendered_it(path):
    """Notebooks are shared: an output (a repr, a widget's tooltip) must not carry the
    renderer's own folder (the kit's checkout, a home folder)."""
    text = path.read_text()
    assert str(NB.parent) not in text
    assert not re.search(r"/(home|root|Users)/[^\"\s]*/", text)
