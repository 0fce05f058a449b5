"""What a notebook reads: a *recording* (a folder of runs), replayed or made here now.

``recording(DATA, mode=MODE)`` is the one call a notebook makes for data::

    rec = session.recording("h200")          # the bundled H200 recording (data/h200, v1 folders for the rest)
    rec = session.recording("path/to/folder")  # any recording folder (h2dlab record --out)
    rec = session.recording("h200", mode="live")  # this machine, recorded once with --quick
    rec.table("sweep", "pow2"); rec.table("forum"); rec.has("d2h"); rec.env("sweep", "pow2")
    rec.banner()

``H2DLAB_DATA`` and ``H2DLAB_MODE`` (the report builder sets them) win over the
notebook's ``DATA`` and ``MODE``. Live mode's machine side (which machine this is, its
recording found or made) is :mod:`h2dlab.recording.live`; its names are re-exported here.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from h2dlab.errors import Unavailable, UsageError
from h2dlab.escape import terminal_text
from h2dlab.recording import datasets
from h2dlab.recording.env import day_span
from h2dlab.recording.env_folder import read_folder_env
from h2dlab.recording.folder import MANIFEST, finished, is_recording, read_manifest, run_tables
from h2dlab.recording.live import find_recording, gpu_name, live_recording, same_machine, this_machine
from h2dlab.recording.places import CHECKOUT
from h2dlab.recording.plan import KINDS, why_lacking

__all__ = [
    "BUNDLED",
    "MODES",
    "ROOT",
    "Markdown",
    "Recorded",
    "find_recording",
    "gpu_name",
    "live_recording",
    "recording",
    "resolve_mode",
    "same_machine",
    "this_machine",
]

ROOT = CHECKOUT
MODES = ("auto", "replay", "live")
#: The bundled recording's name; its kinds live in ``data/h200_<kind>`` (concurrent: ``h200x2_``).
BUNDLED = "h200"


class Markdown(str):
    """Text a notebook shows as Markdown (``_repr_markdown_``); still a plain ``str``."""

    def _repr_markdown_(self) -> str:
        return str(self)


def resolve_mode(mode: str = "auto", environ: Mapping[str, str] | None = None) -> str:
    """'replay' or 'live' from a notebook's MODE and the H2DLAB_MODE variable (which wins).

    Parameters
    ----------
    mode
        One of :data:`MODES`.
    environ
        Where to look for H2DLAB_MODE (default: ``os.environ``).

    Raises ``UsageError`` for an unknown mode or for ``live`` without CUDA, in one
    line that says what to do.
    """
    import torch

    mode = (os.environ if environ is None else environ).get("H2DLAB_MODE", mode) or "auto"
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}: use {', '.join(MODES)} (H2DLAB_MODE)")
    cuda = torch.cuda.is_available()
    if mode == "live" and not cuda:
        raise Unavailable(
            "live mode needs CUDA and this machine has none: use H2DLAB_MODE=replay "
            "(or auto) to replay the recorded H200 data"
        )
    if mode == "auto":
        return "live" if cuda else "replay"
    return mode


def _bundled_dir(kind: str) -> Path:
    """Where the bundled recording keeps ``kind``: ``data/h200/<kind>`` (recorded by
    ``h2dlab record``, schema 2) where it has that kind, else the first session's
    ``data/h200_<kind>`` (``h200x2_concurrent``: the 2-GPU host)."""
    if _table_files(datasets.DATA_DIR / BUNDLED / kind):
        return datasets.DATA_DIR / BUNDLED / kind
    for prefix in ("h200_", "h200x2_"):
        if (datasets.DATA_DIR / f"{prefix}{kind}").is_dir():
            return datasets.DATA_DIR / f"{prefix}{kind}"
    return datasets.DATA_DIR / f"h200_{kind}"


def _table_files(folder: Path) -> list[Path]:
    """The whole runs in ``folder`` (not partial files, not runs that were stopped early)."""
    return [p for p in run_tables(folder) if finished(p)]


def _run_name(p: Path) -> str:
    return p.name[: -len(datasets.suffix_of(p))]


def _whole_runs(df: pd.DataFrame, whole: set[str], label: str) -> pd.DataFrame:
    """``df`` without the runs not in ``whole`` (stopped early; they skewed medians), warning of them."""
    names = df.attrs.get("run_names") or {}
    cut = {rid: n for rid, n in names.items() if n not in whole}
    if not cut:
        return df
    warnings.warn(
        terminal_text(
            f"{label}: left out the unfinished run(s) {', '.join(sorted(set(cut.values())))} "
            "(stopped early: finish the recording with h2dlab record --resume)"
        ),
        stacklevel=3,
    )
    out = df[~df["run_id"].isin(list(cut))].reset_index(drop=True)
    keep = {k: v for k, v in (df.attrs.get("envs") or {}).items() if k not in cut}
    out.attrs = {**df.attrs, "envs": keep, "run_names": {k: v for k, v in names.items() if k not in cut}}
    return out


class Recorded:
    """A recording: tables by kind and run, their fingerprints, and a banner.

    Made by :func:`recording`; ``source`` is ``"h200"`` (the bundled data; ``bundled``) or a folder."""

    def __init__(self, source: str | os.PathLike[str], mode: str = "replay", made_now: bool = False) -> None:
        self.mode = mode
        self.made_now = made_now
        self._cache: dict[tuple[str, str | None], pd.DataFrame] = {}
        self.bundled = isinstance(source, str) and source == BUNDLED  # not a folder of that name
        if self.bundled:
            self.name, self.folder, self.manifest = BUNDLED, datasets.DATA_DIR, None
            self._made = read_manifest(datasets.DATA_DIR / BUNDLED)  # data/h200's recording.json
            return
        folder = Path(source).expanduser()
        if not folder.is_dir():
            raise UsageError(
                f"no recording {os.fspath(source)!r}: give {BUNDLED!r} (the bundled data) or the folder "
                "that `h2dlab record` wrote"
            )
        self.folder = folder.resolve()
        self.name = self.folder.name
        self.manifest = read_manifest(self.folder)
        if not is_recording(self.folder):  # the one test: datasets, sources and record ask it too
            has = f"a {MANIFEST} that cannot be read" if (folder / MANIFEST).exists() else f"no {MANIFEST}"
            raise UsageError(f"{folder} is not a recording: it has {has} and no <kind>/<run> tables")

    # -- what is in it ----------------------------------------------------------------
    def _dir(self, kind: str) -> Path:
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
        return _bundled_dir(kind) if self.bundled else self.folder / kind

    def kinds(self) -> list[str]:
        """The kinds this recording holds at least one finished run of."""
        return [k for k in KINDS if _table_files(self._dir(k))]

    def runs(self, kind: str) -> list[str]:
        """The finished runs of ``kind`` (file names without suffix), sorted."""
        return [_run_name(p) for p in _table_files(self._dir(kind))]

    def has(self, kind: str, run: str | None = None) -> bool:
        """Whether the recording holds ``kind`` (and, given, that run of it)."""
        runs = self.runs(kind)
        return bool(runs) if run is None else run in runs

    def lacks(self, *needs: str) -> Markdown:
        """The sentence a notebook shows in place of a section whose data is missing.

        Parameters
        ----------
        *needs : str
            Kinds (``"forum"``) or runs (``"allocator/pin-emptied"``) the section reads.

        Returns
        -------
        Markdown
            ``""`` (falsy) when the recording holds every one; else one plain sentence
            naming what it lacks and saying the section is skipped. A sweep recorded with
            ``--device cpu`` (host copies only) counts as lacking.
        """
        gone, host_only = [], False
        for need in needs:
            kind, _, run = need.partition("/")
            if not self.has(kind, run or None):
                gone.append(f"{kind} runs" if not run else f"{kind} run `{run}`")
            elif kind == "sweep" and str((self.manifest or {}).get("device", "cuda")).startswith("cpu"):
                host_only = True
        if gone:
            why = why_lacking([g.split()[0] for g in gone], self.manifest)
            return Markdown(f"This recording has no {' or '.join(gone)}{why}: this section is skipped.")
        if host_only:
            return Markdown(
                "This recording's sweep was made without a CUDA GPU (`--device cpu`: copies within host "
                "memory, no pinned copies to a GPU): this section is skipped."
            )
        return Markdown("")

    def _path(self, kind: str, run: str) -> Path:
        for p in _table_files(self._dir(kind)):
            if _run_name(p) == run:
                return p
        have = ", ".join(self.runs(kind)) or "none"
        raise ValueError(f"the recording {self.name!r} has no {kind} run {run!r} (its {kind} runs: {have})")

    def table(self, kind: str, run: str | None = None) -> pd.DataFrame:
        """One run's table, or every run of ``kind`` together (``attrs['run_names']``).

        ``overlap`` gives the timeline (``datasets.timeline``). Raises ``ValueError`` when
        the recording lacks the kind or the run (check with :meth:`has`).
        """
        key = (kind, run)
        if key in self._cache:
            return self._cache[key].copy()
        if not self.has(kind):
            raise ValueError(
                f"the recording {self.name!r} has no {kind} runs (it has: {', '.join(self.kinds()) or 'none'})"
            )
        where = self._dir(kind) if run is None else self._path(kind, run)
        df = datasets.timeline(str(where)) if kind == "overlap" else datasets.load(where)
        if run is not None and kind != "overlap":
            df.attrs["env"] = datasets.run_env(df)
        elif kind != "overlap":  # every run of the kind: the whole ones, as runs() lists them
            df = _whole_runs(df, set(self.runs(kind)), f"{self.name}/{kind}")
        label = _bundled_dir(kind).name if self.bundled else f"{self.name}/{kind}"
        df.attrs["dataset"] = label if run is None else f"{label}/{run}"
        df.attrs["recording"] = self.name
        self._cache[key] = df
        return df.copy()

    def get(self, kind: str, run: str | None = None) -> pd.DataFrame | None:
        """Like :meth:`table`, but ``None`` where :meth:`lacks` names it (missing, or a
        sweep made with ``--device cpu``)."""
        return None if self.lacks(kind if run is None else f"{kind}/{run}") else self.table(kind, run)

    def env(self, kind: str, run: str) -> dict[str, Any]:
        """The fingerprint (env.json) of one run, ``{}`` if it has none, one that names
        another run (``run_id``: another run's env.json copied beside this table) or one that
        names no run (``tableio.read_env`` decides, as the table is read)."""
        self._path(kind, run)  # a run the recording lacks: ValueError, as before
        return dict(self.table(kind, run).attrs.get("env") or {})  # cached; its reading warned

    def folder_env(self) -> dict[str, Any]:
        """The recording's own env.json (``h2dlab record`` writes it as it starts), ``{}``
        where it has none (recordings made before it was written, the v1 folders)."""
        return read_folder_env(datasets.DATA_DIR / BUNDLED if self.bundled else self.folder) or {}

    def machine(self) -> dict[str, Any]:
        """The fingerprint of the machine the recording was made on: its first run's
        env.json, else the recording's own (:meth:`folder_env`)."""
        for kind in self.kinds():
            for run in self.runs(kind):
                e = self.env(kind, run)
                if e.get("hostname") or e.get("gpu_name"):
                    return e
        return self.folder_env()

    def date(self) -> str:
        """When it was recorded: the day (or days) of its runs, YYYY-MM-DD."""
        made = self.manifest or getattr(self, "_made", None)
        if made and made.get("created") and (self.manifest or set(self.kinds()) <= self._recorded_kinds()):
            return str(made["created"])[:10]
        return day_span(self.env(k, r) for k in self.kinds() for r in self.runs(k)) or "?"

    def _recorded_kinds(self) -> set[str]:
        """Kinds of the bundled data that come from data/h200 (the rest: the v1 folders)."""
        return {k for k in KINDS if _table_files(datasets.DATA_DIR / BUNDLED / k)}

    def banner(self) -> Markdown:
        """Markdown naming the data shown: machine, GPU, date, and replay or live."""
        from h2dlab.escape import md_code, md_text
        from h2dlab.recording.env import describe

        # every field below comes from files anyone can edit, and the page is shared: plain text only
        m = self.machine()
        cores = f", {md_text(m['cpu_count'])} cores" if m.get("cpu_count") else ""
        where = f"{md_text(describe({**m, 'date': None}))} on host {md_code(m.get('hostname', '?'))}{cores}"
        what = "the bundled recording `h200`" if self.bundled else f"the recording {md_code(self.folder)}"
        if self.mode == "live":
            how = "made just now by `h2dlab record --quick`" if self.made_now else "made by `h2dlab record`"
            text = f"**Live**: this machine, {what} ({how}): {where}, recorded {md_text(self.date())}."
        else:
            text = f"**Replay** of {what}: {where}, recorded {md_text(self.date())}."
            text += (
                " Nothing is measured here (this machine has no CUDA GPU);"
                if not _cuda()
                else " Replay was asked for;"
            )
            text += ' `MODE = "live"` on a GPU machine records that machine instead.'
        if self.bundled:
            older = [k for k in self.kinds() if k not in self._recorded_kinds()]
            if older:
                text += f" ({', '.join(older)}: the first session's tables, `data/{_bundled_dir(older[0]).name}`.)"
        return Markdown(text)

    def __repr__(self) -> str:
        return f"<recording {self.name!r} ({self.mode}): {', '.join(self.kinds())}>"


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def recording(
    data: str | os.PathLike[str] = BUNDLED, mode: str = "replay", environ: Mapping[str, str] | None = None
) -> Recorded:
    """The recording a notebook reads.

    Parameters
    ----------
    data
        ``"h200"`` (the bundled H200 recording) or a recording folder; ``H2DLAB_DATA``
        wins when set.
    mode
        ``"replay"`` reads ``data``; ``"live"`` (``"auto"`` on a CUDA machine) reads this
        machine's recording, made once with ``h2dlab record --quick`` when there is none
        (``data`` is used when it is a recording of this machine). ``H2DLAB_MODE`` wins.
    environ
        Where to look for the two variables (default ``os.environ``).

    Returns
    -------
    Recorded
        ``table(kind, run)``, ``has(kind)``, ``env(kind, run)``, ``banner()``.
    """
    env = os.environ if environ is None else environ
    data = env.get("H2DLAB_DATA") or data
    if not isinstance(data, (str, os.PathLike)) or os.fspath(data) == "":
        raise TypeError(f"data must be {BUNDLED!r} or a recording folder, not {data!r}")
    if os.fspath(data) == BUNDLED and not Path(data).exists():
        data = BUNDLED  # Path("h200"): the bundled recording, as the name
    if resolve_mode(mode, env) == "replay":
        return Recorded(data, "replay")
    here = this_machine()
    m = read_manifest(data) if not (isinstance(data, str) and data == BUNDLED) else None
    if m and same_machine(m, here):
        return Recorded(data, "live")
    folder, made = live_recording(machine=here)
    return Recorded(folder, "live", made_now=made)
