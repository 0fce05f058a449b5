"""``h2dlab doctor TRACE``: a torch.profiler trace's copy sites, what they cost, what to change."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``doctor`` on the ``h2dlab`` command's subparsers."""
    d = sub.add_parser(
        "doctor",
        help="read a torch.profiler trace: what its copies cost per step and what to change",
        description="TRACE is the .json or .json.gz Chrome trace that torch.profiler (or h2dlab.profile()) "
        "wrote. Each copy site gets its exposed time per step and the kit's recipe that saves most, "
        "estimated from a recording's copy times (its medians per size, else its fitted line).",
    )
    d.add_argument("trace", metavar="TRACE", help="a torch.profiler trace (.json or .json.gz)")
    d.add_argument(
        "--json", action="store_true", help="one JSON object: schema, steps, exposed_copy_ms_per_step, sites"
    )
    d.add_argument(
        "--recording",
        default="h200",
        metavar="NAME_OR_FOLDER",
        help="whose copy times estimate the savings: h200 (bundled) or a folder `h2dlab record` wrote [h200]",
    )
    return d


def run(a: argparse.Namespace, argv: list[str]) -> int:
    """Print the diagnosis (table, or JSON with ``--json``); exit 2 on a bad trace."""
    from h2dlab.doctor import diagnose
    from h2dlab.errors import UsageError

    if not a.recording.strip():  # `--recording "$UNSET"`: the library's TypeError is for code
        raise UsageError(
            "--recording is empty: give h200 (the bundled data) or a folder `h2dlab record` wrote"
        )
    dx = diagnose(a.trace, recording=a.recording)
    print(json.dumps(dx.to_dict(), indent=2, ensure_ascii=False) if a.json else dx.table())
    return 0
