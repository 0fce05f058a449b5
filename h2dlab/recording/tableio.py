"""Measurement tables on disk: save/read (.csv, .csv.gz, .parquet, .xlsx) and the
fingerprint (env.json) beside each.

A run is a table plus its fingerprint, ``<file name>.env.json`` beside it (``r.csv.gz``
-> ``r.csv.gz.env.json``), so tables of one stem in different formats never share one.
Tables written before schema version 2 have ``<stem>.env.json`` (``r.env.json``);
readers still find it.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import tempfile
import warnings
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from h2dlab import SCHEMA_VERSION
from h2dlab.escape import json_text, terminal_text
from h2dlab.interrupts import terminate_raises
from h2dlab.recording.schema import COLUMNS, OPTIONAL_COLUMNS, SchemaError, validate

__all__ = [
    "MAX_TABLE_BYTES",
    "MAX_TABLE_ROWS",
    "SUFFIXES",
    "TIMELINE_MARK",
    "XLSX_MAX_ROWS",
    "atomic_write",
    "check_unpacked_size",
    "env_path",
    "max_table_bytes",
    "env_max_bytes",
    "read_env_bytes",
    "ENV_MAX_BYTES",
    "read",
    "read_env",
    "remove_stale_temporaries",
    "safe_excel",
    "save",
    "save_for_spreadsheet",
    "suffix_of",
    "write_env",
]

SUFFIXES = (".csv", ".csv.gz", ".parquet", ".xlsx")
#: Columns whose presence (without ``strategy``) marks an overlap timeline, not a measurement
#: table: reading one says so (``read``), and a folder never passes over one (``folder.not_a_table``).
TIMELINE_MARK = frozenset({"scenario", "op", "start_ms", "end_ms"})
#: The most bytes a table may hold once decompressed (CSV text, or the xlsx's unzipped parts):
#: 1 GiB, about 4 million rows of the kit's CSV, which pandas holds in a few GB. A 2 MB
#: ``.csv.gz`` or ``.xlsx`` can unpack to far more (a decompression bomb): refused before it
#: is read. ``H2DLAB_MAX_TABLE_BYTES`` raises it for a machine with the memory.
MAX_TABLE_BYTES = 2**30
#: The most rows a parquet table may declare (its metadata, read before its data): the
#: longest plan the kit measures (``spec.MAX_PLAN_ROWS``).
MAX_TABLE_ROWS = 10_000_000
#: The data rows an .xlsx sheet holds (1,048,576 rows, one of them the header).
XLSX_MAX_ROWS = 1_048_575


#: The most an env.json may hold, in bytes (1 MiB): a run's fingerprint is a few kB (the
#: bundled recording's largest, 6 kB). One larger is not read whole: not used, with a warning.
ENV_MAX_BYTES = 1 << 20
#: More an env.json may hold per run id of its table (16 KiB): a survey's keeps each rank's
#: facts (1-3 kB a rank), so a fleet of 1000 GPUs may hold a few MB.
ENV_BYTES_PER_RUN = 16 << 10
#: The most any env.json may hold, whatever its table's run ids (64 MiB: a fleet of about
#: 4,000 GPUs): a planted table of many run ids does not let a planted env.json fill memory.
ENV_CAP_BYTES = 64 << 20


def env_max_bytes(runs: int = 0) -> int:
    """How many bytes the env.json of a table of ``runs`` run ids may hold:
    :data:`ENV_MAX_BYTES` plus :data:`ENV_BYTES_PER_RUN` per run, at most :data:`ENV_CAP_BYTES`."""
    return min(ENV_CAP_BYTES, ENV_MAX_BYTES + ENV_BYTES_PER_RUN * max(0, runs))


def read_env_bytes(p: Path, limit: int) -> bytes | None:
    """The bytes of the env.json ``p`` (a regular file, or ``OSError``), or None where it holds
    more than ``limit``: at most ``limit + 1`` bytes are read."""
    if not p.is_file():  # a device or a pipe (a planted link to /dev/zero) never ends
        raise OSError(f"{p.name} is not a regular file")
    with open(p, "rb") as fh:
        data = fh.read(limit + 1)
    return None if len(data) > limit else data


def max_table_bytes() -> int:
    """:data:`MAX_TABLE_BYTES`, or ``H2DLAB_MAX_TABLE_BYTES`` where that is a whole number."""
    text = os.environ.get("H2DLAB_MAX_TABLE_BYTES", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else MAX_TABLE_BYTES


def _too_big(path: Path, what: str, limit: int) -> SchemaError:
    return SchemaError(
        f"{path}: {what} over the {limit / 2**30:.3g} GiB a table may unpack to (a decompression bomb, "
        "or a table too large for this machine): split it, or raise H2DLAB_MAX_TABLE_BYTES"
    )


#: How much of a .csv.gz is unpacked at a time while its size is counted.
_CHUNK_BYTES = 256 * 2**10


def _gz_unpacked_bytes(path: Path, limit: int) -> int:
    """The bytes the gzip file at ``path`` unpacks to, counted one chunk at a time (nothing
    kept), stopping once past ``limit``: what a bomb would unpack to is never held."""
    n = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK_BYTES):
            n += len(chunk)
            if n > limit:
                break
    return n


def check_unpacked_size(path: str | Path) -> None:
    """Refuse (``SchemaError``, one line) a table or timeline at ``path`` that would unpack
    past :func:`max_table_bytes`, before any of it is read into memory: a .csv by its size on
    disk, a .csv.gz by unpacking it chunk by chunk and counting, an .xlsx by its zip parts'
    declared sizes (each part reads no further), a .parquet by its metadata."""
    path = Path(path)
    try:
        _check_size(path, suffix_of(path))
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SchemaError(f"{path}: not a readable {suffix_of(path)} table ({first})") from None


def _check_size(path: Path, suf: str) -> None:
    """Refuse a table that would unpack past :func:`max_table_bytes`, before reading it."""
    limit = max_table_bytes()
    if suf == ".csv" and path.stat().st_size > limit:
        raise _too_big(path, f"{path.stat().st_size:,} bytes of text is", limit)
    if suf == ".csv.gz" and _gz_unpacked_bytes(path, limit) > limit:
        raise _too_big(path, "its text unpacks to more than that,", limit)
    if suf == ".xlsx":
        import zipfile

        try:
            with zipfile.ZipFile(path) as z:  # each part reads no more than it declares
                unpacked = sum(i.file_size for i in z.infolist())
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise SchemaError(f"{path}: not a readable .xlsx table ({exc})") from None
        if unpacked > limit:
            raise _too_big(path, f"its parts unpack to {unpacked:,} bytes,", limit)
    if suf == ".parquet":
        try:
            import pyarrow.parquet as pq

            meta = pq.ParquetFile(path).metadata
        except ImportError:
            return
        except Exception as exc:  # noqa: BLE001 - a damaged footer is a bad file, said in one line
            raise SchemaError(f"{path}: not a readable .parquet table ({str(exc).splitlines()[0]})") from None
        if meta.num_rows > MAX_TABLE_ROWS:
            raise SchemaError(
                f"{path}: {meta.num_rows:,} rows, over the {MAX_TABLE_ROWS:,} a table may hold: split it"
            )
        unpacked = _parquet_text_bytes(path)
        if unpacked > limit:
            raise _too_big(path, f"its text columns unpack to {unpacked:,} bytes,", limit)


def _parquet_text_bytes(path: Path) -> int:
    """The bytes a .parquet table's text columns unpack to, counted without unpacking them:
    read as dictionaries (one long text referenced by every row stays one text here), each
    row's length added up. A small file of dictionary-coded text can unpack to terabytes."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
        text = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
        if not text:
            return 0
        table = pq.read_table(path, columns=text, read_dictionary=text)
    except Exception as exc:  # noqa: BLE001 - a damaged file is a bad file, said in one line
        raise SchemaError(f"{path}: not a readable .parquet table ({str(exc).splitlines()[0]})") from None
    total = 0
    for name in text:
        for chunk in table[name].chunks:
            if isinstance(chunk, pa.DictionaryArray):
                lengths = pc.binary_length(chunk.dictionary)
                total += pc.sum(pc.take(lengths, chunk.indices)).as_py() or 0
            else:
                total += chunk.nbytes
    return total


# Names stay text when read: a run id of digits only ("0123...") must not become a number.
_TEXT = {c: str for c, kind in COLUMNS.items() if kind == "str"}


def suffix_of(path: str | Path) -> str:
    """The table extension of ``path`` (``.csv.gz`` counts as one), lower-case."""
    name = str(path).lower()
    for s in sorted(SUFFIXES, key=len, reverse=True):
        if name.endswith(s):
            return s
    return Path(name).suffix


def env_path(path: str | Path) -> Path:
    """Where writers put the fingerprint of the table at ``path``: ``<name>.env.json``.

    The whole file name is kept, so ``r.csv.gz``, ``r.parquet`` and ``r.xlsx`` each have
    their own (``r.csv.gz.env.json``, ...).
    """
    p = Path(path)
    return p.with_name(p.name + ".env.json")


def _legacy_env_path(path: Path) -> Path:
    """``<stem>.env.json``: where tables written before schema version 2 kept it."""
    suf = suffix_of(path)
    stem = path.name[: -len(suf)] if suf and path.name.lower().endswith(suf) else path.stem
    return path.with_name(stem + ".env.json")


def _tmp_prefix(path: Path) -> str:
    """``.<name>.tmp-``: the temporaries of ``path``, recognisable as its own."""
    return f".{path.name}.tmp-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(path: str | Path) -> list[Path]:
    """Remove the temporaries an earlier write of ``path`` left behind (a process killed
    mid-write): ``.<name>.tmp-<pid>-*`` of processes no longer running. Returns them."""
    path = Path(path)
    gone = []
    for tmp in path.parent.glob(_tmp_prefix(path).replace("[", "[[]") + "*"):
        pid = tmp.name[len(_tmp_prefix(path)) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)
            gone.append(tmp)
    return gone


def atomic_write(path: Path, write: Callable[[str], object]) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it onto
    ``path``: readers see the old file or the whole new one, never a half file.

    The temporary is ``.<name>.tmp-<pid>-...``; it is removed if the write fails or is
    interrupted (SIGINT, SIGTERM), and one left by a killed process is removed by the
    next write of the same ``path``. A failure to write names ``path``, not the temporary.
    """
    path = Path(path)
    remove_stale_temporaries(path)
    with terminate_raises():
        try:
            fd, tmp = tempfile.mkstemp(
                prefix=f"{_tmp_prefix(path)}{os.getpid()}-", suffix=suffix_of(path), dir=path.parent
            )
        except OSError as exc:
            raise OSError(exc.errno, f"cannot write {path}: {exc.strerror}") from None
        try:
            os.close(fd)
            write(tmp)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; a table is not a secret
            os.replace(tmp, path)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            if exc.filename == tmp or exc.filename2 == tmp or tmp in str(exc):
                raise OSError(exc.errno, f"cannot write {path}: {exc.strerror}") from None
            raise
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def save(df: pd.DataFrame, path: str | Path, env: dict[str, Any] | None = None) -> Path:
    """Write a table (write to a temporary file, then rename: never a half file).

    The format follows the extension: .csv, .csv.gz, .parquet or .xlsx. Every
    ``COLUMNS`` column is written (the current schema version). With ``env``, the fingerprint is written
    beside it as ``env_path(path)`` (``<name>.env.json``).
    """
    path = Path(path)
    suf = suffix_of(path)
    if suf not in SUFFIXES:
        raise SchemaError(f"cannot write {path.name}: use one of {', '.join(SUFFIXES)}")
    if suf == ".xlsx" and len(df) > XLSX_MAX_ROWS:
        raise SchemaError(
            f"cannot write {path.name}: {len(df):,} rows, more than the {XLSX_MAX_ROWS:,} an .xlsx sheet "
            "holds; write .csv.gz or .parquet"
        )
    df = validate(df, source=str(path))
    cols = list(COLUMNS) + [c for c in OPTIONAL_COLUMNS if c in df.columns]
    df = df[cols]
    if suf in (".csv", ".csv.gz"):
        writer = lambda p: df.to_csv(p, index=False, compression="gzip" if suf == ".csv.gz" else None)  # noqa: E731
    elif suf == ".parquet":
        writer = lambda p: df.to_parquet(p, index=False)  # noqa: E731
    else:
        writer = lambda p: safe_excel(df, p)  # noqa: E731
    try:
        atomic_write(path, writer)
    except ImportError as exc:
        raise SchemaError(f"cannot write {suf} here ({exc}); install h2dlab[notebooks] or use .csv") from None
    if env is not None:
        write_env(env, env_path(path))
    return path


def save_for_spreadsheet(df: pd.DataFrame, path: str | Path, env: dict[str, Any] | None = None) -> Path:
    """Write a derived table for people to open (an annotated table, a survey's fleet table):
    every column of ``df`` as it is, no schema check, and no text a spreadsheet would run as
    a formula.

    The format follows the extension: .parquet as it is (it has cell types), .xlsx through
    :func:`safe_excel`, anything else CSV (gzip-compressed for .csv.gz) with
    ``escape.defuse_frame``'s quote before formula-like text. Each file is written atomically;
    with ``env``, the fingerprint is written beside it (``env_path(path)``). The kit's own
    measurement tables go through :func:`save`, whose CSV keeps every text as it is, so
    they read back exactly.

    Parameters
    ----------
    df
        The table.
    path
        Where to write it.
    env
        The env.json to write beside it, or None.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    from h2dlab.escape import defuse_frame

    path = Path(path)
    suf = suffix_of(path)
    if suf == ".parquet":
        writer = lambda p: df.to_parquet(p, index=False)  # noqa: E731
    elif suf == ".xlsx":
        writer = lambda p: safe_excel(df, p)  # noqa: E731
    else:
        safe = defuse_frame(df)
        writer = lambda p: safe.to_csv(p, index=False, compression="gzip" if suf == ".csv.gz" else None)  # noqa: E731
    atomic_write(path, writer)
    if env is not None:
        write_env(env, env_path(path))
    return path


def write_env(env: dict[str, Any], path: str | Path) -> None:
    """Write a fingerprint as JSON, atomically (see ``atomic_write``).

    ``path`` is where it goes: for a table, ``env_path(table)``.
    """
    text = json.dumps(env, indent=2, sort_keys=True, default=str) + "\n"
    atomic_write(Path(path), lambda p: Path(p).write_text(text))


def read_env(path: str | Path, run_ids: Iterable[str] | None = None) -> dict[str, Any] | None:
    """The fingerprint of the table at ``path``, or None if it has none.

    ``env_path(path)`` first, then the ``<stem>.env.json`` of tables written before
    schema version 2. Given the table's ``run_ids``, a fingerprint that names another run
    (its ``run_id`` is none of them) is not returned: it is another run's (copied beside
    this table, or an old-style one of a sibling table of the same stem, ``r.parquet``
    beside ``r.csv.gz``), and would label this table with another machine. Such an
    env.json beside the table is said in a warning. One without a ``run_id`` names no run
    and is not returned either (a warning says so), unless the table has no run ids (a
    legacy table, every ``run_id`` empty) or it is a survey's, whose ``survey.survey_id``
    begins every run id (``<survey>-rNNNNN``, as ``survey.fleet`` names the ranks' runs).
    One over :func:`env_max_bytes` (1 MiB, and 16 KiB more per run id) is not read whole
    and not returned either (a warning says so).
    """
    path = Path(path)
    p = env_path(path)
    legacy = not p.exists()
    if legacy:
        p = _legacy_env_path(path)
        if not p.exists():
            return None
    run_ids = list(run_ids) if run_ids is not None else None
    limit = env_max_bytes(len({str(r) for r in run_ids} - {""}) if run_ids is not None else 0)
    try:
        data = read_env_bytes(p, limit)
        if data is None:  # a fingerprint is a few kB: this is no run's, and would fill memory
            warnings.warn(
                terminal_text(
                    f"{p.name} is over the {limit:,} bytes an env.json may hold, so it is not used for "
                    f"{path.name}: this table has no env.json"
                ),
                stacklevel=2,
            )
            return None
        env = json_text(json.loads(data))  # a lone surrogate ("\\ud800") as text
    except (OSError, ValueError, RecursionError) as exc:  # nested past the parser's depth
        raise SchemaError(f"{p}: not a readable env.json ({exc})") from None
    if not isinstance(env, dict):
        raise SchemaError(f"{p}: not a readable env.json (a JSON object was expected)")
    if run_ids is not None and env.get("run_id") is None:
        ids = {str(r) for r in run_ids} - {""}
        if ids and not _survey_of(env, ids):  # a table without run ids (legacy) keeps its env.json
            warnings.warn(
                terminal_text(
                    f"{p.name} names no run (it has no run_id), so it is not used for {path.name}: "
                    "this table has no env.json"
                ),
                stacklevel=2,
            )
            return None
    if run_ids is not None and env.get("run_id") is not None:
        ids = {str(r) for r in run_ids}
        if str(env["run_id"]) not in ids:
            if not legacy:  # a sibling's old-style env.json is not this table's: nothing to say
                shown = ", ".join(sorted(ids)[:3]) + (" ..." if len(ids) > 3 else "")
                warnings.warn(
                    terminal_text(
                        f"{p.name} is the env.json of run {str(env['run_id'])[:40]!r}, not of {path.name} "
                        f"(run {shown}): it is not used, so this table has no env.json"
                    ),
                    stacklevel=2,
                )
            return None
    return env


def _survey_of(env: dict[str, Any], ids: set[str]) -> bool:
    """Whether ``env`` is the env.json of the survey whose ranks' runs are ``ids``."""
    survey = env.get("survey")
    sid = survey.get("survey_id") if isinstance(survey, dict) else None
    return isinstance(sid, str) and bool(sid) and all(i.startswith(f"{sid}-r") for i in ids)


def read(path: str | Path) -> pd.DataFrame:
    """Read and validate a table; its fingerprint (if any) is in ``df.attrs['env']``.

    A CSV whose last line was cut off mid-write (an interrupted run) is read up to
    the last whole line.

    Tables of every schema version up to ``SCHEMA_VERSION`` are read; columns an
    older version lacks take ``DEFAULTS``.

    Raises
    ------
    SchemaError
        If the file is missing, unreadable, not a measurement table, or written by a
        newer schema version.
    """
    path = Path(path)
    if not path.exists():
        raise SchemaError(f"{path}: no such file")
    if not path.is_file():  # a device or a pipe (a planted link to /dev/zero) never ends
        raise SchemaError(f"{path}: not a regular file, so not a table")
    suf = suffix_of(path)
    check_unpacked_size(path)
    try:
        if suf in (".csv", ".csv.gz"):
            df = pd.read_csv(io.StringIO(_whole_lines(path, suf)), keep_default_na=True, dtype=_TEXT)
        elif suf == ".parquet":
            df = pd.read_parquet(path)
        elif suf == ".xlsx":
            df = pd.read_excel(path, engine="openpyxl", dtype=_TEXT)
        else:
            raise SchemaError(f"{path}: unknown extension; h2dlab reads {', '.join(SUFFIXES)}")
    except SchemaError:
        raise
    except ImportError as exc:
        raise SchemaError(f"{path}: cannot read {suf} here ({exc}); install h2dlab[notebooks]") from None
    except Exception as exc:  # noqa: BLE001 - any parser failure is a bad file, said in one line
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SchemaError(f"{path}: not a readable {suf} table ({first})") from None
    if suf == ".xlsx":
        _refuse_repeats(path, [str(c) for c in df.columns], renamed=True)
    if TIMELINE_MARK <= set(df.columns) and "strategy" not in df.columns:
        raise SchemaError(f"{path} is an overlap timeline, not a measurement table: read it with timeline()")
    df = validate(df, source=str(path))
    env = read_env(path, run_ids=df["run_id"].unique())
    version = SCHEMA_VERSION if env is None else env.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or isinstance(version, bool):  # "4", true, 4.0: not a newer kit's
        raise SchemaError(
            f"{path}: the schema_version {version!r} in its env.json is not a whole number, so the "
            "env.json is damaged: restore it from a copy, or re-run the measurement"
        )
    if not 1 <= version <= SCHEMA_VERSION:
        raise SchemaError(
            f"{path}: written with table schema version {version!r}, this h2dlab reads "
            f"versions 1 to {SCHEMA_VERSION}; upgrade h2dlab or re-run the measurement"
        )
    df.attrs["env"] = env
    return df


def _whole_lines(path: Path, suf: str) -> str:
    """The CSV text up to its last newline: a row cut off mid-write is dropped."""
    if suf == ".csv.gz":
        limit = max_table_bytes()  # counted before (check_unpacked_size); the file may have changed since
        with gzip.open(path, "rb") as fh:
            data = fh.read(limit + 1)  # no further: a small file may unpack to any size
        if len(data) > limit:
            del data
            raise _too_big(path, "its text unpacks to more than that,", limit)
        text = data.decode("utf-8")  # as written, whatever the locale; newlines as they are
        del data
    else:
        limit = max_table_bytes()
        with open(path, newline="", encoding="utf-8") as fh:
            text = fh.read(limit + 1)  # the size checked before may have grown since
        if len(text) > limit:
            del text
            raise _too_big(path, "its text is more than that,", limit)
    if text and not text.endswith("\n") and "\n" in text:  # one line alone is a header: kept
        cut = text[text.rfind("\n") + 1 :]
        text = text[: text.rfind("\n") + 1]
        if cut.strip():
            warnings.warn(
                terminal_text(
                    f"{path}: its last line ({len(cut)} characters) has no line end, so it was taken for a "
                    "row cut off mid-write and left out; if the file is whole, end it with a newline"
                ),
                stacklevel=3,
            )
    header = [c.strip().lstrip("\ufeff") for c in next(csv.reader(io.StringIO(text)), [])]
    _refuse_repeats(path, header)
    return text


def _refuse_repeats(path: Path, names: list[str], *, renamed: bool = False) -> None:
    """A SchemaError when ``names`` (a header; with ``renamed``, the columns pandas made of one,
    which calls a repeated ``x`` ``x.1``) repeat a name."""
    twice = sorted({c for c in names if names.count(c) > 1})
    mangled = sorted({c for c in COLUMNS if f"{c}.1" in names}) if renamed else []
    if twice or mangled:
        shown = ", ".join(c if c else "an empty name" for c in twice + mangled)
        raise SchemaError(f"{path}: the header names {shown} more than once: keep one of each")


def safe_excel(df: Any, path: Any, sheet_name: str = "Sheet1", **kw: Any) -> None:
    """``df.to_excel(path, index=False)`` (openpyxl) with ``escape.defuse_sheet`` applied."""
    from h2dlab.escape import defuse_sheet, sheet_frame, text_columns

    df = sheet_frame(df)  # a control character from a file would stop openpyxl
    if len(df) > XLSX_MAX_ROWS:  # openpyxl would fail at the end, after minutes of writing
        raise SchemaError(
            f"cannot write {len(df):,} rows to an .xlsx sheet (it holds {XLSX_MAX_ROWS:,}): write .csv.gz or .parquet"
        )
    with pd.ExcelWriter(path, engine="openpyxl") as xw:
        df.to_excel(xw, sheet_name=sheet_name, index=False, **kw)
        defuse_sheet(xw.sheets[sheet_name], text_columns(df))
