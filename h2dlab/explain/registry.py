"""What a cause is: one entry (:class:`Cause`) in the registry of its family (:class:`Registry`).

A cause is data: its name (the label ``explain()`` writes in the ``cause`` column), what it
means (one sentence, the vocabulary ``causes.CAUSES`` lists), the columns it needs (a table
without them never gets it: the rule is unavailable, never a guess), its test (a function of
one flagged row that returns the evidence sentence, quoting the numbers, or None) and,
where the rule needs more than the shared context of ``causes.neighbours``, a ``context``
function that adds its own columns to that context once per table.

The families, each one ordered registry, tried in this order for every flagged copy:
``causes.ALLOCATOR`` (start-up and the allocators' counters), ``causes_evidence.PER_COPY``
(the per-copy evidence of table schemas 2 to 5), then, for a copy in no stretch of slow
copies, ``causes.LIKELY`` (what only the size of the extra or the gap before the copy points
to). ``episode`` and ``unexplained`` are entries without a test: the episode search and the
fallback name them. A new cause is one entry added to its family's list (or
:meth:`Registry.register` ed at run time) and its test. Of the kit, this imports nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import pandas as pd

__all__ = ["Cause", "Registry", "Test", "Vocabulary", "first", "said"]

#: A cause's test: ``test(row, ctx, val, slow)`` -> the evidence sentence, or None where the
#: rule does not hold for this copy. ``row`` is the flagged row of ``outliers.detect()``'s
#: output, ``ctx`` its row of ``causes.neighbours()``, ``val`` its time in ms
#: (``rows.value_ms``), ``slow`` the sentence's start (``causes_evidence.slow_text(row, val)``).
#: Every rule function of the cause modules takes these four first.
Test = Callable[[pd.Series, pd.Series, float, str], "str | None"]


@dataclass(frozen=True)
class Cause:
    """One cause of a slow copy.

    Attributes
    ----------
    name
        The label ``explain()`` writes in the ``cause`` column.
    means
        What it means, in one sentence (the vocabulary ``causes.CAUSES`` lists).
    needs
        The table columns its test reads: a name, or a tuple of names of which any one
        will do. A table lacking one is never given this cause (checked once per table).
    test
        ``test(row, ctx, val, slow)`` -> the evidence sentence or None (see :data:`Test`).
        None for ``episode`` and ``unexplained``, which the episode search and the
        fallback name.
    context
        ``context(df)`` -> columns (name -> Series on ``df``'s index) this rule reads in
        ``ctx`` beyond the shared ones ``causes.neighbours`` builds; None where it needs none.
    """

    name: str
    means: str
    needs: tuple[str | tuple[str, ...], ...] = ()
    test: Test | None = None
    context: Callable[[pd.DataFrame], Mapping[str, pd.Series]] | None = None

    def available(self, columns: Iterable[str]) -> bool:
        """Whether a table with ``columns`` has every column this cause needs."""
        have = set(columns)
        return all(
            (any(c in have for c in need) if isinstance(need, tuple) else need in have) for need in self.needs
        )


class Registry:
    """The causes of one family, in the order their tests are tried.

    Parameters
    ----------
    family
        Its name, in words.
    entries
        Its causes, in order.
    """

    def __init__(self, family: str, entries: Iterable[Cause]) -> None:
        self.family = family
        self._entries: list[Cause] = []
        for c in entries:
            self.register(c)

    def __iter__(self) -> Iterator[Cause]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return any(c.name == name for c in self._entries)

    def names(self) -> list[str]:
        """The causes' names, in order."""
        return [c.name for c in self._entries]

    def register(self, cause: Cause, *, before: str | None = None) -> Cause:
        """Add ``cause``, last or right before the cause named ``before``; returns it.

        Raises
        ------
        TypeError
            ``cause`` is not a :class:`Cause`.
        ValueError
            The family already has a cause of that name, or has none named ``before``.
        """
        if not isinstance(cause, Cause):
            raise TypeError(f"a registry holds Cause entries, not {type(cause).__name__}")
        if cause.name in self:
            raise ValueError(f"the {self.family} causes already have one named {cause.name!r}")
        at = len(self._entries)
        if before is not None:
            names = self.names()
            if before not in names:
                raise ValueError(f"the {self.family} causes have none named {before!r}: {', '.join(names)}")
            at = names.index(before)
        self._entries.insert(at, cause)
        return cause

    def unregister(self, name: str) -> Cause:
        """Remove the cause named ``name`` and return it (``ValueError`` where there is none)."""
        for i, c in enumerate(self._entries):
            if c.name == name:
                return self._entries.pop(i)
        raise ValueError(f"the {self.family} causes have none named {name!r}")

    def usable(self, columns: Iterable[str] | None) -> list[Cause]:
        """The causes a table with ``columns`` can have, in order (every one for None)."""
        if columns is None:
            return list(self._entries)
        cols = set(columns)
        return [c for c in self._entries if c.available(cols)]

    def first(
        self, row: pd.Series, ctx: pd.Series, val: float, slow: str, causes: Iterable[Cause] | None = None
    ) -> tuple[str, str] | None:
        """``(name, evidence)`` of the first cause whose test holds for one row, or None.

        ``causes`` are the entries to try (:meth:`usable`, once per table); every one of
        this family where None.
        """
        return first(self._entries if causes is None else causes, row, ctx, val, slow)


class Vocabulary(Mapping):
    """Every cause's name -> what it means, in the order they are tried, read live from the
    registries (a cause registered at run time is in it)."""

    def __init__(self, *parts: Registry | Cause) -> None:
        self._parts = parts

    def _causes(self) -> Iterator[Cause]:
        for p in self._parts:
            yield from ([p] if isinstance(p, Cause) else p)

    def __getitem__(self, name: str) -> str:
        for c in self._causes():
            if c.name == name:
                return c.means
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (c.name for c in self._causes())

    def __len__(self) -> int:
        return sum(1 for _ in self._causes())

    def entry(self, name: str) -> Cause:
        """The :class:`Cause` named ``name`` (``KeyError`` where there is none)."""
        for c in self._causes():
            if c.name == name:
                return c
        raise KeyError(name)

    def contexts(self) -> list[Callable[[pd.DataFrame], Mapping[str, pd.Series]]]:
        """The ``context`` functions of the causes that have one, in order."""
        return [c.context for c in self._causes() if c.context is not None]


def first(
    causes: Iterable[Cause], row: pd.Series, ctx: pd.Series, val: float, slow: str
) -> tuple[str, str] | None:
    """``(name, evidence)`` of the first of ``causes`` whose test holds for one row, or None
    (entries without a test are passed over)."""
    for c in causes:
        if c.test is None:
            continue
        text = c.test(row, ctx, val, slow)
        if text is not None:
            return c.name, text
    return None


def said(name: str, rule: Callable[..., tuple[str, str] | None]) -> Test:
    """A :data:`Test` from a rule that returns ``(name, evidence)`` or None (the rules'
    functions, which their own tests call): its evidence, where it named ``name``."""

    def test(row: pd.Series, ctx: pd.Series, val: float, slow: str) -> str | None:
        found = rule(row, ctx, val, slow)
        if found is None or found[0] != name:
            return None
        return found[1]

    test.__name__ = getattr(rule, "__name__", name)
    test.__doc__ = rule.__doc__
    return test
