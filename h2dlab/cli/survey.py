"""``h2dlab survey``: every rank measures its GPU; rank 0 writes the fleet table and the
verdicts. Run it under the launcher you have (torchrun, ``srun``, ``mpirun``) or alone.

Exit codes: 0 no GPU flagged, 3 some GPU flagged (or a rank failed or gave no result),
1 this machine cannot survey (one process, no CUDA), 2 a usage mistake. Ranks other
than 0 exit 0 once their files are written: their failures are rows, not exit codes. A
process given a rank another live process of the survey claimed (one ``RANK`` twice)
measures nothing and says so; rank 0 marks that rank's rows ``error``, naming both.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from h2dlab.errors import Unavailable, UsageError

if TYPE_CHECKING:  # pandas is imported where used: `h2dlab --help` stays instant
    import pandas as pd

__all__ = ["EXIT_FLAGGED", "add_parser", "finish", "run"]

EXIT_FLAGGED = 3


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``survey`` subcommand to the ``h2dlab`` parser's subparsers."""
    from h2dlab.cli.common import number_arg, sizes_arg, whole_arg

    s = subparsers.add_parser(
        "survey",
        help="every GPU of every node (under torchrun, srun or mpirun): the fleet table, the sick GPUs and why",
        description="Run once per GPU under your launcher, e.g. torchrun --nnodes=N --nproc-per-node=8 -m h2dlab "
        "survey --out DIR (DIR shared by every node). Rank 0 writes DIR/fleet.csv.gz. Exit codes: 0 no GPU "
        "flagged, 3 some GPU flagged or without a result, 1 this machine cannot survey, 2 a usage mistake.",
    )
    s.add_argument("--out", required=True, help="the survey's folder, shared by every node")
    s.add_argument("--device", default="cuda", help="cuda (each rank its local GPU), cuda:N, or cpu [cuda]")
    s.add_argument("--baseline", default=None, help="a previous survey's fleet.csv.gz: flag regressions")
    s.add_argument("--report", action="store_true", help="also write fleet.html beside the table")
    s.add_argument(
        "--deadline",
        type=number_arg,
        default=300.0,
        metavar="S",
        help="rank 0 waits this many seconds from its start for the others' results [300]",
    )
    s.add_argument(
        "--sizes", type=sizes_arg, default=None, help="replace the planned sizes (e.g. 1KiB,64MiB)"
    )
    s.add_argument("--reps", type=whole_arg(2), default=10, help="timed copies per cell [10]")
    return s


def _survey_id(job_id: str) -> str:
    job = re.sub(r"[^A-Za-z0-9_.-]", "_", job_id)[:40]
    return (
        f"survey-{job}" if job else "survey-" + _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    )


def _read_baseline(path: str):
    from h2dlab.recording import datasets
    from h2dlab.survey.verdicts import gpu_table

    try:
        table = datasets.read(path)
    except datasets.SchemaError as exc:
        raise UsageError(f"--baseline: {exc}") from None
    if "rank" not in table.columns or "host" not in table.columns:
        raise UsageError(
            f"--baseline {path} is a measurement table but not a survey's (no host/rank columns)"
        )
    for col in ("rank", "local_rank"):  # checked now: after the survey they would stop rank 0 unwritten
        if col not in table.columns:
            continue
        import pandas as pd

        given = table[col].dropna()
        number = pd.to_numeric(given, errors="coerce")
        bad = given[number.isna() | (number != number.round()) | (number < 0)]
        if len(bad):
            raise UsageError(
                f"--baseline {path}: its {col} column holds {str(bad.iloc[0])[:40]!r}, not a whole number: "
                "not a survey's fleet table"
            )
        table[col] = number.reindex(table.index).astype("Int64")
    return gpu_table(table)


def finish(
    folder: Path,
    infos: dict[int, dict[str, Any] | None],
    specs: dict,
    survey_id: str,
    deadline_s: float | None,
    *,
    baseline: pd.DataFrame | None = None,
    report: bool = False,
    argv: list[str] | None = None,
    gpu: bool = False,
    since: float | None = None,
    job_id: str = "",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write ``fleet.csv.gz`` (and its env.json; ``fleet.html`` with ``report``) from the
    ranks' files; return the fleet table and the judged GPU table."""
    from h2dlab.recording import tableio
    from h2dlab.recording.env import collect_env
    from h2dlab.recording.schema import validate
    from h2dlab.survey.fleet import FLEET_NAME, RANK_COLUMNS, assemble
    from h2dlab.survey.show import report_html
    from h2dlab.survey.verdicts import gpu_table, judge

    fleet = assemble(folder, infos, specs, survey_id, deadline_s, since=since, job_id=job_id)
    duplicates = fleet.attrs.get("duplicates") or {}
    gpus = judge(gpu_table(fleet), baseline)
    verdict = gpus.set_index("rank")[["flag", "reason"]]
    fleet["flag"] = fleet["rank"].map(verdict["flag"])
    fleet["reason"] = fleet["rank"].map(verdict["reason"])
    env = collect_env(argv=argv, gpu=gpu)
    env["survey"] = {
        "survey_id": survey_id,
        "world_size": len(infos),
        "deadline_s": deadline_s,
        "ranks_finished": sum(1 for i in infos.values() if i and i.get("status") in ("ok", "error")),
        "no_result": [r for r, i in sorted(infos.items()) if not i or i.get("status") not in ("ok", "error")],
        "flagged": [int(r) for r in gpus.loc[gpus["flag"] != "", "rank"]],
        "ranks": {str(r): i for r, i in sorted(infos.items())},
        "duplicate_ranks": {str(r): c for r, c in sorted(duplicates.items())},
    }
    schema_cols = [c for c in fleet.columns if c not in RANK_COLUMNS]
    fleet = validate(fleet[[*schema_cols, *RANK_COLUMNS]], source=FLEET_NAME)
    path = folder / FLEET_NAME
    tableio.save_for_spreadsheet(fleet, path, env)  # a host or reason from a rank file is never a formula
    if report:
        page = report_html(gpus, env)
        tableio.atomic_write(folder / "fleet.html", lambda p: Path(p).write_text(page, encoding="utf-8"))
    fleet.attrs["env"] = env
    return fleet, gpus


def run(a: argparse.Namespace, argv: list[str]) -> int:
    """The ``survey`` command (see the module's docstring for its exit codes)."""
    import torch

    from h2dlab.cli.checks import check_folder, not_a_data_folder
    from h2dlab.survey.fleet import FLEET_NAME, wait_for_ranks
    from h2dlab.survey.launch import place_from_env
    from h2dlab.survey.rank import DuplicateRank, plan, rank_file, survey_rank
    from h2dlab.survey.show import summary_line

    t0, started = time.monotonic(), time.time()
    if not a.deadline > 0:
        raise UsageError(f"--deadline {a.deadline:g}: give a number of seconds above 0")
    if a.device not in ("cpu", "cuda") and not re.fullmatch(r"cuda:[0-9]+", a.device):
        raise UsageError(f"--device {a.device!r}: give cuda, cuda:N or cpu")
    place = place_from_env()
    folder = check_folder(a.out, "--out")
    not_a_data_folder(a.out, "--out", "the survey's files")  # its fleet table joined that kind
    if (folder / FLEET_NAME).exists() and rank_file(folder, place.rank).exists():
        raise UsageError(f"--out {folder} holds a finished survey already: give a new folder")
    baseline = _read_baseline(a.baseline) if a.baseline and place.rank == 0 else None
    if place.world_size == 1 and a.device != "cpu" and not torch.cuda.is_available():
        raise Unavailable("no CUDA device here: survey the host copies with --device cpu")
    folder.mkdir(parents=True, exist_ok=True)
    # under torchrun's 30 s between SIGTERM and SIGKILL, so that a rank blocked in a
    # collective when its node is stopped still gets to write what it has
    timeout_s = min(25.0, max(5.0, a.deadline / 4))
    args = ["h2dlab", *argv]
    interrupted = False
    try:
        info = survey_rank(
            place,
            folder,
            device=a.device,
            sizes=tuple(a.sizes) if a.sizes else None,
            reps=a.reps,
            timeout_s=timeout_s,
            argv=args,
            fresh_s=a.deadline,
        )
    except DuplicateRank as exc:  # a row of rank 0's table, as any rank's failure (0: no table)
        print(f"h2dlab survey: {exc}", file=sys.stderr)
        return 0 if place.rank != 0 else 2
    except KeyboardInterrupt:  # SIGTERM: the launcher stops this node (one of its ranks died)
        if place.rank != 0:
            raise
        interrupted, info = True, {"status": "error", "error": ""}
    if place.world_size == 1 and info["status"] == "error" and "no CUDA" in info["error"]:
        raise Unavailable(info["error"])
    if place.rank != 0:
        print(f"h2dlab survey: rank {place.rank} {info['status']} ({place.host})", file=sys.stderr)
        return 0
    infos = None
    if not interrupted:
        try:
            infos = wait_for_ranks(folder, place.world_size, t0 + a.deadline)
        except KeyboardInterrupt:
            interrupted = True
    if infos is None:  # stopped: the table now, from what the ranks have written so far
        infos = wait_for_ranks(folder, place.world_size, 0.0)
    for r, i in infos.items():  # a file left by another job in the same folder is not this one's
        if i and place.job_id and i.get("job_id") and i["job_id"] != place.job_id:
            infos[r] = None
    kind = "cuda" if a.device != "cpu" else "cpu"
    _, gpus = finish(
        folder,
        infos,
        plan(kind, tuple(a.sizes) if a.sizes else None, a.reps),
        _survey_id(place.job_id),
        None if interrupted else a.deadline,
        baseline=baseline,
        report=a.report,
        argv=args,
        gpu=kind == "cuda" and torch.cuda.is_available(),
        since=started - a.deadline,  # an earlier survey's claims in this folder are not this one's
        job_id=place.job_id,
    )
    if interrupted:
        print(
            f"h2dlab survey: stopped by a signal; the table holds what the ranks had written -> {folder / FLEET_NAME}",
            file=sys.stderr,
        )
        raise KeyboardInterrupt
    print(f"survey: {summary_line(gpus)} -> {folder / FLEET_NAME}")
    for _, r in gpus[gpus["flag"] != ""].iterrows():
        print(f"  {r['host'] or '?'} rank {r['rank']} ({r['flag']}): {r['reason']}")
    return EXIT_FLAGGED if (gpus["flag"] != "").any() else 0
