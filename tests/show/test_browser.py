"""Each rendered HTML report, opened in headless Chromium: figures shown, the provenance
banner present, no error output; and each page offline (no script or style sheet from the
network, no request leaving the machine), titled, with a table of contents."""

import pytest

from h2dlab.show import report, report_html

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("name", report.REPORTED)
def test_rendered_report_in_chromium(rendered, browser, name):
    rc, out = rendered
    assert rc == 0
    html = (out / f"{name}.html").read_text()
    assert report_html.external_refs(html) == [], name
    page = browser.new_page()
    errors, remote = [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: remote.append(r.url) if r.url.startswith(("http:", "https:")) else None)
    page.goto((out / f"{name}.html").as_uri())
    page.wait_for_load_state("load")
    # The banner is session.recording(...).banner(): Markdown naming the mode, machine, GPU and date.
    banner = page.locator(".jp-RenderedMarkdown", has_text="Replay of the bundled recording")
    assert (
        banner.count() == 1
        and "NVIDIA H200" in banner.inner_text()
        and "recorded 2026-" in banner.inner_text()
    )
    imgs = page.locator(".jp-OutputArea-output img")
    assert imgs.count() >= 2
    widths = page.eval_on_selector_all(".jp-OutputArea-output img", "els => els.map(e => e.naturalWidth)")
    assert all(w > 300 for w in widths), widths  # every figure decoded and drawn
    text = page.inner_text("body")
    stderr = " ".join(page.locator("[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts())
    # "Error:" is looked for in what the cells printed to stderr, not in the recipes' code the
    # pages show (recipe_many_tensors.py has an `except ImportError:`)
    assert "Traceback" not in text and "Error:" not in stderr
    assert page.locator("[data-mime-type='application/vnd.jupyter.error']").count() == 0
    assert not errors, errors
    assert not remote, remote  # truly offline
    h1 = page.locator("h1").first.inner_text().strip("¶ ")
    assert page.title() not in ("", "Notebook") and page.title() == h1, (page.title(), h1)
    assert page.locator("nav.h2dlab-toc a").count() >= 2
    page.close()
