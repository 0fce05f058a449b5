"""Nothing read from a data file becomes markup in a shared page (issue #35).

Before: ``gpu_name``, ``torch`` and ``hostname`` from env.json went into every report's
banner as Markdown, raw HTML included (Chromium ran a planted script on all four pages);
the explorer's status line (``widgets.HTML``) and its tables (pandas Styler, which does not
escape by default) showed a planted strategy, run id or path as HTML. The env.json files
and tables here are SYNTHETIC.
"""

from __future__ import annotations

import json
import re
import shutil

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nbconvert.filters.markdown import markdown2html

from h2dlab.escape import html_text, md_code, md_text
from h2dlab.recording import datasets, session
from h2dlab.recording.folder import write_manifest
from h2dlab.show.report_html import inert_markdown, inert_markdown_outputs

PLANTED = {
    "gpu_name": "<script>alert('gpu')</script>",
    "torch": "<img src=x onerror=alert('torch')>",
    "hostname": "x`<script>alert('host')</script>`",
    "cpu_count": "<svg onload=alert(1)>",
    "pcie_gen_max": "<b>5",
    "pcie_width_max": "16</b><script>alert(3)</script>",
}
TAG = re.compile(r"<\s*(script|img|svg|iframe|b)\b", re.I)


def _planted_recording(tmp_path):
    folder = tmp_path / "rec"
    (folder / "sweep").mkdir(parents=True)
    shutil.copy(datasets.DATA_DIR / "h200_sweep" / "pow2.csv.gz", folder / "sweep" / "pow2.csv.gz")
    env = json.loads((datasets.DATA_DIR / "h200_sweep" / "pow2.env.json").read_text())
    (folder / "sweep" / "pow2.csv.gz.env.json").write_text(json.dumps({**env, **PLANTED}))
    write_manifest(
        folder, {"hostname": "h", "gpu_name": "g", "created": "2030-01-02T03:04:05", "status": "complete"}
    )
    return folder


def test_a_planted_env_json_makes_no_tag_in_the_banner(tmp_path):
    text = session.recording(str(_planted_recording(tmp_path)), environ={}).banner()
    page = markdown2html(str(text))  # as nbconvert renders a Markdown output in the report
    assert not TAG.search(page), page
    assert "&lt;script&gt;alert('gpu')&lt;/script&gt;" in page.replace("&#x27;", "'")  # shown as text
    assert "alert('host')" in page.replace("&#x27;", "'")


def test_the_report_leaves_no_raw_html_in_computed_markdown():
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "outputs": [{"data": {"text/markdown": "GPU <script>alert(1)</script> `a<b`"}}],
            },
            {"cell_type": "markdown", "source": "<b>authored</b>"},
        ]
    }
    inert_markdown_outputs(nb, {})
    md = nb["cells"][0]["outputs"][0]["data"]["text/markdown"]
    assert md == "GPU &lt;script>alert(1)&lt;/script> `a<b`"
    assert not TAG.search(markdown2html(md)) and nb["cells"][1]["source"] == "<b>authored</b>"


def test_the_report_exporter_runs_the_escaping_preprocessor():
    from h2dlab.show.report_html import exporter

    assert any(getattr(p, "__name__", "") == "inert_markdown_outputs" for p in exporter()._preprocessors)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_no_text_becomes_a_tag_in_markdown(value):
    for md in (md_text(value), md_code(value), inert_markdown(value)):
        assert not TAG.search(markdown2html(f"before {md} after"))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_html_text_leaves_no_markup(value):
    out = html_text(value)
    assert "<" not in out and ">" not in out and '"' not in out


def test_the_explorer_escapes_its_status_line_and_tables(tmp_path):
    pytest.importorskip("ipywidgets")
    from h2dlab.show.explore import Explorer, styled

    ex = Explorer("replay")
    assert not ex.open_path(str(tmp_path / "<img src=x onerror=alert(1)>.csv"))
    assert "cannot open" in ex.status.value and not TAG.search(
        ex.status.value.replace("<b>", "", 1).replace("</b>", "")
    )
    table = pd.DataFrame(
        {"strategy": ["<script>alert(1)</script>"], "evidence": ["<img src=x onerror=alert(2)>"]}
    )
    page = styled(table).to_html()
    assert "<script>alert" not in page and "<img src=x" not in page and "&lt;script&gt;" in page


def _tags(markdown: str) -> set[str]:
    """The HTML tags a CommonMark renderer (markdown-it, raw HTML on, as Jupyter) makes of ``markdown``."""
    MarkdownIt = pytest.importorskip("markdown_it").MarkdownIt

    return set(re.findall(r"</?([A-Za-z][A-Za-z0-9]*)", MarkdownIt("commonmark").render(markdown)))


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="`<>\\ bi&", max_size=30))
def test_md_inert_html_leaves_no_raw_html_whatever_the_backticks(text):
    from h2dlab.escape import md_inert_html

    # Markdown's own elements (p, code, blockquote, pre ...) may come; a tag spelt in the
    # text (<b>, <i>, <bi> ...) is raw HTML and must not
    assert not {t for t in _tags(md_inert_html(text)) if set(t) <= set("bi")}


def test_a_strategy_name_with_backticks_and_markup_renders_as_text_in_a_finding(tmp_path):
    from h2dlab.findings import advice

    df = datasets.load("h200_forum")
    evil = "x`<img src=x onerror=alert(1)>`"
    df = df.assign(strategy=df["strategy"].replace(df["strategy"].iloc[0], evil))
    f = advice.bandwidth(df)
    assert "<img" in f.verdict  # the name is kept, as text ...
    assert "img" not in _tags(f._repr_markdown_())  # ... and renders as no element
