"""Sizes: reading them (``'64MiB'``, ``'1KiB..1GiB'``, ``'forum'``) and writing them.

No torch here: analysis and plotting code format sizes without importing it.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from h2dlab.errors import UsageError

__all__ = [
    "FORUM_SEQS",
    "UNITS",
    "fmt_bytes",
    "forum_nbytes",
    "forum_shape",
    "forum_sizes",
    "parse_int",
    "parse_size",
    "parse_sizes",
]

UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "tb": 1000**4,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*(-?[0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")
_INT_RE = re.compile(r"\s*[-+]?[0-9]+\s*")

#: The forum's grid: seq = 1, 6, ..., 1046 for float16 tensors of shape (24, 2, 1, seq, 4096).
FORUM_SEQS = list(range(1, 1050, 5))


def forum_shape(seq: int) -> tuple[int, ...]:
    """The shape of the forum's tensor for one ``seq``: ``(24, 2, 1, seq, 4096)``."""
    return (24, 2, 1, seq, 4096)


def forum_nbytes(seq: int) -> int:
    """Bytes of the forum's float16 tensor for one ``seq`` (the one place this is computed)."""
    return math.prod(forum_shape(seq)) * 2


def forum_sizes() -> list[int]:
    """The byte sizes of the forum's 210 float16 tensors."""
    return [forum_nbytes(s) for s in FORUM_SEQS]


def parse_int(text: str, what: str = "value") -> int:
    """Read a whole number written in ASCII digits with an optional sign: ``'-5'`` -> -5.

    ``int()`` also takes other scripts' digits (``'١٠'``) and underscores (``'1_0'``);
    sizes do not, so neither does any other number the command line reads.

    Parameters
    ----------
    text
        The text, spaces around it allowed.
    what
        What the number is, for the message (``'seed'``).

    Returns
    -------
    int

    Raises
    ------
    UsageError
        (a ``ValueError``) for anything else, naming ``what``.
    """
    if not isinstance(text, str) or not _INT_RE.fullmatch(text):
        raise UsageError(f"{what} {text!r} is not a whole number: write digits 0-9, e.g. 10")
    if len(text.strip()) > 40:  # int() refuses past 4300 digits with its own message
        raise UsageError(f"{what} {text.strip()[:20]}... is too large")
    return int(text)


def parse_size(text: str) -> int:
    """Read one size: ``'64MiB'`` -> 67108864.

    Parameters
    ----------
    text
        A number and an optional unit: binary (KiB, MiB, GiB, TiB) or decimal (KB, MB,
        GB, TB), case-insensitive.

    Returns
    -------
    int
        The size in bytes.

    Raises
    ------
    UsageError
        (a ``ValueError``) for an unreadable, zero, negative or fractional size.
    """
    m = _SIZE_RE.match(str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in UNITS:
        raise UsageError(
            f"cannot read size {text!r}: write a number and a unit such as 4096, 1KiB, 64MiB, 1GiB"
        )
    if len(m.group(1)) > 40:
        raise UsageError(f"size {text!r} is too large to be a size")
    value = Fraction(m.group(1)) * UNITS[unit]  # exact: 9007199254740993 stays itself
    if value <= 0:
        raise UsageError(f"size {text!r} must be positive")
    if value.denominator != 1:
        raise UsageError(f"size {text!r} is not a whole number of bytes")
    return int(value)


def parse_sizes(spec: str) -> list[int]:
    """Read a list of sizes.

    Parameters
    ----------
    spec
        ``'1KiB,64MiB,1GiB'``, ``'1KiB..1GiB'`` (every power of two between, inclusive,
        plus the lower end: ``'3..7'`` is 3 and 4), ``'forum'`` (the forum's 210 sizes), or a comma list mixing them.

    Returns
    -------
    list of int
        Sorted, without duplicates.
    """
    if not str(spec).strip():
        raise UsageError("no sizes given: write e.g. 1KiB..1GiB")
    sizes: set[int] = set()
    for part in str(spec).split(","):
        part = part.strip()
        if not part:  # parse_size('') would say "cannot read size ''" of a text it never saw
            raise UsageError(f"the size list {spec!r} has an empty entry: write e.g. 1KiB,64MiB")
        if part == "forum":
            sizes.update(forum_sizes())
        elif ".." in part:
            lo_s, hi_s = part.split("..", 1)
            if not lo_s.strip() or not hi_s.strip():
                raise UsageError(f"size range {part!r} lacks an end: write both, e.g. 1KiB..1GiB")
            lo, hi = parse_size(lo_s), parse_size(hi_s)
            if lo > hi:
                raise UsageError(f"size range {part!r} runs backwards: write the smaller size first")
            k = math.ceil(math.log2(lo))
            if 2**k != lo:
                sizes.add(lo)
            while 2**k <= hi:
                sizes.add(2**k)
                k += 1
        else:
            sizes.add(parse_size(part))
    return sorted(sizes)


def fmt_bytes(n: float, *, compact: bool = False) -> str:
    """A size in binary units: the one byte formatter of the package.

    Parameters
    ----------
    n
        Bytes.
    compact
        False (messages, tables): ``1536`` -> ``'1.50 KiB'``, ``67108864`` -> ``'64 MiB'``.
        True (axis ticks, prose): up to six significant digits and no trailing zeros,
        ``1536`` -> ``'1.5 KiB'``.

    Returns
    -------
    str
        Below 1 KiB, in bytes (``'512 B'``).
    """
    for unit, div in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        # also where the next unit down would print 1024.00 (1023.995 MiB is 1.00 GiB)
        if n >= div or (not compact and div > 1024 and float(f"{n / (div // 1024):.2f}") >= 1024):
            v = n / div
            if compact:
                return f"{v:g} {unit}"
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.2f} {unit}"
    return f"{n:g} B" if compact else f"{int(n)} B"
