"""``explain --out``: the annotated table and the one env.json beside it.

Kept beside ``cli_explain``. An annotated table is one file, so it has one env.json, and a
reader names every run in it after that file and gives each that env.json (the machine,
the stall census, the schema version): a source whose runs carry env.jsons of their own
(a folder of runs, a recording's kind) is refused rather than written with the first one.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from h2dlab.errors import UsageError
from h2dlab.recording.tableio import save_for_spreadsheet

__all__ = ["annotated_env", "check_one_env", "write_annotated"]


def check_one_env(df, source: str) -> None:
    """Refuse (``UsageError``) to annotate a table whose runs do not share one env.json.

    Parameters
    ----------
    df
        The loaded source, with ``attrs['envs']`` (run id -> its env.json, or None).
    source
        The RUN argument, to build the example in the message.
    """
    every = df.attrs.get("envs") or {}
    envs = {rid: every.get(rid) for rid in dict.fromkeys(df["run_id"])}  # DATASET:RUN keeps all attrs
    distinct = {json.dumps(e, sort_keys=True, default=str) for e in envs.values()}
    if len(distinct) <= 1:
        return
    names = df.attrs.get("run_names") or {}
    first = str(names.get(next(iter(envs)), next(iter(envs))))
    raise UsageError(
        f"explain --out writes one table with one env.json; {source} holds {len(envs)} runs with their own: "
        f"give one run (e.g. {source}:{first}) or leave --out out"
    )


def annotated_env(env: dict | None, source: str, argv: list[str] | None) -> dict:
    """The env.json of an annotated table: the measurement's own fingerprint (the data came
    from that machine), plus where and how this annotated copy was made."""
    out = dict(env or {})
    out["annotated"] = {"source": str(source), "command": shlex.join(argv) if argv else None}
    return out


def write_annotated(e, path: Path, env: dict) -> None:
    """Write the annotated table ``e`` (format by suffix) and ``env`` beside it, each atomically."""
    # Not datasets.save: the annotated table carries the derived columns, which save()
    # (the measurement table's writer) leaves out on purpose.
    save_for_spreadsheet(e, path, env)  # a strategy or error text is never a formula
