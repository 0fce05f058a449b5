"""What a table named on the command line is: the one reader of ``explain``'s and
``compare``'s RUN arguments.

A RUN is, first match wins:

- a table or a folder of tables (a path that exists);
- a recorded dataset (``h200_sweep``: ``datasets.load``);
- ``RECORDING:KIND`` or ``RECORDING:KIND:RUN``: the runs of one kind of a recording,
  ``RECORDING`` being ``h200`` (the bundled recording, as the notebooks read it) or the
  folder ``h2dlab record`` wrote (``h200:sweep``, ``h200:sweep:pow2-interleaved``);
- ``DATASET:RUN``: one run of a dataset or folder (``h200_sweep:pow2``).

Every mistake is a ``UsageError`` whose one line says what to write instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pandas as pd

from h2dlab.errors import UsageError
from h2dlab.recording import datasets

__all__ = ["Source", "load", "resolve", "stopped_note", "where"]


class Source(NamedTuple):
    """A resolved RUN argument: its ``table``, the ``label`` its runs are shown under
    (``h200:sweep``), and the ``run`` it names (``None``: every run of the table)."""

    table: pd.DataFrame
    label: str
    run: str | None


def _recording(head: str):
    """The recording ``head`` names (``h200`` or a recording folder), else ``None``."""
    from h2dlab.recording import session
    from h2dlab.recording.folder import is_recording

    if Path(head).is_dir():  # a folder here, even one named h200 (as in data/): the path wins
        return session.Recorded(Path(head)) if is_recording(head) else None
    return session.Recorded(head) if head == session.BUNDLED and not Path(head).exists() else None


def _kinds_hint(rec) -> str:
    return ", ".join(rec.kinds()) or "none"


def _from_recording(rec, head: str, kind: str, run: str | None) -> Source:
    from h2dlab.recording.folder import kinds_in

    if kind not in rec.kinds() and kind in kinds_in(rec.folder):  # tables, but none whole
        how = f"finish them with h2dlab record --resume {rec.folder}, or " if rec.manifest else ""
        raise UsageError(
            f"{head}:{kind}: every {kind} run of the recording {head!r} was stopped early: "
            f"{how}give one of its tables as a path"
        )
    if kind not in rec.kinds():
        raise UsageError(
            f"{head}:{kind}: the recording {head!r} has no kind {kind!r}: give one of {_kinds_hint(rec)}"
        )
    if kind == "overlap":
        raise UsageError(
            f"{head}:overlap is a timeline of copies beside compute, not a table of copies: "
            "give another kind, e.g. " + f"{head}:sweep"
        )
    try:
        df = rec.table(kind, run)
    except ValueError as exc:  # a run it lacks, or a damaged table (SchemaError)
        raise UsageError(f"{head}:{kind}{':' + run if run else ''}: {exc}") from None
    return Source(df, f"{head}:{kind}", run)


def _bare_recording(text: str, rec) -> UsageError:
    known = ", ".join(n for n in datasets.names() if n.startswith("h200") and n not in datasets.TIMELINES)
    return UsageError(
        f"{text!r} is the bundled recording, one table per kind of run: give one of its kinds as "
        f"{text}:KIND, e.g. {text}:sweep, the folder {datasets.DATA_DIR / text / 'sweep'} (it has {_kinds_hint(rec)}), "
        f"or a dataset ({known})"
    )


def resolve(source: str) -> Source:
    """The table a RUN argument names (see the module's docstring).

    Raises
    ------
    UsageError
        For a name that is none of those, a kind or run the recording lacks, a timeline,
        or a table that cannot be read; the message says what to give instead.
    """
    from h2dlab.recording.session import BUNDLED, Recorded

    text = str(source)
    if ":" not in text or Path(text).exists():
        if text == BUNDLED and not Path(text).exists():
            raise _bare_recording(text, Recorded(BUNDLED))
        try:
            return Source(datasets.load(text), text, None)
        except ValueError as exc:  # SchemaError, or a name that cannot be a table ('', a timeline)
            plain = isinstance(exc, datasets.SchemaError) and not Path(text).exists()
            plain = plain and "/" not in text and datasets.suffix_of(text) == ""
            more = f", or {BUNDLED}:KIND for a kind of the bundled recording" if plain else ""
            raise UsageError(f"{exc}{more}") from None
    head, _, rest = text.partition(":")
    rec = _recording(head)
    if rec is not None:
        kind, colon, run = rest.partition(":")
        if not kind:  # 'h200:' or 'h200::' (its message had an empty kind slot)
            raise UsageError(f"{text!r} names no kind: give {head}:KIND, one of {_kinds_hint(rec)}")
        if colon and not run:  # 'h200:sweep:' read every run, where 'forum_a100:' is refused
            raise UsageError(
                f"{text!r} names no run after its last ':': give {head}:{kind} for every {kind} run, or {head}:{kind}:RUN"
            )
        return _from_recording(rec, head, kind, run or None)
    head, _, run = text.rpartition(":")
    try:
        whole = datasets.load(head)
    except ValueError as exc:
        raise UsageError(f"{text}: {exc}") from None
    try:
        return Source(datasets.run_named(whole, run), head, run)
    except ValueError as exc:
        raise UsageError(f"{text}: {exc}") from None


def load(source: str) -> pd.DataFrame:
    """The table a RUN argument names: ``resolve(source).table``."""
    return resolve(source).table


def stopped_note(df: pd.DataFrame, source: str) -> str | None:
    """A note that ``source``'s table, or some run of it, was stopped early (its env.json's
    ``measured_rows`` below ``planned_rows``), so sizes or reps are missing; None when every
    run is whole or does not say. ``explain`` and ``compare`` print it: their figures read
    only what was measured (hostile tester, session 29)."""
    envs = df.attrs.get("envs") or {}
    if not envs and df.attrs.get("env") is not None:
        envs = {None: df.attrs["env"]}
    names = df.attrs.get("run_names") or {}
    short = []
    for rid, env in envs.items():
        if rid is not None and (env or {}).get("run_id") not in (None, rid):
            continue  # a file of several runs has one env.json: it speaks for its own run only
        m, p = (env or {}).get("measured_rows"), (env or {}).get("planned_rows")
        if isinstance(m, int) and isinstance(p, int) and m < p:
            short.append((names.get(rid, rid), m, p))
    if not short:
        return None
    named = len(envs) > 1  # one run: the source names it already
    said = "; ".join(f"{f'{n}: ' if named else ''}{m} of {p} rows" for n, m, p in short)
    return f"note: {source} holds a run stopped early ({said}): its missing rows are not shown; finish it with --resume"


def where(source: str) -> Path | None:
    """The file or folder a RUN argument reads, without reading it: a path as given, a
    dataset's folder, a recording's whole folder for ``RECORDING:KIND[:RUN]`` (the bundled
    one: the data folder); ``None`` where it names nothing (reading it will say why)."""
    from h2dlab.recording.session import BUNDLED

    def named(name: str) -> Path | None:
        if Path(name).exists():
            return Path(name)
        if name in datasets.DATASETS:
            return datasets.DATA_DIR / datasets.DATASETS[name][0]
        return datasets.DATA_DIR if name == BUNDLED else None

    text = str(source)
    if ":" not in text or Path(text).exists():
        return named(text)
    head = text.partition(":")[0]
    rec = _recording(head)
    if rec is not None:
        return rec.folder  # the bundled one: the data folder (Recorded sets it so)
    return named(text.rpartition(":")[0])
