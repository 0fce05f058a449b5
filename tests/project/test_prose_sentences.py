"""The notebooks' prose reads in sentences of at most 40 words (the house style, issue 31).

Counted in what a reader sees in the rendered notebooks (``notebooks/*.ipynb``, executed
from a recording, no GPU code run here): the Markdown cells and every ``text/markdown``
output, the sentences the findings build from data included. A heading, a list item and
a table cell are units of their own; inside one, a sentence ends at ``.``, ``!`` or ``?``
followed by a space, or at a colon that ends a line. Code (fenced blocks, inline spans)
counts as the words it shows. DMA, IQR and pinned must be spelled out at their first use in
each notebook. These read the committed notebooks: after editing a notebook's .py, re-render
(`make notebooks`) before they can pass.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NB = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = sorted(p.stem for p in NB.glob("[0-9][0-9]-*.ipynb"))
MAX_WORDS = 40

_FENCE = re.compile(r"```.*?```", re.S)
_TAG = re.compile(r"<[^>\n]+>")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_ABBREV = re.compile(r"\b(e\.g|i\.e|vs|etc|cf|approx|No|Fig)\.", re.I)
#: A sentence ends at . ! ? (a closing mark may follow) before a space and a new start.
_END = re.compile(r"(?<=[.!?])[)*_\"']*\s+(?=[A-Z0-9(*_`\"'\[])")
_WORD = re.compile(r"\S*[A-Za-z0-9]\S*")


def units(markdown: str) -> list[str]:
    """The blocks of ``markdown`` that hold sentences: paragraphs, headings, list items, cells."""
    text = _FENCE.sub(" ", markdown)
    text = _TAG.sub(" ", text)
    text = _LINK.sub(r"\1", text)
    out: list[str] = []
    para: list[str] = []

    def flush() -> None:
        if para:
            out.append(" ".join(para))
            para.clear()

    for line in text.splitlines():
        s = line.strip()
        if not s or re.fullmatch(r"[|:\- ]+", s):
            flush()
        elif s.startswith("|"):
            flush()
            out.extend(c.strip() for c in s.strip("|").split("|") if c.strip())
        elif s.startswith("#") or re.match(r"([-*+]|\d+\.)\s", s):
            flush()
            para.append(s)
        else:
            para.append(s)
        if s.endswith(":"):  # a colon ending a line introduces what follows: the sentence ends
            flush()
    flush()
    return out


def sentences(markdown: str) -> list[str]:
    """The sentences of ``markdown`` (see the module's docstring for where one ends)."""
    found = []
    for unit in units(markdown):
        guarded = _ABBREV.sub(lambda m: m.group(0).replace(".", "\u2024"), unit)
        found.extend(s.replace("\u2024", ".") for s in _END.split(guarded) if s.strip())
    return found


def words(sentence: str) -> int:
    """Words in ``sentence``: tokens holding a letter or a digit."""
    return len(_WORD.findall(sentence))


def prose(nb: dict) -> list[tuple[str, str]]:
    """(where, Markdown) for every Markdown cell and ``text/markdown`` output of ``nb``."""
    found = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "markdown":
            found.append((f"cell {i}", "".join(cell["source"])))
        for out in cell.get("outputs", []):
            md = out.get("data", {}).get("text/markdown")
            if md is not None:
                found.append((f"output of cell {i}", "".join(md) if isinstance(md, list) else md))
    return found


def long_sentences_in_notebook(nb: dict, limit: int = MAX_WORDS) -> list[tuple[str, int, str]]:
    """(where, words, sentence) for every sentence of ``nb``'s prose over ``limit`` words."""
    return [(where, words(s), s) for where, md in prose(nb) for s in sentences(md) if words(s) > limit]


def test_sentences_end_where_a_reader_stops():
    md = "# Title here\n\nOne two. Three four five! Six (e.g. seven) eight?\n\n- item one\n- item two\n"
    assert sentences(md) == [
        "# Title here",
        "One two.",
        "Three four five!",
        "Six (e.g. seven) eight?",
        "- item one",
        "- item two",
    ]
    assert sentences("What it says:\nthe next part.") == ["What it says:", "the next part."]
    assert sentences("| a b | c. D e |\n|---|---|\n| f | g |") == ["a b", "c.", "D e", "f", "g"]
    assert sentences("x `a.b()`. Next one, 1.5 GB/s.") == ["x `a.b()`.", "Next one, 1.5 GB/s."]


def test_words_counts_tokens_with_a_letter_or_digit():
    assert words("The copy — at 55.3 GB/s — (`x.to()`) ends.") == 7
    assert words(" ".join(["w"] * 41)) == 41


def test_a_long_sentence_is_found_in_a_cell_and_in_an_output():
    long = "Word " + " ".join(["word"] * 40) + "."
    nb = {
        "cells": [
            {"cell_type": "markdown", "source": ["Short. ", long]},
            {"cell_type": "code", "source": "", "outputs": [{"data": {"text/markdown": long}}]},
            {"cell_type": "code", "source": "", "outputs": [{"data": {"text/plain": long}}]},
        ]
    }
    found = long_sentences_in_notebook(nb)
    assert [(w, n) for w, n, _ in found] == [("cell 0", 41), ("output of cell 1", 41)]


@pytest.mark.parametrize("name", NAMES)
def test_rendered_notebook_prose_has_no_sentence_over_40_words(name):
    nb = json.loads((NB / f"{name}.ipynb").read_text())
    bad = long_sentences_in_notebook(nb)
    assert not bad, f"{name}: {len(bad)} sentences over {MAX_WORDS} words, first: {bad[0]}"


#: term -> the words that spell it out, which must come with its first use in a notebook's prose
SPELLED = {
    "DMA": "direct memory access",
    "IQR": "interquartile range",
    "pinned": "page-locked",
}


def first_use_unexplained(nb: dict) -> list[str]:
    """The terms of :data:`SPELLED` whose first use in ``nb``'s prose (Markdown cells and
    ``text/markdown`` outputs, in order) is not spelled out before it, in it or in the
    sentence right after it (a bold lead-in such as "**Pinned memory.**" is followed by
    its definition)."""
    bad = []
    text = [s for _, md in prose(nb) for s in sentences(md)]
    for term, words_ in SPELLED.items():
        pat = re.compile(rf"\b{re.escape(term)}\b")
        first = next((i for i, s in enumerate(text) if pat.search(s)), None)
        if first is not None and not any(words_ in s.lower() for s in text[: first + 2]):
            bad.append(f"{term}: {text[first][:120]}")
    return bad


def test_first_use_check_wants_the_term_spelled_out_in_its_first_sentence():
    def nb(*mds):
        return {"cells": [{"cell_type": "markdown", "source": md} for md in mds]}

    assert first_use_unexplained(nb("A DMA (direct memory access) copy.", "Then DMA again.")) == []
    assert first_use_unexplained(nb("IQR is the interquartile range.", "IQR 1-2.")) == []
    assert first_use_unexplained(nb("A DMA copy.", "Again.", "DMA is direct memory access.")) == [
        "DMA: A DMA copy."
    ]
    assert first_use_unexplained(nb("No terms here.")) == []


@pytest.mark.parametrize("name", NAMES)
def test_dma_iqr_and_pinned_are_spelled_out_at_first_use(name):
    nb = json.loads((NB / f"{name}.ipynb").read_text())
    assert not first_use_unexplained(nb), first_use_unexplained(nb)
