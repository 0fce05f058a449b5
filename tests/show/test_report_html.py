"""The shared HTML: offline (no script, style sheet or module import from the network),
titled, with a table of contents, and the hide-input / remove-cell tags honoured; on a
synthetic notebook here, on every rendered report in tests/show/test_browser.py."""

import nbformat
import pytest

from h2dlab.show import report_html


@pytest.fixture(scope="module")
def page():
    v4 = nbformat.v4
    nb = v4.new_notebook(
        cells=[
            v4.new_markdown_cell(
                "# A synthetic report\n\nSome $x^2$ math.\n\n## First part\n\n## Second & last"
            ),
            v4.new_code_cell(
                "prose_builder_code = 1",
                metadata={"tags": ["hide-input"]},
                outputs=[v4.new_output("stream", text="the sentence a reader wants")],
            ),
            v4.new_code_cell("setup_cell_code = 2", metadata={"tags": ["remove-cell"]}),
            v4.new_code_cell("shown_code = 3"),
        ]
    )
    return report_html.render(nb, "fallback-name")


def test_no_external_scripts_or_styles(page):
    assert report_html.external_refs(page) == []
    for cdn in ("cdnjs", "require.min.js", "mathjax/", "mermaid.esm"):
        assert cdn not in page


def test_external_refs_finds_what_nbconvert_would_load():
    raw = (
        '<script src="https://cdnjs.x/require.js"></script><link rel="stylesheet" href="//fonts.x/a.css">'
        "<script type=\"module\">import mermaid from 'https://cdnjs.x/mermaid.mjs';</script>"
        '<script src="local.js"></script><a href="https://discuss.pytorch.org/">a link stays</a>'
    )
    assert report_html.external_refs(raw) == [
        "https://cdnjs.x/require.js",
        "//fonts.x/a.css",
        "https://cdnjs.x/mermaid.mjs",
    ]
    cleaned = report_html.offline(raw)
    assert report_html.external_refs(cleaned) == [] and "local.js" in cleaned and "a link stays" in cleaned


def test_title_toc_and_tags(page):
    assert "<title>A synthetic report</title>" in page
    nav = page[page.index('<nav class="h2dlab-toc">') : page.index("</nav>")]
    assert 'href="#First-part"' in nav and "Second &amp; last" in nav
    assert page.index("</h1>") < page.index('<nav class="h2dlab-toc">') < page.index('id="First-part"')
    assert "the sentence a reader wants" in page and "prose_builder_code" not in page
    assert "setup_cell_code" not in page and "shown_code" in page
