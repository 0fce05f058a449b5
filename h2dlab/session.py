"""What a notebook reads: recorded datasets (replay) or runs measured now (live).

``Session(mode).data(name)`` is the one call a notebook makes for data; the mode comes
from the notebook's ``MODE`` and the ``H2DLAB_MODE`` variable (which wins).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from h2dlab import datasets
from h2dlab.errors import UsageError

__all__ = ["MODES", "ROOT", "RUNS_DIR", "Session", "resolve_mode"]

ROOT = Path(__file__).resolve().parent.parent


MODES = ("auto", "replay", "live")
RUNS_DIR = ROOT / "data" / "runs"


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
        raise UsageError(
            "live mode needs CUDA and this machine has none: use H2DLAB_MODE=replay "
            "(or auto) to replay the recorded H200 data"
        )
    if mode == "auto":
        return "live" if cuda else "replay"
    return mode


class Session:
    """What a notebook reads: recorded datasets (replay) or runs measured now (live).

    ``data(name)`` returns the recorded dataset in replay mode; in live mode it runs
    the matching measurement with the kit's CLI (a fresh process, so that CUDA
    start-up lands where the forum's did), saves it under ``data/runs/`` with its
    env.json, and returns it.
    """

    #: What a live notebook measures in place of each recorded dataset: run name, CLI
    #: arguments, extra environment. The same experiments as data/record_h200.sh, capped
    #: at 1 GiB and with fewer repetitions so that a whole live report takes minutes.
    REG = {"PYTORCH_CUDA_ALLOC_CONF": "pinned_use_cuda_host_register:True,pinned_num_register_threads:8"}
    PIN = [
        "measure",
        "--sizes",
        "forum",
        "--strategies",
        "pin_then_copy",
        "--reps",
        "2",
        "--warmup",
        "0",
        "--order",
        "ascending",
    ]
    DEV = [
        "measure",
        "--sizes",
        "1KiB..256MiB",
        "--strategies",
        "pageable,pinned_reuse",
        "--reps",
        "5",
        "--warmup",
        "1",
    ]
    LIVE = {
        "h200_forum": [(f"ascending-{i}", ["forum"], {}) for i in (1, 2, 3)]
        + [("shuffled-1", ["forum", "--order", "shuffled", "--seed", "1"], {})],
        "h200_sweep": [
            (
                "pow2",
                ["measure", "--sizes", "1KiB..1GiB", "--reps", "10", "--reps-large", "3", "--warmup", "2"],
                {},
            ),
            (
                "forum-sizes",
                [
                    "measure",
                    "--sizes",
                    "forum",
                    "--strategies",
                    "pageable,pinned_reuse",
                    "--reps",
                    "3",
                    "--warmup",
                    "1",
                ],
                {},
            ),
        ],
        "h200_allocator": [
            ("pin-warm", PIN, {}),
            ("pin-emptied", [*PIN, "--empty-host-cache"], {}),
            ("pin-register-warm", PIN, REG),
            ("pin-register-emptied", [*PIN, "--empty-host-cache"], REG),
            ("device-cache-kept", DEV, {}),
            ("device-empty-cache", [*DEV, "--empty-cache"], {}),
        ],
        "h200_overlap": [("overlap", ["overlap", "--size", "256MiB", "--reps", "5"], {})],
    }

    def __init__(self, mode: str = "auto") -> None:
        self.mode = resolve_mode(mode)
        self.sources: dict[str, str] = {}
        self._cache: dict[str, object] = {}

    def data(self, name: str):
        """The recorded dataset ``name`` (replay), or the same experiment run now (live)."""
        if name in self._cache:
            return self._cache[name]
        if self.mode == "replay" or name not in self.LIVE:
            df = datasets.timeline(name) if name in datasets.TIMELINES else datasets.load(name)
            self.sources[name] = f"recorded `{name}`"
        else:
            df = self._measure(name)
        self._cache[name] = df
        return df

    def run(self, name: str, run: str):
        """One run of a dataset by its file name (e.g. ``pow2``), in either mode."""
        return datasets.run_named(self.data(name), run)

    def _measure(self, name: str):
        import subprocess

        stamp = time.strftime("%Y%m%d-%H%M%S")
        folder = RUNS_DIR / f"{stamp}-{name.replace('h200_', '')}"
        folder.mkdir(parents=True, exist_ok=True)
        for run, args, extra in self.LIVE[name]:
            out = folder / f"{run}.csv.gz"
            cmd = [sys.executable, "-m", "h2dlab.cli", *args, "--out", str(out)]
            if args[0] in ("measure", "forum"):
                cmd.append("--no-progress")
            print("measuring:", " ".join(["h2dlab", *cmd[3:]]), flush=True)
            subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, **extra})
        df = datasets.timeline(str(folder)) if name in datasets.TIMELINES else datasets.load(str(folder))
        df.attrs["dataset"] = f"live run {folder.relative_to(ROOT)}"
        self.sources[name] = f"measured now, saved in `{folder.relative_to(ROOT)}`"
        return df

    def banner(self):
        """An HTML banner: which mode ran, on what GPU, when, from which data."""
        from IPython.display import HTML

        from h2dlab.env import collect_env, describe

        here = collect_env(gpu=self.mode == "live")
        if self.mode == "replay":
            envs = [datasets.run_env(d) for d in self._cache.values() if hasattr(d, "attrs")]
            rec = next((e for e in envs if e and e.get("gpu_name")), {})
            what = (
                f"<b>Replay</b> of recorded data ({', '.join(self.sources.values()) or 'none yet'}), "
                f"measured on {describe(rec) if rec else 'the machine named in each figure'}."
            )
            why = (
                "No CUDA GPU here" if not here.get("cuda_available") else "Replay was asked for"
            ) + ": set <code>H2DLAB_MODE=live</code> on a GPU machine to measure it instead."
        else:
            what = f"<b>Live</b> measurement on this machine: {describe(here)}."
            why = "Runs are saved under <code>data/runs/</code> with their env.json."
        return HTML(
            f'<div class="h2dlab-banner" style="border-left:4px solid #1f77b4;padding:6px 10px;'
            f'background:#f3f7fb;font-size:90%">{what} {why}<br><small>executed '
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by h2dlab</small></div>"
        )
