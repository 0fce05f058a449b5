"""The reports' front page, ``index.html``: a link to each rendered notebook with its title and
one line on the question it answers, the recording every page reads (machine, GPU, date,
replay or live), and the workbook. Every text that comes from a file (a notebook's title, the
recording's env.json) is escaped; the page runs no script and loads nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from h2dlab.escape import html_text

__all__ = ["INDEX", "SUMMARY", "page", "recording_line", "write"]

INDEX = "index.html"
#: One line per notebook: the question its page answers (no figure: those move between recordings).
SUMMARY = {
    "01-forum-experiment-revisited": "Is the forum's timing experiment set up correctly, and which factors does it miss?",
    "02-fastest-way": "Which code moves a tensor to the GPU fastest, from the smallest copy to the largest?",
    "03-spikes-explained": "Why do some copies take far longer than the rest? Each slow copy's cause, with its evidence.",
    "04-pinned-memory-primer": "Pinned memory, DMA and the host allocator, each idea shown with a measured figure.",
    "05-explore": "Choose a strategy, a size and a run and see its copies (interactive: open it in JupyterLab).",
    "06-your-trace": "What the copies in your torch.profiler trace cost a step, and which recipe removes it.",
    "07-fleet": "Every GPU of a fleet surveyed at once, each flagged GPU named with its evidence.",
}
_STYLE = (
    "body{font-family:sans-serif;max-width:48em;margin:2em auto;padding:0 1em;line-height:1.45}"
    "li{margin:.8em 0}.what{color:#444}.failed{color:#b00}.source{color:#555;font-size:.92em}"
)


def recording_line(data: str | Path, mode: str) -> str:
    """One plain sentence naming the recording the pages read: replay or live, its name, the
    machine (GPU, link, torch, host) and the day it was recorded.

    Parameters
    ----------
    data
        ``"h200"`` (the bundled recording) or a recording folder.
    mode
        ``"replay"`` or ``"live"``.

    Returns
    -------
    str
        The sentence (not escaped: :func:`page` escapes it); where the recording cannot be read,
        a sentence saying so.
    """
    from h2dlab.errors import UsageError
    from h2dlab.recording import session
    from h2dlab.recording.env import describe

    try:
        rec = session.Recorded(data if str(data) == session.BUNDLED else Path(data))
        m = rec.machine()
        day = rec.date()
    except (UsageError, OSError, ValueError) as exc:
        return f"The recording {data} could not be read for this line: {exc}"
    name = "the bundled recording h200" if rec.bundled else f"the recording {rec.folder}"
    how = "Live: this machine" if mode == "live" else "Replay"
    host = f" on host {m['hostname']}" if m.get("hostname") else ""
    return f"{how}, {name}: {describe({**m, 'date': None})}{host}, recorded {day}."


def page(pages: list[dict[str, Any]], source: str, workbook: str | None = None) -> str:
    """The HTML of the front page.

    Parameters
    ----------
    pages
        One dict per rendered page, in order: ``name`` (the notebook, also its file
        ``name.html``), ``title`` and, for a notebook that failed, ``failed`` (why).
    source
        The sentence naming the recording (:func:`recording_line`).
    workbook
        The workbook's file name beside the pages, or None when there is none.

    Returns
    -------
    str
        A whole HTML document, every text escaped.
    """
    e = html_text  # markup escaped, a control character or lone surrogate from a file as \\uXXXX
    items = []
    for p in pages:
        href = e(quote(f"{p['name']}.html"))
        what = SUMMARY.get(p["name"], "")
        line = f'<br><span class="what">{e(what)}</span>' if what else ""
        if p.get("failed"):
            line += f'<br><span class="failed">This notebook failed: {e(str(p["failed"]))}</span>'
        items.append(f'<li><a href="{href}">{e(p["title"])}</a>{line}</li>')
    tables = (
        f'<p>The tables behind the figures, one sheet each: <a href="{e(quote(workbook))}">{e(workbook)}</a>.</p>'
        if workbook
        else ""
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>h2dlab reports</title><style>{_STYLE}</style></head><body>"
        "<h1>h2dlab reports</h1>"
        "<p>How fast tensors reach the GPU, and why some copies are slow, measured by h2dlab.</p>"
        f'<p class="source">{e(source)}</p>'
        f"<ol>{''.join(items)}</ol>{tables}</body></html>\n"
    )


def write(
    outdir: str | Path, pages: list[dict[str, Any]], data: str | Path, mode: str, workbook: str | None = None
) -> Path:
    """Write ``outdir/index.html`` (atomically) for the pages rendered there.

    Parameters
    ----------
    outdir
        The reports folder.
    pages, data, mode, workbook
        As in :func:`page` and :func:`recording_line` (``workbook``: the one this run wrote).

    Returns
    -------
    pathlib.Path
        The page written.
    """
    from h2dlab.recording import datasets

    out = Path(outdir)
    text = page(pages, recording_line(data, mode), workbook)
    datasets.atomic_write(out / INDEX, lambda p: Path(p).write_text(text, encoding="utf-8"))
    return out / INDEX
