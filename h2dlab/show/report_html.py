"""The HTML of a rendered notebook, made fit to share: offline, titled, with a table
of contents, and with the code of prose-building cells hidden.

- Offline: nbconvert's lab template loads require.js, MathJax and mermaid from a CDN;
  :func:`exporter` blanks those URLs and :func:`offline` drops any ``<script>`` or
  ``<link>`` that still points at http(s), so a page opens with no network (math in
  Markdown then shows as TeX source).
- Title: the notebook's first ``# `` heading (``<title>`` was "Notebook" for all).
- Table of contents: the ``##`` headings, linked, under the title.
- Tags (see HELPERS.md "Tags"): ``hide-input`` keeps a cell's output and hides its code;
  ``remove-cell`` leaves the cell out of the page.
"""

from __future__ import annotations

import html as _html
import re
from typing import Any

__all__ = [
    "HIDE_INPUT",
    "REMOVE_CELL",
    "exporter",
    "external_refs",
    "offline",
    "render",
    "table_of_contents",
    "title_of",
]

HIDE_INPUT = "hide-input"
REMOVE_CELL = "remove-cell"

_EXTERNAL = r"""["']\s*(?:https?:)?//"""
_SCRIPT_SRC = re.compile(r"<script\b[^>]*\bsrc\s*=\s*" + _EXTERNAL + r"[^>]*>\s*</script>\s*", re.I | re.S)
_SCRIPT_IMPORT = re.compile(
    r"<script\b[^>]*>(?:(?!</script>).)*?\bimport\b[^;]*?" + _EXTERNAL + r"(?:(?!</script>).)*</script>\s*",
    re.I | re.S,
)
_LINK = re.compile(r"<link\b[^>]*\bhref\s*=\s*" + _EXTERNAL + r"[^>]*>\s*", re.I | re.S)


def exporter():
    """nbconvert's lab HTML exporter with no CDN URLs and the tag rules applied."""
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor

    ex = HTMLExporter(
        template_name="lab",
        require_js_url="",
        mathjax_url="",
        mermaid_js_url="",
        mermaid_layout_elk_js_url="",
        jquery_url="",
        widget_renderer_url="",
        jupyter_widgets_base_url="",
    )
    ex.register_preprocessor(
        TagRemovePreprocessor(remove_input_tags={HIDE_INPUT}, remove_cell_tags={REMOVE_CELL}), enabled=True
    )
    ex.register_preprocessor(inert_markdown_outputs, enabled=True)
    return ex


_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)


def inert_markdown(text: str) -> str:
    """Markdown computed by a cell, with no raw HTML left: every ``<`` outside a code span
    becomes ``&lt;`` (shown as ``<``). The kit's sentences hold no HTML; what a data file
    puts in them (a GPU name, a run id) must not become a tag in a shared page."""
    out, at = [], 0
    for m in _CODE_SPAN.finditer(text):
        out += [text[at : m.start()].replace("<", "&lt;"), m.group(0)]
        at = m.end()
    out.append(text[at:].replace("<", "&lt;"))
    return "".join(out)


def inert_markdown_outputs(nb: Any, resources: Any) -> tuple[Any, Any]:
    """nbconvert preprocessor: :func:`inert_markdown` on every ``text/markdown`` output."""
    for cell in nb["cells"]:
        for out in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            data = out.get("data") or {}
            if "text/markdown" in data:
                md = data["text/markdown"]
                data["text/markdown"] = inert_markdown("".join(md) if isinstance(md, list) else str(md))
    return nb, resources


def title_of(nb: Any, default: str) -> str:
    """The text of the notebook's first ``# `` heading, or ``default``."""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            if line.startswith("# "):  # the heading's text as the page shows it (no Markdown marks)
                return line[2:].replace("`", "").replace("**", "").strip().strip("#").strip() or default
    return default


def external_refs(page: str) -> list[str]:
    """Every ``<script src>``, ``<link href>`` or script ``import`` of an http(s) URL."""
    found = []
    for tag in re.findall(r"<(?:script|link)\b[^>]*>", page, re.I):
        m = re.search(r"\b(?:src|href)\s*=\s*[\"']\s*((?:https?:)?//[^\"']*)", tag, re.I)
        if m:
            found.append(m.group(1))
    for body in re.findall(r"<script\b[^>]*>(.*?)</script>", page, re.I | re.S):
        found += re.findall(r"\bimport\b[^;]*?[\"']((?:https?:)?//[^\"']+)", body)
    return found


def offline(page: str) -> str:
    """``page`` without scripts or style sheets fetched from the network."""
    for pat in (_SCRIPT_SRC, _SCRIPT_IMPORT, _LINK):
        page = pat.sub("", page)
    page = re.sub(r"<script\b[^>]*\bsrc\s*=\s*[\"']\s*[\"'][^>]*>\s*</script>\s*", "", page, flags=re.I)
    return page


def table_of_contents(page: str) -> str:
    """``page`` with a linked list of its ``<h2>`` headings after its first ``<h1>``."""
    heads = re.findall(r"<h2\b[^>]*\bid=\"([^\"]+)\"[^>]*>(.*?)</h2>", page, re.S)
    if not heads:
        return page
    items = []
    for anchor, inner in heads:
        text = re.sub(r"<[^>]+>", "", inner).replace("¶", "").strip()
        items.append(f'<li><a href="#{anchor}">{_html.escape(_html.unescape(text))}</a></li>')
    nav = '<nav class="h2dlab-toc"><b>Contents</b><ol>' + "".join(items) + "</ol></nav>"
    m = re.search(r"</h1>", page)
    if m is None:
        return page
    return page[: m.end()] + nav + page[m.end() :]


def render(nb: Any, name: str) -> str:
    """The shareable HTML page of an executed notebook."""
    title = title_of(nb, name)
    page, _ = exporter().from_notebook_node(nb, resources={"metadata": {"name": title}})
    return table_of_contents(offline(page))
