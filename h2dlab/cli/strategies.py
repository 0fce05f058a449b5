"""``h2dlab strategies``: the ways to move a tensor, what each times, its direction and
whether this machine can run it; and the check that ``measure`` runs before it starts."""

from __future__ import annotations

import argparse
import json
from typing import Any

from h2dlab.errors import UsageError

__all__ = ["add_parser", "check_runnable", "rows", "run"]

DIRECTIONS = {"h2d": "host -> GPU", "d2h": "GPU -> host"}


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``strategies`` on the ``h2dlab`` command's subparsers."""
    s = sub.add_parser(
        "strategies",
        help="list the strategies: what each times, its direction, whether this machine runs it",
    )
    s.add_argument(
        "--device",
        default=None,
        help="judge for this device: cuda, cuda:N or cpu [cuda where available, else cpu]",
    )
    s.add_argument("--json", action="store_true", help="a JSON list, one object per strategy")
    return s


def _device(text: str | None):
    import torch

    if text is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu"), torch.cuda.is_available()
    try:
        dev = torch.device(text)
    except RuntimeError:
        raise UsageError(f"unknown device {text!r}: use cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda"):
        raise UsageError(f"h2dlab copies to cuda (or host copies with cpu), not {dev.type}")
    if dev.type == "cpu" and dev.index is not None:  # measure refuses it: judge only what it takes
        raise UsageError(f"unknown device {text!r}: use cpu, cuda or cuda:N")
    return dev, torch.cuda.is_available()


def rows(device: str | None = None) -> list[dict[str, Any]]:
    """One dict per registered strategy: ``name``, ``direction`` (h2d or d2h), ``times``
    (what its timed step does), ``needs_cuda``, ``device`` and ``runs_here`` (bool) with
    ``why_not`` (empty when it runs)."""
    from h2dlab.measure import strategies

    dev, cuda = _device(device)
    out = []
    for name, cls in strategies.REGISTRY.items():
        why = strategies.available(name, dev)
        if not why and dev.type == "cuda" and not cuda:
            why = "this machine has no CUDA"
        out.append(
            {
                "name": name,
                "direction": cls.direction,
                "times": cls.summary,
                "needs_cuda": bool(cls.needs_cuda),
                "device": str(dev),
                "runs_here": not why,
                "why_not": why,
            }
        )
    return out


def run(a: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Print the strategies as a table (or JSON); exit code 0."""
    table = rows(a.device)
    if a.json:
        print(json.dumps(table, indent=2))
        return 0
    dev = table[0]["device"] if table else "?"
    print(f"strategies, judged for device {dev} (h2dlab measure --strategies NAME,...):\n")
    width = max(len(r["name"]) for r in table)
    print(f"{'strategy':{width}}  {'direction':11}  {'runs here':9}  what it times")
    for r in table:
        here = "yes" if r["runs_here"] else "no"
        print(f"{r['name']:{width}}  {DIRECTIONS[r['direction']]:11}  {here:9}  {r['times']}")
    missing = [r for r in table if not r["runs_here"]]
    if missing:
        reasons = sorted({r["why_not"].split(": ")[-1] for r in missing})
        print(f"\n{len(missing)} cannot run here ({'; '.join(reasons)}).")
    return 0


def check_runnable(names: tuple[str, ...] | None, device: str) -> None:
    """Refuse, before anything is measured, strategies that cannot run on ``device``
    (``UsageError`` naming them and those that can)."""
    if not names or not device.startswith("cpu"):
        return  # on cuda the device check itself says whether this machine has CUDA
    import torch

    from h2dlab.measure import strategies

    cpu = torch.device("cpu")
    bad = [n for n in names if strategies.available(n, cpu)]
    if bad:
        ok = [n for n in strategies.REGISTRY if not strategies.available(n, cpu)]
        raise UsageError(
            f"{', '.join(bad)} need{'s' if len(bad) == 1 else ''} CUDA and the device is cpu: "
            f"on cpu only {', '.join(ok)} run (h2dlab strategies lists them all)"
        )
