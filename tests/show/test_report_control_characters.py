"""No raw control character from a recording's env.json reaches a report's HTML (hostile
pass 4, issue 35; cosmetic).

Markup in ``gpu_name`` is escaped, but NUL, BEL and ESC from the env.json pass into every
page as raw bytes (HTML parse errors: a NUL shows as U+FFFD, ``grep`` calls the page
binary); the terminal and the workbook write them as ``\\u0000`` text. Found with
``h2dlab report --data <a copy of data/h200 with a synthetic env.json>``: 1 raw NUL on
index.html, 7 to 19 on each notebook page. They are now written as ``\\u0000`` text by
``escape.html_text`` (and ``md_text``/``md_code``, which the notebooks use), a lone surrogate
too; ``escape.json_text`` writes a lone surrogate so as it is read from the JSON file.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import unicodedata
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.escape import TERMINAL_HIDDEN, html_text, json_text, md_code, md_text, terminal_text
from h2dlab.recording import datasets
from h2dlab.show import report_index

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def test_the_front_page_holds_no_raw_control_character_from_an_env_json(tmp_path):
    rec = tmp_path / "rec"
    (rec / "sweep").mkdir(parents=True)
    shutil.copy(datasets.DATA_DIR / "h200" / "recording.json", rec)
    src = datasets.DATA_DIR / "h200" / "sweep" / "forum-sizes.csv.gz"
    shutil.copy(src, rec / "sweep" / src.name)
    env = json.loads(Path(f"{src}.env.json").read_text())
    env.update(gpu_name="GPU\x00\x07\x1b[2J", hostname="host\x1b]0;title\x07")
    (rec / "sweep" / f"{src.name}.env.json").write_text(json.dumps(env))
    line = report_index.recording_line(rec, "replay")
    page = report_index.page([{"name": "01-forum-experiment-revisited", "title": "01"}], line, None)
    assert "GPU" in page
    assert CONTROL.findall(page) == []
    assert "GPU\\u0000\\u0007\\u001b[2J" in page  # shown, as the terminal and the workbook show it
    assert "host\\u001b]0;title\\u0007" in page


def test_a_lone_surrogate_in_an_env_json_does_not_stop_the_front_page(tmp_path):
    # found with ``h2dlab report --data <copy of data/h200>`` whose env.json files say
    # "gpu_name": "NVIDIA \ud800 H200": the notebooks ran (60 s), then a traceback, exit 1
    rec = tmp_path / "rec"
    (rec / "sweep").mkdir(parents=True)
    shutil.copy(datasets.DATA_DIR / "h200" / "recording.json", rec)
    src = datasets.DATA_DIR / "h200" / "sweep" / "forum-sizes.csv.gz"
    shutil.copy(src, rec / "sweep" / src.name)
    env = json.loads(Path(f"{src}.env.json").read_text())
    env.update(gpu_name="NVIDIA \ud800 H200")
    (rec / "sweep" / f"{src.name}.env.json").write_text(json.dumps(env))  # ASCII: "\\ud800"
    out = tmp_path / "reports"
    out.mkdir()
    pages = [{"name": "01-forum-experiment-revisited", "title": "01"}]
    written = report_index.write(out, pages, rec, "replay", None)
    assert "NVIDIA \\ud800 H200" in written.read_text(encoding="utf-8")


def test_the_report_workbook_writes_an_env_json_s_lone_surrogate_and_controls_as_text(tmp_path):
    # before: the README sheet's frame could not be made (pandas' text column refuses a lone
    # surrogate): a UnicodeEncodeError traceback instead of a workbook
    import openpyxl

    from h2dlab.show import workbook

    rec = tmp_path / "rec"
    (rec / "sweep").mkdir(parents=True)
    shutil.copy(datasets.DATA_DIR / "h200" / "recording.json", rec)
    src = datasets.DATA_DIR / "h200" / "sweep" / "forum-sizes.csv.gz"
    shutil.copy(src, rec / "sweep" / src.name)
    env = json.loads(Path(f"{src}.env.json").read_text())
    env.update(gpu_name="GPU\ud800x", hostname="host\x00\x1b[2J")
    (rec / "sweep" / f"{src.name}.env.json").write_text(json.dumps(env))
    path = workbook.write(tmp_path / "w.xlsx", rec)
    readme = {r[0]: r[1] for r in openpyxl.load_workbook(path)["README"].iter_rows(values_only=True)}
    assert readme["machine"].startswith("GPU\\ud800x, ")
    assert readme["host"] == "host\\u0000\\u001b[2J"


_ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=40)


@given(_ANY_TEXT)
@settings(max_examples=300, deadline=None)
def test_html_and_markdown_text_hold_no_control_character_or_lone_surrogate(text):
    shown = html_text(text)
    shown.encode("utf-8")  # a lone surrogate would raise here
    assert not any(unicodedata.category(c) in TERMINAL_HIDDEN and c not in "\t\n\u200d" for c in shown)
    assert html.unescape(shown) == terminal_text(text, keep="\t\n")  # the same text, only shown
    for md in (md_text(text), md_code(text)):
        md.encode("utf-8")
        assert not any(unicodedata.category(c) in TERMINAL_HIDDEN and c != "\u200d" for c in md)


@given(
    st.recursive(
        _ANY_TEXT, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_ANY_TEXT, inner, max_size=3)
    )
)
@settings(max_examples=200, deadline=None)
def test_json_text_writes_lone_surrogates_visibly_and_leaves_other_text_alone(value):
    decoded = json.loads(json.dumps(value))  # ASCII JSON: a lone surrogate as "\ud800"
    shown = json_text(decoded)
    json.dumps(shown, ensure_ascii=False).encode("utf-8")  # no lone surrogate left anywhere
    if not re.search("[\ud800-\udfff]", json.dumps(value, ensure_ascii=False)):
        assert shown == value
