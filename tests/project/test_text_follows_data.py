"""Text that must follow its data when a notebook reads a live recording (issue 31's defects):
a figure's footnote names the recording shown, not the notebook's default ``DATA``; the
advice figure's title names each case's own size; no notebook types a claim about the
number of repetitions or a command for a kind the recording may lack into its Markdown.
(The repetitions sentence itself: tests/findings/test_findings.py; the commands: tests/findings/test_prose_escaping.py.)"""

from __future__ import annotations

from pathlib import Path

import jupytext
import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")

NB = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = sorted(p.stem for p in NB.glob("[0-9][0-9]-*.py"))


def cells(name: str, kind: str) -> list[str]:
    return [c.source for c in jupytext.read(NB / f"{name}.py").cells if c.cell_type == kind]


@pytest.mark.parametrize("name", NAMES)
def test_figures_are_footed_with_the_recording_shown_not_the_default_data(name):
    code = "\n".join(cells(name, "code")[1:])  # the parameters cell sets DATA; nothing else may quote it
    assert "name=DATA" not in code and "{DATA}" not in code, name


@pytest.mark.parametrize("name", NAMES)
def test_markdown_types_no_repetition_count_and_no_explain_command_for_a_kind(name):
    md = "\n".join(cells(name, "markdown"))
    assert "two repetitions" not in md.lower(), name
    assert "h2dlab explain h200:" not in md and "`h200:idle`" not in md, name


def _advice(batch_bytes: int) -> pd.DataFrame:
    """SYNTHETIC advice-table rows: two ways to the GPU at 1 GiB, two batch ways at ``batch_bytes``."""
    rows = [
        ("one tensor to the GPU", "pageable", 2**30, 120.0),
        ("one tensor to the GPU", "pinned_reuse", 2**30, 19.4),
        ("a batch of 64 tensors", "loop_to", batch_bytes, 9.0),
        ("a batch of 64 tensors", "pinned_flat", batch_bytes, 3.0),
    ]
    t = pd.DataFrame(rows, columns=["case", "way", "size_bytes", "per_copy_ms"])
    return t.assign(what=t.way, q1_ms=t.per_copy_ms, q3_ms=t.per_copy_ms, upfront_ms=0.0)


def test_the_advice_figure_names_each_cases_own_size():
    from h2dlab.show.plots_compare import advice_bars

    title = advice_bars(_advice(64 * 2**20), name="live-folder").get_title()
    assert "64 MiB" in title and "1 GiB" in title and not title.startswith("ways to move 1 GiB")
    same = advice_bars(_advice(2**30), name="h200").get_title()
    assert same == "ways to move 1 GiB, each case against its plain way"
