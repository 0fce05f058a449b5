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
    "fmt_size",
    "forum_nbytes",
    "forum_shape",
    "forum_sizes",
    "parse_int",
    "parse_size",
    "parse_sizes",
]

#: The units a size may carry, case-insensitive: bytes and the binary (1024-based) units only.
UNITS = {
    "": 1,
    "b": 1,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
#: Decimal or ambiguous units, refused: ``64MB`` (10^6-based) beside ``KiB`` (1024-based) made
#: one command line mix two meanings (issue #35). Each maps to the binary unit to write instead.
REFUSED_UNITS = {
    "k": "KiB", "kb": "KiB", "m": "MiB", "mb": "MiB", "g": "GiB", "gb": "GiB", "t": "TiB", "tb": "TiB",
}  # fmt: skip
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
        A number and an optional unit, case-insensitive: B or a binary unit (KiB, MiB, GiB,
        TiB: powers of 1024). Decimal units (KB, MB, GB, TB) and bare K, M, G, T are refused
        with a message that says what to write (``64MiB``, or the bytes ``64000000``).

    Returns
    -------
    int
        The size in bytes.

    Raises
    ------
    UsageError
        (a ``ValueError``) for an unreadable, zero, negative or fractional size, or a decimal unit.
    """
    m = _SIZE_RE.match(str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in {**UNITS, **REFUSED_UNITS}:
        raise UsageError(
            f"cannot read size {text!r}: write a number and a unit such as 4096, 1KiB, 64MiB, 1GiB"
        )
    if len(m.group(1)) > 40:
        raise UsageError(f"size {text!r} is too large to be a size")
    number = Fraction(m.group(1))
    if number <= 0:
        raise UsageError(f"size {text!r} must be positive")
    if unit in REFUSED_UNITS:
        raise UsageError(_decimal_refused(str(text).strip(), m.group(1), m.group(2), number))
    value = number * UNITS[unit]  # exact: 9007199254740993 stays itself
    if value.denominator != 1:
        raise UsageError(f"size {text!r} is not a whole number of bytes")
    return int(value)


def _decimal_refused(text: str, number: str, unit: str, value: Fraction) -> str:
    """The one line refusing a decimal unit: what to write instead, in binary units or bytes."""
    binary = REFUSED_UNITS[unit.lower()]
    ways = []
    if (value * UNITS[binary.lower()]).denominator == 1:
        ways.append(f"{number}{binary}")
    decimal = value * 1000 ** ("kmgt".index(unit[0].lower()) + 1)
    if decimal.denominator == 1:
        ways.append(f"{int(decimal)} (bytes)")
    if not ways:  # 0.0001KB: not a whole number of bytes in either unit
        ways.append("a whole number of bytes, e.g. 4096 or 1KiB")
    return (
        f"size {text!r}: h2dlab takes binary units only ({binary} = {UNITS[binary.lower()]} bytes), "
        f"not {unit}: write {' or '.join(ways)}"
    )


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


def fmt_size(n: int) -> str:
    """A whole number of bytes, exactly, as ``parse_size`` reads it back: the largest binary
    unit that shows it in at most two decimals, else bytes.

    Parameters
    ----------
    n
        Bytes (a whole number).

    Returns
    -------
    str
        ``1536`` -> ``'1.5 KiB'``, ``67108864`` -> ``'64 MiB'``, ``1500`` -> ``'1500 B'``
        (:func:`fmt_bytes` rounds: ``'1.46 KiB'``); ``parse_size(fmt_size(n)) == n``.
    """
    n = int(n)
    for unit, div in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        v = Fraction(n, div)
        if v >= 1 and (v * 100).denominator == 1:
            whole, part = divmod(int(v * 100), 100)
            return f"{whole} {unit}" if part == 0 else f"{whole}.{part:02d}".rstrip("0") + f" {unit}"
    return f"{n} B"


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
