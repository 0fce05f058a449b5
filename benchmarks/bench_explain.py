"""What ``h2dlab explain`` costs: CPU seconds of the whole command (start-up, load, fit with
its bootstrap, explain, print) on bundled datasets, beside what merely loading the same
dataset costs in a fresh interpreter, measured in one run.

Each figure is the median over ``--repeats`` runs of the child process's user + system CPU
time (the wall clock of a shared 2-core machine measures its load, not the command). Target:
``explain h200_sweep`` within 3 s of CPU (the time a user waits at a prompt). Exit 1 when a
target fails. This replaces the timed unit test that held the same bound until commit
3461bbc (performance targets live in benchmarks, not in timed tests).

    python3 benchmarks/bench_explain.py [--repeats 3] [--datasets h200_sweep h200_forum] [--json OUT]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from bench_analysis import settle  # noqa: E402

from h2dlab import datasets  # noqa: E402

__all__ = ["TARGETS", "child_cpu_s", "main", "measure", "verdicts"]

#: Upper bounds in CPU seconds of ``h2dlab explain <dataset> --json``.
TARGETS = {"h200_sweep": 3.0}

LOAD_ONLY = "import sys; from h2dlab import datasets; datasets.load(sys.argv[1])"


def child_cpu_s(args: list[str]) -> float:
    """User + system CPU seconds of one child process running ``args`` (it must succeed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip()[-300:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(names: list[str], *, repeats: int = 3) -> dict[str, dict[str, float]]:
    """Per dataset: median CPU seconds of ``explain --json`` and of loading it alone, and
    their ratio. The two alternate run by run, so a busy spell falls on both."""
    out = {}
    for name in names:
        ex, load = [], []
        for _ in range(repeats):
            ex.append(child_cpu_s([sys.executable, "-m", "h2dlab", "explain", name, "--json"]))
            load.append(child_cpu_s([sys.executable, "-c", LOAD_ONLY, name]))
        e, lo = float(np.median(ex)), float(np.median(load))
        out[name] = {"explain_cpu_s": e, "load_cpu_s": lo, "explain_over_load": e / lo}
    return out


def verdicts(res: dict[str, dict[str, float]]) -> list[tuple[str, bool]]:
    """One line per target measured: its text and whether it holds."""
    return [
        (
            f"explain {name} = {res[name]['explain_cpu_s']:.2f} s of CPU (target <= {bound:g} s)",
            res[name]["explain_cpu_s"] <= bound,
        )
        for name, bound in TARGETS.items()
        if name in res
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--datasets", nargs="+", default=["h200_sweep", "h200_forum"])
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    names = []
    for name in args.datasets:  # a path from here, not from the repository root the runs start in
        path = Path(name).expanduser()
        names.append(str(path.resolve()) if path.exists() else name)
        try:
            datasets.load(names[-1])
        except (ValueError, OSError) as exc:
            ap.error(f"--datasets {name}: {str(exc).splitlines()[0]}")
    if args.json is not None and (args.json.is_dir() or not args.json.parent.is_dir()):
        ap.error(f"--json {args.json}: give a file in a folder that exists")
    res = measure(names, repeats=args.repeats)
    for name, r in res.items():
        print(
            f"{name}: explain {r['explain_cpu_s']:.2f} s of CPU; loading it alone {r['load_cpu_s']:.2f} s "
            f"(explain / load = {r['explain_over_load']:.1f}x)"
        )
    return settle(verdicts(res), res, args.json)


if __name__ == "__main__":
    sys.exit(main())
