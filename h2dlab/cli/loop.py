"""``measure``'s options for what sits between two timed copies, and its reference check.

``--pause MS`` is the one way to ask for a gap before each copy; ``--evidence`` says what
is read around each copy (light by default: the host work between copies stays well under
0.2 ms, as in a user's loop); ``--reference`` times the same cells with
``torch.utils.benchmark`` after the sweep (``h2dlab.measure.reference``).
"""

from __future__ import annotations

import argparse
from typing import Any

from h2dlab.cli import common as cli_common
from h2dlab.errors import UsageError

__all__ = ["add_options", "after_sweep", "check", "reference_not_taken"]


def add_options(m: argparse.ArgumentParser) -> None:
    """Add ``--pause``, ``--evidence`` and ``--reference`` to the ``measure`` parser ``m``."""
    m.add_argument(
        "--pause",
        type=cli_common.pause_arg,
        default=None,
        metavar="MS",
        help="spin MS ms with the GPU idle before each timed copy (after a tiny GPU operation), "
        "to measure what a pause costs the next copy",
    )
    m.add_argument(
        "--evidence",
        choices=("light", "full"),
        default="light",
        help="what is read around each copy: light (page faults, CPU times, scheduler wait, GC, "
        "allocator counters; tens of us between copies) or full (adds NVML's SM clock and GPU "
        "processes and every other thread's CPU time and run-queue wait: about 1-3 ms of host "
        "work between copies, so each small copy follows an idle GPU and reads slower) [light]",
    )
    m.add_argument(
        "--reference",
        action="store_true",
        help="after the sweep, time each strategy and size with torch.utils.benchmark (copy + "
        "synchronize, blocked_autorange, ~0.5 s a cell) in the same process; the medians go to "
        "env.json under 'reference' beside the kit's",
    )


def check(a: argparse.Namespace) -> None:
    """Refuse option pairs that cannot run together (``UsageError``)."""
    if a.gpus is not None and a.reference:
        raise UsageError("--reference times one GPU: leave out --gpus")


def after_sweep(a: argparse.Namespace, df: Any, out: Any, spec: Any) -> str | None:
    """With ``--reference``, and unless the sweep was stopped: the reference check.

    Returns None, or, where a Ctrl-C or SIGTERM came before the check was taken (during the
    sweep's last copies or its table's write, which it lets end, or during the check), the
    line that says so: the table is whole and kept, without the reference in its env.json;
    the command then exits 130 (:func:`reference_not_taken`)."""
    if not a.reference or df.attrs.get("stopped"):
        return None
    why = "a stop was asked for before it began"
    if (df.attrs.get("env") or {}).get("stopped_by_signal") is None:
        from h2dlab.measure.reference import attach

        try:
            attach(df, out, spec.device, seed=spec.seed)
            return None
        except KeyboardInterrupt:
            if _reference_written(df, out):
                return None  # the signal came after it was written: it was taken
            why = "it was interrupted"
    return _not_taken(why, out)


def take_missing_reference(a: argparse.Namespace, out: Any, spec: Any) -> tuple[Any, str | None] | None:
    """``measure --reference --resume`` of a finished table: None where its env.json holds the
    reference already (nothing to do: the caller says the table is finished). Otherwise the
    check is taken now, on the table's rows (an earlier one was stopped before it was taken):
    returns the table and None, or the line that says it was interrupted again."""
    if not (a.reference and a.resume) or out is None:
        return None
    from h2dlab.measure.reference import attach
    from h2dlab.recording import datasets

    df = datasets.read(out)
    env = df.attrs.get("env")  # None where the env.json beside it is missing or another run's
    if not isinstance(env, dict) or not isinstance(env.get("spec"), dict) or not env["spec"]:
        raise UsageError(
            f"{out} has no env.json of its own that says where and how it was measured, so its "
            "reference check cannot be taken here: measure again into a new --out"
        )
    if env.get("reference"):
        return None  # taken already: the table is finished
    elsewhere = _measured_elsewhere(env, spec.device)
    if elsewhere:
        raise UsageError(
            f"{out} was measured on {elsewhere}: its reference check belongs to that machine; "
            "take it there, or measure again here into a new --out"
        )
    try:
        attach(df, out, spec.device, seed=spec.seed)
        return df, None
    except KeyboardInterrupt:
        if _reference_written(df, out):
            return df, None
    return df, _not_taken("it was interrupted", out)


def _not_taken(why: str, out: Any) -> str:
    """The line that says the reference check was not taken, and why."""
    return (
        f"h2dlab: interrupted: the reference check was not taken ({why}); {out} is whole and kept without it"
    )


def _measured_elsewhere(env: dict[str, Any], device: str) -> str | None:
    """The host and GPU a table's env.json names where they are not this process's (its
    host, and for a CUDA ``device`` that GPU's name and PCI bus), else None."""
    import platform

    host = env.get("hostname")
    theirs = f"{str(host)[:80]}" + (f", {str(env.get('gpu_name'))[:80]}" if env.get("gpu_name") else "")
    if host != platform.node() or env.get("platform", platform.platform()) != platform.platform():
        return theirs  # the same host name on another kernel or image is another machine
    if str(device).startswith("cuda"):
        import torch

        from h2dlab.measure.nvml import bus_id_of

        index = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(index)
        if env.get("gpu_name") != props.name or (
            env.get("gpu_pci_bus_id") and env.get("gpu_pci_bus_id") != bus_id_of(props)
        ):
            return theirs
    return None


def _reference_written(df: Any, out: Any) -> bool:
    from h2dlab.recording import datasets

    if out is None:
        return bool((df.attrs.get("env") or {}).get("reference"))
    try:
        return bool((datasets.read_env(out) or {}).get("reference"))
    except Exception:  # noqa: BLE001 - an unreadable env.json holds no reference
        return False


def reference_not_taken(line: str, done: Any) -> int:
    """``done()`` (the rows written, as for a whole table), then ``line``; exit code 130."""
    import sys

    done()
    print(line, file=sys.stderr)
    return cli_common.EXIT_INTERRUPTED
