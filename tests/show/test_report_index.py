"""The reports' front page and figure resolution (issue 35, "What users touch"): `h2dlab report`
writes ``index.html`` linking each page with its title and one line, naming the recording's
GPU and date, every text escaped; the notebooks' kernels draw figures at 2x their pixels.

The build runs without a kernel (``NotebookClient.execute`` returns the notebook as it is),
so the pages carry no outputs: what is checked is the front page and what the kernels are asked.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import nbclient
import pytest

from h2dlab.recording import datasets, session
from h2dlab.show import report, report_html, report_index

HOSTILE = '<script>alert("x")</script>'


def _links(page: str) -> list[tuple[str, str]]:
    return [(h, html.unescape(t)) for h, t in re.findall(r'<a href="([^"]+)">([^<]*)</a>', page)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """`report.build` of the four reported notebooks on the bundled recording, no kernel."""
    out = tmp_path_factory.mktemp("reports")
    asked: list = []
    mp = pytest.MonkeyPatch()

    def execute(self, **kw):
        asked.append(list(self.extra_arguments))
        return self.nb

    mp.setattr(nbclient.NotebookClient, "execute", execute)
    mp.delenv("H2DLAB_DATA", raising=False)
    mp.delenv("H2DLAB_MODE", raising=False)
    try:
        rc = report.build(out, data="h200")
    finally:
        mp.undo()
    return rc, out, asked


@pytest.mark.slow  # report.build: four pages rendered and the workbook written (10 s)
def test_report_writes_a_front_page_linking_each_page_with_its_title_and_line(built):
    rc, out, _ = built
    assert rc == 0
    page = (out / "index.html").read_text()
    links = _links(page)
    assert [h for h, _ in links] == [f"{n}.html" for n in report.REPORTED] + ["h2dlab-tables.xlsx"]
    assert all((out / h).is_file() for h, _ in links)
    for name, (_, title) in zip(report.REPORTED, links, strict=False):
        import jupytext

        assert title == report_html.title_of(jupytext.read(report.ROOT / "notebooks" / f"{name}.py"), name)
        assert html.escape(report_index.SUMMARY[name]) in page
    assert report_html.external_refs(page) == [] and "<script" not in page.lower()


@pytest.mark.slow  # report.build: four pages rendered and the workbook written (10 s)
def test_the_front_page_names_the_recordings_gpu_and_date(built):
    _, out, _ = built
    page = html.unescape((out / "index.html").read_text())
    env = json.loads((datasets.DATA_DIR / "h200" / "sweep" / "pow2-interleaved.csv.gz.env.json").read_text())
    assert "Replay, the bundled recording h200" in page
    day = session.Recorded("h200").date()  # the days of its runs (2026-11-30 to 2026-12-03)
    assert env["gpu_name"] in page and f"recorded {day}." in page and day.startswith("2026-")


@pytest.mark.slow  # report.build: four pages rendered and the workbook written (10 s)
def test_every_notebook_kernel_draws_figures_at_twice_their_pixels(built):
    _, _, asked = built
    assert asked == [[report.RETINA]] * len(report.REPORTED)
    assert report.RETINA == "--InlineBackend.figure_formats=retina"


def test_a_recording_whose_env_json_holds_markup_stays_text_on_the_front_page(tmp_path):
    rec = tmp_path / "rec"
    (rec / "sweep").mkdir(parents=True)
    shutil.copy(datasets.DATA_DIR / "h200" / "recording.json", rec)
    src = datasets.DATA_DIR / "h200" / "sweep" / "forum-sizes.csv.gz"
    shutil.copy(src, rec / "sweep" / src.name)
    env = json.loads(Path(f"{src}.env.json").read_text())
    env.update(gpu_name=HOSTILE, hostname='"><img src=x onerror=alert(1)>', torch="2.11<b>")
    (rec / "sweep" / f"{src.name}.env.json").write_text(json.dumps(env))
    pages = [{"name": "01-forum-experiment-revisited", "title": f"01 {HOSTILE}", "failed": f"boom {HOSTILE}"}]
    page = report_index.page(pages, report_index.recording_line(rec, "live"), "h2dlab-tables.xlsx")
    assert "<script" not in page.lower() and "<img" not in page and "<b>" not in page
    text = html.unescape(page)
    assert f"01 {HOSTILE}" in text and HOSTILE in text and "boom" in text
    assert "Live: this machine, the recording" in text


@pytest.mark.slow  # report.build of one page
def test_a_failed_notebook_is_on_the_front_page_marked_failed(tmp_path, monkeypatch):
    def fail(self, **kw):
        from nbclient.exceptions import CellExecutionError

        raise CellExecutionError("ValueError: synthetic failure", "ValueError", "synthetic failure")

    monkeypatch.setattr(nbclient.NotebookClient, "execute", fail)
    monkeypatch.delenv("H2DLAB_DATA", raising=False)
    monkeypatch.delenv("H2DLAB_MODE", raising=False)
    rc = report.build(tmp_path, notebooks=["04-pinned-memory-primer"], data="h200")
    page = (tmp_path / "index.html").read_text()
    assert rc == 1 and _links(page)[0][0] == "04-pinned-memory-primer.html"
    assert "This notebook failed" in page and "h2dlab-tables.xlsx" not in page


def test_the_survey_page_embeds_its_figures_at_twice_the_pixels_it_shows():
    import base64
    import struct

    from h2dlab import survey
    from h2dlab.survey.show import report_html

    fleet = datasets.read(datasets.DATA_DIR / "h200_survey" / "fleet.csv.gz")
    page = report_html(survey.judge(survey.gpu_table(fleet)), fleet.attrs["env"] or {})
    imgs = re.findall(
        r"<img alt='[^']*' width='(\d+)' height='(\d+)' src='data:image/png;base64,([^']+)'>", page
    )
    assert imgs and len(imgs) == page.count("<img")
    for width, height, data in imgs:
        png = base64.b64decode(data)
        w, h = struct.unpack(">II", png[16:24])  # the PNG header's IHDR width and height
        assert (w, h) == (2 * int(width), 2 * int(height))
