"""Values read from files reach the notebooks' Markdown only through the kit's escaping
(h2dlab/escape.py), and the explorer's tables escape their column headers (issue 31).

A synthetic env.json holds ``<script>`` and ``*bold*`` in its GPU name, host name and run
names; the functions the notebook cells call to build their Markdown are rendered through a
CommonMark renderer (as Jupyter renders them) and must give neither a tag nor emphasis. A
static check walks every notebook's code cells: each value put into a ``Markdown(f"...")`` is
a number with a format, an escaped value, or a sentence of the kit's findings (which escape
what they quote).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jupytext
import pandas as pd
import pytest

NB = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = sorted(p.stem for p in NB.glob("[0-9][0-9]-*.py"))
EVIL = "<script>alert(1)</script> *bold* _it_ [x](javascript:alert(2)) <img src=x onerror=alert(3)>"
#: What must not come out of rendering a file's value: raw tags it carried, emphasis, a link.
MARKUP = re.compile(r"<(script|img|em|strong|a)\b")


def render(markdown: str) -> str:
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark").render(markdown)


def test_the_machine_line_of_notebook_02_escapes_the_gpu_and_the_recording_name():
    from h2dlab.findings import prose

    html = render(prose.machine_line(EVIL, EVIL, bundled=False).verdict)
    assert not MARKUP.search(html) and "&lt;script&gt;" in html


def test_the_explain_commands_of_notebook_03_escape_the_folder_and_name_only_kinds_it_has():
    from h2dlab.findings import prose

    f = prose.explain_commands(f"/tmp/{EVIL}", ["batch"])
    assert not MARKUP.search(render(f.verdict)) and ":batch" in f.verdict and "idle" not in f.verdict
    g = prose.explain_commands("h200", [])  # issue 31: no command for a kind the recording lacks
    assert not g.holds and "h2dlab explain" not in g.verdict


def test_run_names_and_the_gpu_from_files_reach_the_findings_sentences_escaped(tmp_path):
    """A synthetic forum-protocol run whose env.json and file name carry markup."""
    from h2dlab.findings import claims

    rows = [
        {"strategy": "pin_memory", "size_bytes": 2**20, "wall_ms": w, "event_ms": e, "order": i}
        for i, (w, e) in enumerate([(200.0, 150.0)] + [(1.0, 1.0)] * 5)
    ]
    base = {"run_id": "r1", "rep": 0, "warmup": False, "error": "", "host_allocs": float("nan")}
    df = pd.DataFrame([{**base, **r} for r in rows])
    df.attrs["run_names"] = {"r1": EVIL}
    f = claims.context_startup(df)
    assert "In run" in f.verdict  # the run is named: the sentence quotes the file's name
    assert not MARKUP.search(render(f.verdict))


def test_the_explorer_escapes_its_column_headers():
    pytest.importorskip("ipywidgets")
    from h2dlab.show.explore import styled

    page = styled(pd.DataFrame({EVIL: [1.0], "strategy": ["x"]})).to_html()
    assert "<script>alert" not in page and "<img src=x" not in page and "&lt;script&gt;" in page


# -- every value put into a notebook's Markdown f-string -----------------------------------------

#: Functions whose result is safe in Markdown: the kit's escaping.
ESCAPES = {"md_text", "md_code", "md_inert_html"}


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def unescaped(source: str) -> list[str]:
    """The values a notebook's code puts into ``Markdown(f"...")`` that are neither a number
    with a format spec, nor escaped, nor a finding of the kit (a call on an ``h2dlab`` module,
    or a name bound to one)."""
    tree = ast.parse(source)
    kit = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("h2dlab"):
            kit |= {a.asname or a.name for a in n.names}
    found = set(kit)
    for n in ast.walk(tree):  # names bound to a finding: growth = findings.host_alloc_growth(...)
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and _root(n.value) in kit:
            found |= {t.id for t in n.targets if isinstance(t, ast.Name)}

    def safe(v: ast.FormattedValue) -> bool:
        if v.format_spec is not None:
            return True
        e = v.value
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "str" and e.args:
            e = e.args[0]
        if (
            isinstance(e, ast.Call)
            and (getattr(e.func, "id", None) or getattr(e.func, "attr", None)) in ESCAPES
        ):
            return True
        if (  # ", ".join(f"{m:.2f}" for m in sizes): its own f-string is checked in its turn
            isinstance(e, ast.Call)
            and getattr(e.func, "attr", None) == "join"
            and e.args
            and isinstance(e.args[0], (ast.GeneratorExp, ast.ListComp))
            and isinstance(e.args[0].elt, ast.JoinedStr)
        ):
            return True
        return _root(e) in found

    bad = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Markdown":
            for s in ast.walk(n):
                if isinstance(s, ast.JoinedStr):
                    bad += [
                        ast.unparse(v.value)
                        for v in s.values
                        if isinstance(v, ast.FormattedValue) and not safe(v)
                    ]
    return bad


def test_the_unescaped_value_check_finds_a_raw_value_and_passes_escaped_ones():
    src = (
        "from h2dlab import advice\nfrom h2dlab.escape import md_text\n"
        "f = advice.best_way(t)\n"
        "Markdown(f\"{gpu} {md_text(gpu)} {x:.2f} {f} {advice.pin_first_pays(t)} {str(f)} {env['hostname']}\")\n"
        "Markdown(f\"{', '.join(f'{m:.2f}' for m in xs)} {', '.join(f'{n}' for n in names)}\")\n"
    )
    assert unescaped(src) == ["gpu", "env['hostname']", "n"]


@pytest.mark.parametrize("name", NAMES)
def test_notebook_markdown_puts_no_file_value_in_unescaped(name):
    code = "\n".join(c.source for c in jupytext.read(NB / f"{name}.py").cells if c.cell_type == "code")
    code = "\n".join(ln for ln in code.splitlines() if not ln.lstrip().startswith(("%", "!")))
    assert not unescaped(code), f"{name}: raw values in Markdown: {unescaped(code)}"


def test_the_gpu_name_of_a_synthetic_env_reaches_the_link_estimate_escaped():
    from h2dlab.findings import forum_claims
    from h2dlab.recording import datasets, session

    rec = session.recording("h200", mode="replay")
    forum, reuse = rec.get("forum").copy(), rec.get("sweep", "forum-sizes")
    forum.attrs = {**forum.attrs, "env": {"gpu_name": EVIL, "hostname": EVIL}}  # synthetic env.json
    f = forum_claims.link_estimate(datasets.load("forum_a100"), forum, reuse)
    html = render(f.verdict)
    assert not MARKUP.search(html) and "&lt;script&gt;" in html
