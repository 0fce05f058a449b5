"""``h2dlab.profile()``: wrap a few steps of your own loop and get a trace the doctor reads."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from h2dlab.errors import UsageError

__all__ = ["profile"]


@contextlib.contextmanager
def profile(
    out: str | os.PathLike[str] = "trace.json.gz",
    *,
    steps: int = 3,
    wait: int = 1,
    warmup: int = 1,
    with_stack: bool = False,
) -> Iterator[Any]:
    """Profile the steps of a loop with ``torch.profiler`` and write one Chrome trace.

    Call ``.step()`` on what the block yields at the end of every step. The first ``wait``
    steps are skipped, ``warmup`` more run under the profiler unrecorded, then ``steps``
    are recorded (``ProfilerStep#`` ranges) and written to ``out`` (gzip when it ends in
    ``.gz``). CUDA activity is recorded where CUDA is available; on CPU the trace holds
    host ops only (``h2dlab doctor`` then says it has no GPU activity). Beside the trace goes
    the kit's env.json of this machine (``t.json.gz`` -> ``t.env.json``: GPU, host, torch,
    date, command line), so the doctor's figures can say where and when it was made.

    Parameters
    ----------
    out
        Where the trace goes (``.json`` or ``.json.gz``).
    steps, wait, warmup
        ``torch.profiler.schedule``'s ``active``, ``wait`` and ``warmup``; run at least
        ``wait + warmup + steps`` steps.
    with_stack
        Record Python frames, so sites are named by your own lines (a larger trace).

    Yields
    ------
    torch.profiler.profile
        Call its ``.step()`` once per step.

    Raises
    ------
    UsageError
        The block ended before any step was recorded (nothing written).
    """
    import torch
    from torch.profiler import ProfilerActivity, schedule

    for name, v, least in (("steps", steps, 1), ("wait", wait, 0), ("warmup", warmup, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise UsageError(f"{name} must be a whole number >= {least}, got {v!r}")
    target = Path(out).expanduser()
    if not target.parent.is_dir():
        raise UsageError(f"no folder {str(target.parent)!r} to write the trace into")
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    written: list[str] = []

    def ready(p: Any) -> None:
        p.export_chrome_trace(str(target))  # torch gzips a path ending in .gz
        written.append(str(target))

    prof = torch.profiler.profile(
        activities=activities,
        schedule=schedule(wait=wait, warmup=warmup, active=steps, repeat=1),
        on_trace_ready=ready,
        with_stack=with_stack,
        record_shapes=False,
    )
    with prof:
        yield prof
    if not written:
        raise UsageError(
            f"no step was recorded: the block ran {prof.step_num} steps and the trace needs at least "
            f"wait + warmup + 1 = {wait + warmup + 1} (call .step() once per step)"
        )
    _write_env(target, gpu=torch.cuda.is_available())


def _write_env(trace: Path, gpu: bool) -> None:
    """The machine's env.json beside ``trace``; a failure warns and keeps the trace."""
    import json
    import warnings

    from h2dlab.doctor.trace import env_path
    from h2dlab.recording.env import collect_env

    try:
        env = collect_env(gpu=gpu)
        env["what"] = f"h2dlab.profile(): the machine that wrote {trace.name}"
        env_path(trace).write_text(json.dumps(env, indent=2, default=str), encoding="utf-8")
    except Exception as exc:  # the trace is written: its description must not lose it
        warnings.warn(f"h2dlab.profile: {trace.name} written, its env.json not ({exc})", stacklevel=3)
