"""Text read from a data file, made safe where it is shown: HTML, Markdown, a spreadsheet, a terminal.

Fields of an env.json (``gpu_name``, ``torch``, ``hostname``), run ids, paths and error
messages come from files anyone can edit, and reports are shared. Here they become
inert text: :func:`html_text` for HTML, :func:`md_text` for Markdown a notebook renders
(raw HTML in Markdown is passed through by Jupyter and nbconvert), :func:`plot_text` for
text drawn in a matplotlib figure, and :func:`defuse_sheet`
for an openpyxl worksheet (``tableio.safe_excel`` writes a table through it), so that a cell starting with ``=`` (or ``+ - @``, tab, CR:
OWASP's list for CSV injection) is stored as a string, never a formula, and reads back
as the same text. :func:`terminal_text` is the one helper for a terminal: every message the
``h2dlab`` command prints passes through it (``cli.common.terminal_safe_streams``), so an
escape sequence or a right-to-left override in a file name or a file's text is shown, not
obeyed.
"""

from __future__ import annotations

import functools
import html
import re
import unicodedata
from typing import Any

__all__ = [
    "FORMULA_STARTS",
    "TERMINAL_HIDDEN",
    "defuse_frame",
    "defuse_sheet",
    "defuse_text",
    "html_text",
    "json_text",
    "md_code",
    "md_inert_html",
    "md_text",
    "plot_text",
    "sheet_frame",
    "terminal_text",
    "text_columns",
]

#: First characters that make a spreadsheet treat a cell as a formula (OWASP, CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~<>&])")  # mid-line: what can start markup there
#: Unicode categories a terminal acts on instead of showing: control characters (C0, DEL,
#: C1; ESC starts an escape sequence, CR returns over the line), format characters (Cf: a
#: right-to-left override turns the rest of the line around), line and paragraph separators,
#: and lone surrogates (a file name's undecodable bytes, which no stream can encode). The
#: zero-width joiner (in emoji sequences) is shown as it is, as ``schema`` lets it into tables.
TERMINAL_HIDDEN = ("Cc", "Cf", "Zl", "Zp", "Cs")


def _hidden(c: str) -> bool:
    return c != "\u200d" and not c.isprintable() and unicodedata.category(c) in TERMINAL_HIDDEN


def _visible(c: str) -> str:
    """``c`` as ``\\uXXXX`` (beyond U+FFFF as a surrogate pair): readable, and inside a JSON
    string the same character again."""
    o = ord(c)
    if o <= 0xFFFF:
        return f"\\u{o:04x}"
    o -= 0x10000
    return f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}"


@functools.lru_cache(maxsize=16)
def _ascii_hidden(keep: str) -> re.Pattern[str]:
    return re.compile("[" + "".join(re.escape(chr(i)) for i in (*range(32), 127) if chr(i) not in keep) + "]")


def terminal_text(value: Any, *, keep: str = "", replacement: str | None = None) -> str:
    """``value`` as text a terminal shows and does not obey: each character of
    :data:`TERMINAL_HIDDEN` (ESC, CR, a right-to-left override, ...) is written ``\\u001b``
    (or ``replacement``, e.g. U+FFFD), except those in ``keep`` (``"\\n"`` for whole
    messages). Printable text is returned as it is.

    Parameters
    ----------
    value
        Anything; ``str(value)`` is made safe.
    keep
        Characters let through (the kit's own line breaks and tabs).
    replacement
        What each hidden character becomes; None: its code, visible.

    Returns
    -------
    str
        Text without a character a terminal would act on (outside ``keep``).
    """
    text = str(value)
    if text.isprintable():
        return text
    swap = _visible if replacement is None else (lambda c: replacement)
    if text.isascii():  # the common case, a whole table: one pass in C
        return _ascii_hidden(keep).sub(lambda m: swap(m.group()), text)
    return "".join(swap(c) if c not in keep and _hidden(c) else c for c in text)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def json_text(value: Any) -> Any:
    """``value`` as ``json.loads`` returned it, with each lone surrogate in its strings (keys
    too) written ``\\ud800`` as :func:`terminal_text` writes it. A JSON file may hold the
    escape ``"\\ud800"``, which decodes to a character that no page, sheet, table or
    terminal can encode (pandas' text columns refuse it). Containers are changed in place,
    walked without recursion (a file may nest deeper than Python recurses)."""

    def fix(text: str) -> str:
        return _LONE_SURROGATE.sub(lambda m: _visible(m.group()), text)

    if isinstance(value, str):
        return fix(value)
    stack = [value] if isinstance(value, (dict, list)) else []
    while stack:
        box = stack.pop()
        if isinstance(box, list):
            for i, v in enumerate(box):
                if isinstance(v, str):
                    box[i] = fix(v)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
            continue
        items = list(box.items())
        box.clear()
        for k, v in items:
            if isinstance(v, str):
                v = fix(v)
            elif isinstance(v, (dict, list)):
                stack.append(v)
            box[fix(k) if isinstance(k, str) else k] = v
    return value


def html_text(value: Any) -> str:
    """``value`` as text in HTML: ``& < > " '`` escaped, and each character of
    :data:`TERMINAL_HIDDEN` but tab and line feed written ``\\u0000`` as
    :func:`terminal_text` writes it (a NUL or ESC from a file is a parse error in a page, and
    a lone surrogate cannot be encoded into one)."""
    return html.escape(terminal_text(value, keep="\t\n"), quote=True)


def md_text(value: Any) -> str:
    """``value`` as plain text inside Markdown: HTML markup escaped as entities and every
    Markdown mark (backticks, emphasis, links, tables) backslash-escaped, on one line; a
    character of :data:`TERMINAL_HIDDEN` written ``\\u0000`` as :func:`terminal_text` writes it."""
    text = terminal_text(" ".join(str(value).split()))  # no line break can start a heading or a block
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return text.replace("\\<", "&lt;").replace("\\>", "&gt;").replace("\\&", "&amp;")


def md_code(value: Any) -> str:
    """``value`` as a Markdown code span: Markdown renders its content as literal text (HTML
    escaped); a backtick in it, which would end the span, becomes ``'``, a line break a space,
    a character of :data:`TERMINAL_HIDDEN` ``\\u0000`` as :func:`terminal_text` writes it."""
    return "`" + terminal_text(" ".join(str(value).replace("`", "'").split())) + "`"


def md_inert_html(markdown: str) -> str:
    """``markdown`` with every ``<`` that a renderer would read outside a code span written
    ``&lt;``, so that no raw HTML (an ``<img onerror>``) renders from it. Code spans are
    paired as CommonMark pairs them (a run of n backticks closes at the next run of exactly
    n; backslash-escaped backticks outside spans open none), so a backtick inside a name
    that was put between backticks cannot carry markup out of its span. The text shows
    the same: ``&lt;`` renders as ``<``."""
    out, i, n = [], 0, len(markdown)
    while i < n:
        c = markdown[i]
        if c == "\\" and i + 1 < n:
            out.append(markdown[i : i + 2])
            i += 2
        elif c == "`":
            j = i
            while j < n and markdown[j] == "`":
                j += 1
            run, k, close = j - i, j, -1
            while k < n:
                if markdown[k] != "`":
                    k += 1
                    continue
                m = k
                while m < n and markdown[m] == "`":
                    m += 1
                if m - k == run:
                    close = k
                    break
                k = m
            end = j if close < 0 else close + run  # no closing run: the backticks are text
            out.append(markdown[i:end])
            i = end
        else:
            out.append("&lt;" if c == "<" else c)
            i += 1
    return "".join(out)


def plot_text(value: Any) -> str:
    """``value`` as text a matplotlib figure draws as it is: each ``$`` escaped, so that a
    GPU, host, run or file name holding one does not start math text (an unbalanced ``$``
    is a parse error that stops the figure)."""
    return str(value).replace("$", r"\$")


def defuse_text(value: Any) -> Any:
    """``value`` with a quote put before it where it is text a spreadsheet opening a CSV file
    would take for a formula (:data:`FORMULA_STARTS`); anything else as it is. A CSV has no
    cell types, so the quote stays in the text (OWASP's advice for CSV injection)."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def defuse_frame(df: Any) -> Any:
    """A copy of the DataFrame ``df`` with :func:`defuse_text` applied to its text cells and
    column names (``df`` itself when nothing needs it)."""
    cols = [c for c in df.columns if getattr(df[c].dtype, "kind", "") in ("O", "S", "U")]  # text columns
    hit = [c for c in cols if df[c].map(lambda v: isinstance(v, str) and v.startswith(FORMULA_STARTS)).any()]
    names = [defuse_text(str(c)) if isinstance(c, str) else c for c in df.columns]
    if not hit and names == list(df.columns):
        return df
    out = df.copy()
    for c in hit:
        out[c] = out[c].map(defuse_text)
    out.columns = names
    return out


def defuse_sheet(ws: Any, columns: list[int] | None = None) -> int:
    """Store every text cell of the openpyxl worksheet ``ws`` that a spreadsheet would take
    for a formula (:data:`FORMULA_STARTS`) as a string with Excel's quote prefix; returns
    how many cells were changed. The text is kept as it was: reading it back gives it.
    ``columns``: the 1-based columns that may hold text (default all); the header row is
    always looked at."""
    n = 0
    cols = range(1, ws.max_column + 1) if columns is None else sorted(set(columns))
    rows = [ws[1]]  # the header
    for j in cols:
        rows.extend(ws.iter_rows(min_row=2, min_col=j, max_col=j))
    for row in rows:
        for cell in row:
            v = cell.value
            if isinstance(v, str) and v.startswith(FORMULA_STARTS):
                cell.data_type = "s"
                cell.quotePrefix = True
                n += 1
    return n


#: What an .xlsx cell cannot hold (XML 1.0): C0 control characters but tab, LF and CR,
#: lone surrogates, and the non-characters U+FFFE and U+FFFF.
_SHEET_ILLEGAL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def sheet_frame(df: Any) -> Any:
    """``df`` with every character an .xlsx cell cannot hold (a C0 control character from a
    file: NUL, BEL, ESC ...) written as ``\\uXXXX`` text, as :func:`terminal_text` writes it,
    so openpyxl stores the text instead of failing; ``df`` itself where nothing changes."""
    import pandas as pd

    def clean(v: Any) -> Any:
        return _SHEET_ILLEGAL.sub(lambda m: _visible(m.group()), v) if isinstance(v, str) else v

    out = None
    for name, col in df.items():
        if pd.api.types.is_numeric_dtype(col.dtype) or pd.api.types.is_bool_dtype(col.dtype):
            continue
        if col.map(lambda v: isinstance(v, str) and _SHEET_ILLEGAL.search(v) is not None).any():
            out = df.copy() if out is None else out
            out[name] = col.map(clean)
    header = [clean(c) if isinstance(c, str) else c for c in df.columns]
    if header != list(df.columns):
        out = (df.copy() if out is None else out).set_axis(header, axis=1)
    return df if out is None else out


def text_columns(df: Any) -> list[int]:
    """The 1-based columns of ``df`` (as written with ``index=False``) that may hold text."""
    import pandas as pd

    return [
        j
        for j, (_, s) in enumerate(df.items(), 1)
        if not (pd.api.types.is_numeric_dtype(s.dtype) or pd.api.types.is_bool_dtype(s.dtype))
    ]
