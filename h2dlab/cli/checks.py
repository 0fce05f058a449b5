"""The command line's checks of what a run would write and cost, before it starts.

Kept beside ``cli``: ``--out`` is never replaced without ``--force`` (nor taken from a
run still writing it), a plan estimated to run for days is refused with its cost, and
``explain --out`` never overwrites its own source nor lands in a recording's kind folder.
Messages name the flags.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from h2dlab.errors import UsageError
from h2dlab.measure.spec import SweepSpec

__all__ = [
    "GPUS_DEVICE_KINDS",
    "check_fits",
    "check_folder",
    "check_out",
    "check_plan",
    "check_target",
    "not_a_data_folder",
    "not_in_a_kind_folder",
    "not_into_data",
    "not_the_source",
]

#: Device kinds --gpus runs on (tests widen it to run the same code path with CPU processes).
GPUS_DEVICE_KINDS = ("cuda",)


def check_plan(spec: SweepSpec, *, gpus: str | None, max_hours: float) -> None:
    """Refuse ``--gpus`` off CUDA and a plan estimated to take longer than ``--max-hours``."""
    if gpus is not None and spec.device.partition(":")[0] not in GPUS_DEVICE_KINDS:
        raise UsageError(f"--gpus runs one process per GPU and needs --device cuda, not {spec.device}")
    if not max_hours > 0:
        raise UsageError(f"--max-hours must be positive, got {max_hours}")
    hours = spec.estimated_hours()
    if hours > max_hours:
        raise UsageError(
            f"this plan ({spec.planned_rows():,} copies) would take about {hours:,.1f} hours at 1 GB/s, "
            f"more than --max-hours {max_hours:g}: lower --reps or --sizes, or raise --max-hours"
        )


def check_fits(rows: int, out: Path) -> None:
    """Refuse, before measuring, a plan of more ``rows`` than an ``.xlsx`` sheet holds
    (``tableio.XLSX_MAX_ROWS``): it measured for hours, then failed at the save."""
    from h2dlab.recording.tableio import XLSX_MAX_ROWS, suffix_of

    if suffix_of(out) == ".xlsx" and rows > XLSX_MAX_ROWS:
        raise UsageError(
            f"this plan has {rows:,} copies, more than the {XLSX_MAX_ROWS:,} rows an .xlsx sheet holds: "
            "write .csv.gz or .parquet (or lower --reps or --sizes)"
        )


def check_out(path: str, suffixes: tuple[str, ...] | None = None) -> Path:
    """The ``--out`` path, checked: a known table suffix and a folder that takes new files."""
    from h2dlab.recording.datasets import SUFFIXES, suffix_of

    out = Path(path)
    suffixes = suffixes or SUFFIXES
    if not out.name.endswith(suffixes) or suffix_of(out) not in SUFFIXES:
        raise UsageError(f"cannot write {out.name!r}: give --out a name ending in {', '.join(suffixes)}")
    if not out.name[: -len(suffix_of(out))].strip(" ."):  # '--out .csv': $NAME.csv with NAME empty?
        raise UsageError(f"cannot write {out.name!r}: give --out a file name before its suffix, e.g. run.csv")
    if out.name.endswith(".partial.csv"):  # the name of a run in progress: readers skip it
        raise UsageError(
            f"cannot write {out.name!r}: .partial.csv names a run in progress; choose another --out"
        )
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"the folder {str(folder)!r} of --out does not exist: create it first")
    try:  # really try: os.access says yes to root even where writes fail
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError:
        raise UsageError(f"the folder {str(folder)!r} of --out is not writable: choose another") from None
    return out


def check_target(
    out: Path, *, resume: bool = False, force: bool = False, resumable: bool = True, kind: str | None = None
) -> Path:
    """Refuse to replace what is at ``--out``, or the env.json beside it, unless ``--force``
    (or ``--resume``, which continues it); never take the output of a run still going, even
    with ``--force``. ``kind``: the run spec's kind of this command (``"sweep"``, ``"batch"``,
    ``"forum"``), so that a stopped run of another command is not offered a resume here."""
    from h2dlab.recording.partial import check_free, partial_path

    if resume and force:
        raise UsageError("--resume continues the run in --out and --force replaces it: give one of them")
    partial = partial_path(out)
    not_into_data(out)  # a dataset's or a recording kind's folder: never joined unasked
    check_free(out)  # another live run writing this output: refused whatever the flags
    if partial.is_symlink():
        raise UsageError(f"{partial} is a symbolic link: h2dlab never writes a run through a link; remove it")
    if out.is_dir():
        raise UsageError(f"{out} is a folder: give --out a file name")
    from h2dlab.recording.datasets import env_path

    for beside in (env_path(out), partial, env_path(partial)):  # written at the end: refused now
        if beside.is_dir():
            raise UsageError(
                f"{beside} is a folder where the run writes a file: remove it or choose another --out"
            )
    if out.exists() and not os.access(out, os.W_OK):
        raise UsageError(f"{out} is read-only or immutable: it cannot be replaced; choose another --out")
    if resume or force:
        return out
    if partial.exists():
        other = _other_command(out, kind)  # read only where said: a whole table is not read to refuse it
        how = f"continue it with `{other}` and --resume" if other else "continue it with --resume"
        raise UsageError(
            f"{partial} holds the rows of an unfinished run of {out.name}: {how}, or discard them with --force"
        )
    if out.exists() or out.is_symlink():
        refused = _resume_refused(out) if resumable else ""  # only what will work is suggested
        if refused is None and (other := _other_command(out, kind)):
            refused = f" (its run was made by `{other}`: resume it with that command)"
        again = ", continue its run with --resume," if refused is None else ""
        raise UsageError(f"{out} exists: write elsewhere{again} or replace it with --force{refused or ''}")
    fingerprint = env_path(out)  # written beside --out: an orphan of another table is kept too
    if fingerprint.exists() or fingerprint.is_symlink():
        raise UsageError(
            f"{fingerprint} exists (the env.json of --out): write elsewhere or replace it with --force"
        )
    return out


#: The command whose runs have a spec of each kind.
_COMMAND_OF_KIND = {"sweep": "h2dlab measure", "batch": "h2dlab batch", "forum": "h2dlab forum"}


def _other_command(out: Path, kind: str | None) -> str | None:
    """The command that made the stopped or finished run at ``out`` where it is not this
    one (``kind``: this command's spec kind), else None (also where nothing says)."""
    if kind is None:
        return None
    import warnings

    from h2dlab.measure.recorder import existing_rows

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # said when the table is read for the run itself
            _, env = existing_rows(out)
    except (UsageError, OSError):
        return None
    spec = (env or {}).get("spec")  # data: a string, a list or a number says nothing
    theirs = spec.get("kind") if isinstance(spec, dict) else None
    if not isinstance(theirs, str) or theirs == kind:
        return None
    return _COMMAND_OF_KIND.get(theirs, f"the command of a {theirs!r} run")


def _resume_refused(out: Path) -> str | None:
    """Why ``--resume`` of the table at ``out`` would be refused, as a clause to end the
    "exists" line with (``""`` where nothing needs saying), or None where it would continue
    the run: a whole table has nothing to resume; one that cannot be read, or holds what
    h2dlab did not write (a user's column or sheet: ``recorder.refuse_foreign``), is refused."""
    import warnings

    from h2dlab.measure.recorder import existing_rows, foreign_parts
    from h2dlab.recording.folder import finished

    if finished(out):
        return ""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # said when the table is read for the run itself
            done, _ = existing_rows(out)
    except UsageError:
        return " (it cannot be read as a run to continue)"
    if done is None:
        return ""
    parts = foreign_parts(out, done)
    if parts:
        return f" (a resume is refused: it holds {' and '.join(parts)} that h2dlab did not write)"
    return None


def not_the_source(source: str, out: Path) -> None:
    """Refuse an ``explain --out`` that names the table being explained, or any file in
    the folder it reads (a dataset's, a recording's): ``--force`` replaced a source table,
    and a new file there became one more run of it."""
    from h2dlab.recording.sources import where

    src = where(source)
    if src is None:
        return
    if src.exists() and (out.exists() and os.path.samefile(src, out) or out.resolve() == src.resolve()):
        raise UsageError(f"--out {out} is the table explain reads: write the annotated table elsewhere")
    if src.is_dir() and out.resolve().is_relative_to(src.resolve()):
        raise UsageError(
            f"--out {out} is inside {src}, which explain reads: write the annotated table elsewhere"
        )
    not_in_a_kind_folder(out)


def not_in_a_kind_folder(out: Path) -> None:
    """Refuse an annotated table's ``--out`` inside a kind folder of any recording
    (``record_folder.is_kind_folder``) or a bundled dataset's folder: every reader of that
    folder would take it for one more run of that kind (mixed in, or counted twice)."""
    home = _data_home(out.resolve().parent)
    if home is None:
        return
    folder, top, what, run = home
    here = Path.cwd().resolve().is_relative_to(folder)  # then a bare file name lands there too
    raise UsageError(
        f"--out {out} is inside {folder}, {what}: it would be read as one more {run} run; write the "
        f"annotated table outside every kind folder, e.g. --out {top.parent / out.name if here else out.name}"
    )


def _data_home(where: Path) -> tuple[Path, Path, str, str] | None:
    """The kind folder of a recording or the bundled dataset's folder that ``where`` (a
    resolved folder) is or lies in, as (that folder, the folder above which is outside,
    what it is in words, the run kind or dataset name); None when none."""
    from h2dlab.recording.datasets import DATA_DIR, DATASETS
    from h2dlab.recording.folder import is_kind_folder

    for folder in (where, *where.parents):
        if is_kind_folder(folder):
            return (
                folder,
                folder.parent,
                f"the {folder.name} folder of the recording {folder.parent}",
                folder.name,
            )
        named = [n for n, (d, _) in DATASETS.items() if (DATA_DIR / d).resolve() == folder]
        if named:
            return folder, folder, f"the folder of the dataset {named[0]}", named[0]
    return None


def not_into_data(out: Path) -> None:
    """Refuse a measurement's ``--out`` inside a bundled dataset's folder or a kind folder
    of a recording: it silently joined that dataset or kind as one more run. The recorder's
    own experiments (``folder.RECORDING_OUT_VAR`` names their ``--out``) are let through."""
    from h2dlab.recording.folder import RECORDING_OUT_VAR

    given = os.environ.get(RECORDING_OUT_VAR, "")
    if given and Path(given).resolve() == out.resolve():
        return
    home = _data_home(out.resolve().parent)
    if home is None:
        return
    folder, _, what, run = home
    raise UsageError(
        f"--out {out} is inside {folder}, {what}: it would join it as one more {run} run; "
        "write the table outside every dataset and recording folder (h2dlab record adds runs to a recording)"
    )


def not_a_data_folder(
    outdir: str, flag: str = "--outdir", writes: str = "the report's pages and workbook"
) -> None:
    """Refuse a folder option (report's ``--outdir``, survey's ``--out``) that is or lies in a
    bundled dataset's folder or a kind folder of a recording: what is written there (a
    report's workbook, a survey's fleet table) was read as one more table of it."""
    home = _data_home(Path(outdir).resolve())
    if home is None:
        return
    folder, _, what, _ = home
    raise UsageError(
        f"{flag} {outdir} is inside {folder}, {what}: {writes} do not belong among its tables; "
        "give a folder outside every dataset and recording kind"
    )


def check_folder(path: str, flag: str) -> Path:
    """Refuse a folder option (``--outdir``) that is a file, lies under one, or cannot be
    made where it would go; nothing is created here (a later refusal leaves no folder)."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{flag} {path} is a file: give a folder")
    above = next((p for p in (folder, *folder.parents) if p.exists()), Path("."))
    if not above.is_dir():
        raise UsageError(f"{flag} {path}: {above} is a file, so the folder cannot be made: give another")
    try:  # really try: os.access says yes to root even where writes fail
        with tempfile.TemporaryFile(dir=above):
            pass
    except OSError as exc:
        raise UsageError(
            f"{flag} {path}: cannot write in {above} ({exc.strerror}): give another folder"
        ) from None
    return folder
