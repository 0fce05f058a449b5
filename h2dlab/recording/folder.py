"""A recording folder on disk: whether a folder is one (:func:`is_recording`, the one
test every reader uses), its ``recording.json`` (:data:`MANIFEST`), which of its runs are
whole, and where a new one goes.

``h2dlab record`` writes the manifest as it starts and after every experiment (status,
wall time, exit code); ``session`` reads it to find and date recordings. No torch here.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from h2dlab.escape import json_text
from h2dlab.recording.places import runs_dir
from h2dlab.recording.plan import KINDS, PLAN, PLAN_VERSION, experiment_from_dict

__all__ = [
    "ALLOWED_ENV",
    "MANIFEST",
    "RECORDING_OUT_VAR",
    "default_folder",
    "experiment_problem",
    "finished",
    "is_kind_folder",
    "is_recording",
    "kinds_in",
    "load_manifest",
    "new_manifest",
    "not_a_table",
    "plan_options",
    "read_manifest",
    "repeated_output",
    "run_tables",
    "write_manifest",
]

#: The file that makes a folder a recording.
MANIFEST = "recording.json"
#: Set by ``h2dlab record`` for each experiment it runs: the one ``--out`` inside a
#: recording's kind folder that a measuring command may write (its own run of that kind);
#: any other ``--out`` in a kind folder or a bundled dataset's folder is refused.
RECORDING_OUT_VAR = "H2DLAB_RECORDING_OUT"


def run_tables(folder: str | Path) -> list[Path]:
    """The tables in ``folder`` (``tableio.SUFFIXES``), sorted: whole runs and runs stopped
    early, not a ``.partial.csv`` (a run still being written), nor a file of a table's
    suffix whose header names neither ``run_id`` nor ``strategy`` (a report's workbook, a
    user's own sheet: :func:`not_a_table`); ``[]`` for no folder."""
    from h2dlab.recording.tableio import SUFFIXES, suffix_of

    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.iterdir()
        if suffix_of(p) in SUFFIXES
        and not p.name.endswith(".partial.csv")
        and p.is_file()
        and not not_a_table(p)
    )


_HEADERS: dict[tuple[str, int, int], bool] = {}


def not_a_table(path: Path) -> bool:
    """Whether the file at ``path`` is plainly not a measurement table: its header (an
    .xlsx's first sheet's first row) reads and names neither ``run_id`` nor ``strategy``,
    nor carries an overlap timeline's columns (``tableio.TIMELINE_MARK``: reading one names
    it a timeline, which a user who gives its folder must hear). A header that cannot be
    read says nothing (False): reading the table will say why."""
    try:
        st = path.stat()
    except OSError:
        return False
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _HEADERS:
        names = _header(path)
        from h2dlab.recording.tableio import TIMELINE_MARK

        cols = {n.strip() for n in names or ()}
        _HEADERS[key] = bool(names) and not {"run_id", "strategy"} & cols and not TIMELINE_MARK <= cols
    return _HEADERS[key]


def _header(path: Path) -> list[str] | None:
    import csv
    import gzip
    import io

    from h2dlab.recording.tableio import suffix_of

    suf = suffix_of(path)
    try:
        if suf == ".xlsx":
            from openpyxl import load_workbook

            wb = load_workbook(path, read_only=True)
            try:
                row = next(wb.worksheets[0].iter_rows(max_row=1, values_only=True), ())
            finally:
                wb.close()
            return [str(v) for v in row if v is not None]
        if suf == ".parquet":
            import pyarrow.parquet as pq

            return list(pq.read_schema(path).names)
        opener = gzip.open if suf == ".csv.gz" else open
        with opener(path, "rt", encoding="utf-8", newline="") as fh:
            line = fh.readline(65536)
        return [c.lstrip("\ufeff") for c in next(csv.reader(io.StringIO(line)), [])]
    except Exception:  # noqa: BLE001 - any failure: not plainly a non-table
        return None


def kinds_in(folder: str | Path) -> list[str]:
    """The kinds (``record_plan.KINDS``, in that order) of which ``folder`` holds a
    ``<kind>/<run>`` table (:func:`run_tables`: finished or stopped early)."""
    return [k for k in KINDS if run_tables(Path(folder) / k)]


def is_recording(folder: str | Path) -> bool:
    """Whether ``folder`` is a recording: a folder holding a recording.json that reads as a
    JSON object (:func:`read_manifest`; a damaged one reads as none), or a ``<kind>/<run>``
    table of at least one kind (:func:`kinds_in`; a kind folder holding only ``.partial.csv``
    files, or a folder of another name, makes none). ``session``, ``datasets``, ``sources``
    and ``h2dlab record`` all ask this, so a folder gets one answer everywhere."""
    folder = Path(folder)
    return folder.is_dir() and (read_manifest(folder) is not None or bool(kinds_in(folder)))


def is_kind_folder(folder: str | Path) -> bool:
    """Whether ``folder`` is a kind's folder of a recording (``<recording>/<kind>``, which
    may not exist yet): whatever table lies in it is read as one more run of that kind."""
    folder = Path(folder)
    return folder.name in KINDS and is_recording(folder.parent)


#: The most a recording.json may hold: the plan's 22 runs take a few kB, so 16 MiB is ample;
#: a larger one (a planted or sparse file) is not read at all.
MANIFEST_MAX_BYTES = 16 << 20


def _manifest_text(p: Path) -> str | None:
    """The text of the regular file ``p``, or None where it holds more than
    :data:`MANIFEST_MAX_BYTES` (at most that many bytes and one more are read)."""
    with open(p, "rb") as fh:
        data = fh.read(MANIFEST_MAX_BYTES + 1)
    return None if len(data) > MANIFEST_MAX_BYTES else data.decode("utf-8", errors="replace")


def read_manifest(folder: str | Path) -> dict[str, Any] | None:
    """The recording.json of ``folder``, or None if it has none, or one that is unreadable or
    not a JSON object (such a folder reads as one without recording.json)."""
    p = Path(folder) / MANIFEST
    try:
        if not p.is_file():  # a link to /dev/zero (endless) or a FIFO (blocks): not one `record` wrote
            return None
        text = _manifest_text(p)
        if text is None:  # far larger than any recording.json: not one `record` wrote
            return None
        m = json_text(json.loads(text))  # a lone surrogate as text
    except (OSError, ValueError, RecursionError):
        return None
    return m if isinstance(m, dict) else None


#: The environment variables a recording.json may give an experiment: what the plan sets
#: (``PYTORCH_CUDA_ALLOC_CONF``, ``record_plan.REGISTER_CONF``) and the OpenMP settings the
#: kit studies (``env.OPENMP_VARS``). Anything else (``PYTHONPATH``, ``LD_PRELOAD``,
#: ``PYTHONSTARTUP``, ``BASH_ENV`` ...) would let a planted recording.json run code.
ALLOWED_ENV = frozenset(
    {
        "PYTORCH_CUDA_ALLOC_CONF",
        "OMP_NUM_THREADS",
        "OMP_WAIT_POLICY",
        "GOMP_SPINCOUNT",
        "KMP_BLOCKTIME",
        "OMP_PROC_BIND",
    }
)
#: What such a variable's value may hold: settings, never a path or a command.
ENV_VALUE = re.compile(r"[A-Za-z0-9_.:,=+-]{0,200}")
#: Options an experiment may give beside those the plan gives its command (``--device``:
#: what ``record --device`` adds).
EXTRA_OPTIONS = frozenset({"--device"})
_ARG = re.compile(r"[^\x00-\x1f\x7f-\x9f]{1,100000}")


def plan_options() -> dict[str, frozenset[str]]:
    """Per command of the plan (``measure``, ``forum`` ...), the options its experiments
    give (plus :data:`EXTRA_OPTIONS`): all a recording.json may give."""
    from h2dlab.recording.plan import PLAN

    out: dict[str, set[str]] = {}
    for e in PLAN:
        out.setdefault(e.args[0], set(EXTRA_OPTIONS)).update(
            a.split("=", 1)[0] for a in (*e.args[1:], *(e.quick or ())) if a.startswith("-")
        )
    return {k: frozenset(v) for k, v in out.items()}


def experiment_problem(r: Any) -> str | None:
    """What makes the stored experiment ``r`` unsafe or unusable to run, or None: its
    ``args`` must be strings naming a command of the plan and only the options the plan
    gives that command; its ``env`` may set only :data:`ALLOWED_ENV`, to values
    :data:`ENV_VALUE` matches; ``seconds`` is a number."""
    if not isinstance(r, dict):
        return f"a JSON object was expected, not {type(r).__name__}"
    args, env, seconds = r.get("args"), r.get("env") or {}, r.get("seconds", 0.0)
    if not isinstance(args, list) or not args or not all(isinstance(a, str) for a in args):
        return "its args are not a list of strings"
    bad = next((a for a in args if not _ARG.fullmatch(a)), None)
    if bad is not None:
        return f"argument {bad[:40]!r} is empty or holds a control character"
    allowed = plan_options()
    if args[0] not in allowed:
        return f"runs {args[0][:40]!r}, not one of {', '.join(sorted(allowed))}"
    opt = next(
        (a for a in args[1:] if a.startswith("-") and a.split("=", 1)[0] not in allowed[args[0]]), None
    )
    if opt is not None:
        return f"option {opt[:40]!r} is not one the plan gives {args[0]}"
    if not isinstance(env, dict):
        return "its env is not a JSON object"
    for k, v in env.items():
        if k not in ALLOWED_ENV:
            return f"environment variable {str(k)[:40]!r} is not one the kit sets ({', '.join(sorted(ALLOWED_ENV))})"
        if not isinstance(v, str) or not ENV_VALUE.fullmatch(v):
            return f"the value of {k} is not a setting (letters, digits, _ . : , = + - only)"
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < 1e7:
        return f"seconds {seconds!r} is not a number of seconds"
    name, kind, run = r.get("name"), r.get("kind"), r.get("run")
    named = all(isinstance(x, str) and _PART.fullmatch(x) for x in (kind, run))
    if (kind is not None or run is not None) and (
        not named or (isinstance(name, str) and name and name != f"{kind}/{run}")
    ):
        return (
            f"its name {str(name)[:40]!r} is not its kind/run ({str(kind)[:40]!r}, {str(run)[:40]!r}) "
            "in letters, digits, '_', '.' and '-'"
        )
    return None


#: A kind's or a run's name: what names a folder and a file in the recording, and a log line.
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


def _problem(m: Any) -> str | None:
    """What makes ``m`` unusable as a recording.json to resume, or None."""
    if not isinstance(m, dict):
        return f"a JSON object was expected, not {type(m).__name__}"
    device, runs = m.get("device"), m.get("experiments")
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        return f"device {device!r} is not cpu, cuda or cuda:N"
    if not isinstance(runs, list) or not runs:
        return "no list of experiments"
    commands = {e.args[0] for e in PLAN}  # what `h2dlab record` ever runs
    for i, r in enumerate(runs):
        why = experiment_problem(r)  # first: the types every later step relies on
        if why:
            return f"experiment {i}: {why}"
        try:
            e = experiment_from_dict(r)
            float(r.get("seconds", 0.0))
            dict(r.get("env") or {})
        except (ValueError, TypeError, AttributeError) as exc:
            return f"experiment {i}: {exc}"
        if not e.args or e.args[0] not in commands:
            return f"experiment {i} runs {' '.join(e.args[:1]) or 'nothing'!r}, not one of {', '.join(sorted(commands))}"
        if not isinstance(r.get("status"), str):
            return f"experiment {i} has no status"
        if not isinstance(r.get("name"), str):
            return f"experiment {i} has no name"
    return repeated_output(runs)


def repeated_output(runs: list[dict[str, Any]]) -> str | None:
    """Which experiment of ``runs`` writes the same ``<kind>/<run>`` table as an earlier one,
    in words, or None: the second would be marked done with the first's table, unrun."""
    seen: dict[tuple[str, str], int] = {}
    for i, r in enumerate(runs):
        key = (str(r.get("kind")), str(r.get("run")))
        if key in seen:
            return f"experiments {seen[key]} and {i} both write {key[0]}/{key[1]}"
        seen[key] = i
    return None


def load_manifest(folder: str | Path) -> dict[str, Any]:
    """The recording.json of ``folder``, checked so that the recording can be resumed.

    Raises
    ------
    UsageError
        When ``folder`` is not a folder, holds no recording.json, or one that is not valid
        JSON or lacks what a resume needs (the device, each experiment's kind, run, command
        and status); the message names the file and the problem.
    """
    from h2dlab.errors import UsageError

    folder = Path(folder)
    if not folder.is_dir():
        what = "is a file, not a recording folder" if folder.exists() else "does not exist"
        raise UsageError(f"{folder} {what}: give the folder that `h2dlab record` wrote")
    p = folder / MANIFEST
    if not p.exists():
        raise UsageError(f"{folder} holds no {MANIFEST}: not a recording that `h2dlab record` started")
    if not p.is_file():  # a link to /dev/zero (endless) or a FIFO (blocks)
        raise UsageError(f"{p} is not a regular file: it cannot be resumed; record into a new folder")
    try:
        text = _manifest_text(p)
        if text is None:
            raise UsageError(
                f"{p} holds more than {MANIFEST_MAX_BYTES >> 20} MiB, far more than any recording.json: "
                "it cannot be resumed; record into a new folder"
            )
        m = json_text(json.loads(text))  # a lone surrogate as text
    except (OSError, ValueError, RecursionError) as exc:
        raise UsageError(
            f"{p} cannot be read ({exc}): it cannot be resumed; record into a new folder"
        ) from None
    problem = _problem(m)
    if problem:
        raise UsageError(f"{p} is damaged ({problem}): it cannot be resumed; record into a new folder")
    return m


def write_manifest(folder: str | Path, manifest: Mapping[str, Any]) -> Path:
    """Write recording.json atomically (a reader never sees half a file)."""
    from h2dlab.recording.tableio import atomic_write

    p = Path(folder) / MANIFEST
    text = json.dumps(manifest, indent=2, default=str) + "\n"
    atomic_write(p, lambda q: Path(q).write_text(text))
    return p


def default_folder(gpu_name: str | None, root: str | Path | None = None) -> Path:
    """A new recording's folder: ``<root>/<host>-<gpu>-<date>`` (``-2``, ``-3`` ... when taken);
    ``root`` defaults to ``places.runs_dir()``."""
    from h2dlab.errors import UsageError

    if root is None:  # the runs folder: refused here when no folder can be made there
        root = runs_dir()
        above = next((p for p in (root, *root.parents) if p.exists()), None)
        if above is not None and not above.is_dir():
            chosen = os.environ.get("H2DLAB_RUNS", "").strip()
            where = (
                f"H2DLAB_RUNS={chosen} names where recordings go" if chosen else f"recordings go in {root}"
            )
            raise UsageError(f"{where}, but {above} is a file: point it at a folder (or give record --out)")
    root = Path(root)
    slug = re.sub(r"[^a-z0-9]+", "-", f"{platform.node()}-{gpu_name or 'cpu'}".lower()).strip("-")
    base = root / f"{slug}-{_dt.date.today().isoformat()}"
    folder, k = base, 1
    while folder.exists():
        k += 1
        folder = base.with_name(f"{base.name}-{k}")
    return folder


def finished(table: str | Path) -> bool:
    """Whether the table at ``table`` is a whole run: it exists and its env.json does not
    say it was stopped early (``measured_rows`` < ``planned_rows``, as a stopped run keeps).
    An env.json that cannot be read vouches for nothing: False."""
    from h2dlab.recording.schema import SchemaError
    from h2dlab.recording.tableio import read_env

    p = Path(table)
    if not p.exists():
        return False
    try:
        env = read_env(p) or {}
    except SchemaError:
        return False
    measured, planned = env.get("measured_rows"), env.get("planned_rows")
    if measured is None or planned is None:
        return True
    try:
        return int(measured) >= int(planned)
    except (TypeError, ValueError, OverflowError):  # "abc", [], inf: vouches for nothing
        return False


def new_manifest(
    runs: list[dict[str, Any]], *, quick: bool, device: str, gpus: int, gpu_name: str | None, command: str
) -> dict[str, Any]:
    """A new recording's recording.json: the machine, the date and every run to make
    (each as :meth:`Experiment.to_dict` plus ``name`` and ``status``)."""
    from h2dlab import __version__

    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return {
        "format": 1,
        "plan_version": PLAN_VERSION,
        "quick": bool(quick),
        "device": device,
        "hostname": platform.node(),
        "gpu_name": gpu_name,
        "gpu_count": gpus,
        "created": now,
        "updated": now,
        "h2dlab_version": __version__,
        "command": command,
        "status": "incomplete",
        "experiments": runs,
    }
