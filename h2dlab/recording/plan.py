"""The one recording plan: every experiment a recording holds.

``PLAN`` is the table ``h2dlab record`` runs (and that the bundled H200 data was made
by): one :class:`Experiment` per run, each the kit's own CLI in a fresh process.
``experiments(quick=..., gpus=...)`` picks the rows and arguments for one recording.
A recording folder holds ``<kind>/<run>.csv.gz`` (+ its env.json) per experiment and
``recording.json`` (:mod:`h2dlab.recording.folder` reads and writes it): the machine, the date, the plan it ran and which
experiments finished. No torch here: the plan is read on machines without CUDA too.

Estimated seconds are wall times measured on the 16-core H200 (each process's start-up
included): the full plan's are ``wall_s`` in the bundled ``data/h200/recording.json``, the
``--quick`` ones those of a quick recording made by ``h2dlab report --mode live`` (see
:data:`PLAN`); only the concurrent run's, which needs two GPUs, is an estimate.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from h2dlab.units import FORUM_SEQS, forum_nbytes

__all__ = [
    "FORUM_PAIR",
    "KINDS",
    "PLAN",
    "PLAN_VERSION",
    "QUICK_CAP_BYTES",
    "RETIRED",
    "Experiment",
    "experiments",
    "experiment_from_dict",
    "select",
    "plan_lines",
    "show_args",
    "total_seconds",
    "why_lacking",
]

#: Bump when an experiment's arguments change (stored in recording.json).
#: 2: the full plan's forum-grid sweeps thinned (sweep/forum-sizes every third forum size,
#: the pin_then_copy allocator runs every other one) to fit 7.5 minutes on an H200.
#: 3: the ``idle`` kind added (four ``measure --pause`` runs: what a pause with the GPU idle
#: costs the next small copy); the earlier runs' arguments are unchanged.
#: 4: the ``workload`` kind (each recipe inside a training-like step) and the ``reference`` kind
#: (``measure --reference``: the kit's medians beside torch.utils.benchmark's, same process)
#: added; every measure run's loop is light (schema 6); the earlier runs' arguments are unchanged.
PLAN_VERSION = 4
#: What a recording may hold, in reading order; each kind is a sub-folder (new kinds go last).
KINDS = (
    "forum",
    "sweep",
    "allocator",
    "overlap",
    "concurrent",
    "d2h",
    "bidir",
    "batch",
    "idle",
    "workload",
    "reference",
)
#: ``--quick`` caps the forum grid here: 73 of its 210 sizes, up to 135.4 MiB, which
#: still crosses the power-of-two block sizes at 17.25, 32.25, 64.1 and 129.75 MiB.
QUICK_CAP_BYTES = 136 * 2**20

REGISTER_CONF = {
    "PYTORCH_CUDA_ALLOC_CONF": "pinned_use_cuda_host_register:True,pinned_num_register_threads:8"
}
_SKIP = ("--skip",)  # the ``quick`` value of an experiment --quick leaves out


def _forum_upto(cap: int) -> str:
    return ",".join(str(forum_nbytes(s)) for s in FORUM_SEQS if forum_nbytes(s) <= cap)


#: The forum's own question, "why is seq 1026 faster than seq 966?" (``forum_claims.size_pair``):
#: ``--quick`` keeps these two seqs in its forum runs beside the capped grid.
FORUM_PAIR = (966, 1026)


def _forum_every(step: int) -> str:
    """Every ``step``-th of the forum's sizes, from its second (seq 6): with ``step`` 2 or
    3 that keeps the forum's question pair (:data:`FORUM_PAIR`) and spans the grid to
    within one step of its largest size."""
    return ",".join(str(forum_nbytes(s)) for s in FORUM_SEQS[1::step])


def _seqs_upto(cap: int) -> str:
    return ",".join(str(s) for s in FORUM_SEQS if forum_nbytes(s) <= cap or s in FORUM_PAIR)


@dataclass(frozen=True)
class Experiment:
    """One run of the plan: ``h2dlab <args> --out <folder>/<kind>/<run>.csv.gz``.

    Parameters
    ----------
    kind, run
        Sub-folder and file name of its table (``run`` is unique in the plan).
    args
        The CLI arguments after ``h2dlab`` (without ``--out`` and ``--no-progress``).
    quick
        The arguments under ``--quick``; ``None``: the same as ``args``; ``("--skip",)``:
        left out of a quick recording.
    env
        Extra environment variables (e.g. ``PYTORCH_CUDA_ALLOC_CONF``).
    fresh
        Why it needs a process of its own: True where the measurement depends on a
        cold process (CUDA start-up in the first row, an empty host cache, an
        allocator setting read once). Every experiment runs in its own process anyway.
    seconds, quick_seconds
        Estimated wall time on an H200, process start included.
    min_gpus
        Run only on a machine with at least this many GPUs.
    what
        One line for ``--dry-run``.
    """

    kind: str
    run: str
    args: tuple[str, ...]
    seconds: float
    quick_seconds: float = 0.0
    quick: tuple[str, ...] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    fresh: bool = True
    min_gpus: int = 1
    what: str = ""

    @property
    def name(self) -> str:
        """``<kind>/<run>``: where its table goes, and how ``--only`` may name it."""
        return f"{self.kind}/{self.run}"

    def argv(self, quick: bool = False) -> list[str]:
        """The CLI arguments of this run (quick or full)."""
        return list(self.quick if quick and self.quick is not None else self.args)

    def in_quick(self) -> bool:
        """Whether ``--quick`` runs it."""
        return self.quick != _SKIP

    def to_dict(self, quick: bool = False) -> dict[str, Any]:
        """The resolved run as stored in recording.json (what ``--resume`` runs)."""
        return {
            "kind": self.kind,
            "run": self.run,
            "args": self.argv(quick),
            "env": dict(self.env),
            "seconds": self.quick_seconds if quick else self.seconds,
            "fresh": self.fresh,
        }


def experiment_from_dict(d: Mapping[str, Any]) -> Experiment:
    """An :class:`Experiment` back from :meth:`Experiment.to_dict` (or a test's plan file)."""
    try:
        kind, run, args = str(d["kind"]), str(d["run"]), tuple(str(a) for a in d["args"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"a plan entry needs kind, run and args: {dict(d)!r}") from exc
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", run) or not re.fullmatch(r"[a-z0-9_]+", kind):
        raise ValueError(f"bad kind/run name {kind!r}/{run!r}: letters, digits, _ . - only")
    return Experiment(
        kind=kind,
        run=run,
        args=args,
        seconds=float(d.get("seconds", 10.0)),
        quick_seconds=float(d.get("seconds", 10.0)),
        env={str(k): str(v) for k, v in (d.get("env") or {}).items()},
        fresh=bool(d.get("fresh", True)),
        min_gpus=int(d.get("min_gpus", 1)),
    )


def _a(text: str, **values: str) -> tuple[str, ...]:
    """CLI arguments from one line (``{name}`` filled in after splitting)."""
    return tuple(w.format(**values) for w in text.split())


_Q = {"forum_q": _forum_upto(QUICK_CAP_BYTES), "seqs_q": _seqs_upto(QUICK_CAP_BYTES)}
#: The full plan's thinned forum grids: 70 sizes (every third) and 105 (every other).
_F = {"forum_3": _forum_every(3), "forum_2": _forum_every(2)}
_PIN = "measure --strategies pin_then_copy --warmup 0 --order ascending --sizes"
_DEV = "measure --strategies pageable,pinned_reuse --warmup 1 --sizes"
_POW2 = "measure --sizes 1KiB..2GiB --reps 5 --reps-large 2 --warmup 1"
_POW2_Q = "measure --sizes 1KiB..1GiB --reps 3 --reps-large 2 --warmup 1"
_FS = "measure --strategies pageable,pinned_reuse --order shuffled --seed 0 --sizes"
_GPUS = "measure --gpus 1..2 --strategies pinned_reuse,pageable,staged --sizes 64MiB..1GiB"
_REG = REGISTER_CONF
_D2H = "measure --strategies d2h_pageable,d2h_pinned_reuse,d2h_non_blocking,d2h_staged,pinned_reuse,pageable --order shuffled --seed 0 --sizes"
_BQ = "--counts 1,64,1024 --totals 1MiB,64MiB --reps 3 --reps-large 3 --warmup 1"
_IDLE = "measure --sizes 4KiB,64KiB,1MiB --strategies pinned_reuse,pageable --reps {reps} --order interleaved --seed 1"
#: The idle runs' pauses (ms) and their measured seconds (``wall_s`` in data/h200/recording.json,
#: plan 4). ``--quick`` leaves them out: four more processes would take the quick plan past its
#: 150 s (one GPU); its arguments would be the same with ``--reps 10``.
_PAUSES = {0: 5.0, 1: 5.8, 3: 6.8, 10: 7.5}
#: The reference check's cells (issue #30): the kit's rows, reps back to back, then
#: torch.utils.benchmark on the same cells (its seconds: ``wall_s`` in data/h200/recording.json).
_REF = "measure --strategies pinned_reuse,pageable --sizes 1KiB,64KiB,1MiB,64MiB,1GiB --reps 30 --reps-large 5 --warmup 2 --order shuffled --seed 0 --reference"

#: Runs of earlier H200 recordings that the plan no longer makes, and why; data/record_h200.sh
#: removes their tables from data/h200 when it copies a new recording in.
RETIRED: dict[tuple[str, str], str] = {
    ("forum", "ascending-3"): "a third ascending forum run; dropped so that the whole plan, with the "
    "device-to-host, duplex and batch runs, fits in 10 minutes on an H200",
    ("sweep", "pow2"): "the sweep with cells shuffled (reps back to back); recorded in data/h200 by the "
    "plan of commit 0d3b52a, then retired: the full plan measured 691 s there, and the interleaved "
    "sweep is the one the notebooks read (the v1 h200_sweep/pow2 keeps the ordering comparison)",
    ("allocator", "pin-register-warm"): "pin_memory() under cudaHostRegister pinning with the cache "
    "kept; recorded in data/h200, then retired for time (no figure reads it; pin-register-emptied "
    "shows the register path)",
}

#: The recording plan, in running order: (kind, run, full args, est. s, quick args, est. s).
#: Estimates are measured wall times on the 16-core H200, one process each: full plan, the
#: ``wall_s`` of each run in data/h200/recording.json (``h2dlab record`` at commit 5cb3034, plan
#: 4 with the interleaved sweep holding its cells, 499 s on VM build fc-v1252; at d332ea1 the same
#: plan took 519 s and at 66f20f2 514 s, on VM build fc-v1147; plan 3 took
#: 490 s at b95e09d on build fc-v973, 508 s at 250f304 and, without the census, 480 s at 1fb1d2d on
#: the same build; plan 2 380 s at 927e467 on build fc-v657, which ran host-memory work faster);
#: --quick, the ``wall_s`` of the quick recording
#: that ``h2dlab report --mode live`` made at commit bde0182 (140 s; not bundled). The
#: concurrent run (two GPUs) is an estimate: the plan was not recorded on the 2-GPU host.
#: To add an experiment, add a row (its CLI must exist: a test parses every row).
PLAN: tuple[Experiment, ...] = (
    *(
        Experiment("forum", f"ascending-{i}", _a("forum"), (38.3, 34.6)[i - 1], *((12.8, _a("forum --seqs {seqs_q}", **_Q)) if i == 1 else (0, _SKIP)), what="the forum protocol, sizes ascending")
        for i in (1, 2)
    ),
    Experiment("forum", "shuffled-1", _a("forum --order shuffled --seed 1"), 32.1, 11.8, _a("forum --seqs {seqs_q} --order shuffled --seed 1", **_Q), what="the forum protocol, shuffled"),
    Experiment("sweep", "pow2-interleaved", _a(f"{_POW2} --order interleaved --seed 1"), 40.6, 20.8, _a(f"{_POW2_Q} --order interleaved --seed 1"), fresh=False, what="the same, reps interleaved in shuffled rounds"),
    Experiment("sweep", "forum-sizes", _a(f"{_FS} {{forum_3}} --reps 2 --warmup 0", **_F), 34.8, 16.0, _a(f"{_FS} {{forum_q}} --reps 3 --warmup 0", **_Q), fresh=False, what="pageable and pinned_reuse on every third of the forum's sizes"),
    Experiment("allocator", "pin-warm", _a(f"{_PIN} {{forum_2}} --reps 1", **_F), 26.0, 9.8, _a(f"{_PIN} {{forum_q}} --reps 2", **_Q), what="pin_memory over every other forum size, host cache kept"),
    Experiment("allocator", "pin-emptied", _a(f"{_PIN} {{forum_2}} --reps 1 --empty-host-cache", **_F), 39.8, 12.5, _a(f"{_PIN} {{forum_q}} --reps 1 --empty-host-cache", **_Q), what="pin_memory, host cache emptied before each size"),
    Experiment("allocator", "pin-register-emptied", _a(f"{_PIN} {{forum_2}} --reps 1 --empty-host-cache", **_F), 31.3, 11.3, _a(f"{_PIN} {{forum_q}} --reps 1 --empty-host-cache", **_Q), env=_REG, what="pin-emptied under cudaHostRegister pinning"),
    Experiment("allocator", "device-cache-kept", _a(f"{_DEV} 1KiB..1GiB --reps 5 --reps-large 3"), 10.8, 6.5, _a(f"{_DEV} 1KiB..256MiB --reps 3 --reps-large 2"), what="device cache kept between copies"),
    Experiment("allocator", "device-empty-cache", _a(f"{_DEV} 1KiB..1GiB --reps 5 --reps-large 3 --empty-cache"), 11.3, 6.6, _a(f"{_DEV} 1KiB..256MiB --reps 3 --reps-large 2 --empty-cache"), what="torch.cuda.empty_cache() before every copy"),
    Experiment("overlap", "overlap", _a("overlap --size 256MiB --reps 5"), 4.8, 5.0, _a("overlap --size 256MiB --reps 3"), fresh=False, what="timelines of a copy beside compute"),
    Experiment("d2h", "d2h", _a(f"{_D2H} 1KiB,16KiB,256KiB,1MiB,4MiB,16MiB,64MiB,256MiB,1GiB --reps 10 --reps-large 3 --warmup 2"), 19.8, 6.5, _a(f"{_D2H} 64KiB,1MiB,16MiB,256MiB --reps 3 --warmup 1"), fresh=False, what="device to host, four ways, beside pinned_reuse and pageable to the GPU"),
    Experiment("bidir", "duplex", _a("duplex --sizes 1MiB,4MiB,16MiB,64MiB,256MiB,1GiB --reps 10 --warmup 2"), 11.5, 5.3, _a("duplex --sizes 1MiB,256MiB --reps 3 --warmup 1"), fresh=False, what="both directions at once on two streams, beside each alone"),
    Experiment("batch", "equal", _a("batch --layout equal --reps 5 --reps-large 3 --warmup 1 --seed 0"), 72.6, 14.8, _a(f"batch --layout equal {_BQ} --seed 0"), fresh=False, what="1-1024 equal tensors, 1 MiB-1 GiB in all, seven ways"),
    Experiment("batch", "mixed", _a("batch --layout mixed --totals 1MiB,16MiB,256MiB --reps 5 --reps-large 3 --warmup 1 --seed 1"), 27.0, 0, _SKIP, fresh=False, what="the same with seeded mixed sizes"),
    *(
        Experiment("idle", f"pause-{ms}ms", _a(f"{_IDLE} --pause {ms}", reps="40"), est, 0, _SKIP, fresh=False, what=f"4 KiB-1 MiB, each copy after a {ms} ms pause, GPU idle")
        for ms, est in _PAUSES.items()
    ),
    # workload: --quick leaves it out: the quick plan's 150 s hold no more.
    Experiment("workload", "steps", _a("workload --steps 30 --warmup 12 --passes 2"), 19.5, 0, _SKIP, fresh=False, what="each recipe in a training-like step (36.75 MiB batch, ~4.5 ms compute), beside the batch already on the GPU"),
    Experiment("reference", "reference", _a(_REF), 18.3, 0, _SKIP, fresh=False, what="the kit's medians beside torch.utils.benchmark's, same copies, same process"),
    Experiment("concurrent", "concurrent", _a(f"{_GPUS} --reps 5 --reps-large 3 --warmup 2"), 20, 15, _a(f"{_GPUS} --reps 3 --reps-large 2 --warmup 1"), min_gpus=2, what="1 then 2 GPUs copying at once"),
)  # fmt: skip


def experiments(
    quick: bool = False, gpus: int = 1, plan: tuple[Experiment, ...] | None = None
) -> list[Experiment]:
    """The experiments one recording runs: those this machine's GPU count allows
    (and, with ``quick``, those ``--quick`` keeps)."""
    return [e for e in (PLAN if plan is None else plan) if gpus >= e.min_gpus and (not quick or e.in_quick())]


def select(exps: list[Experiment], only: str | None) -> list[Experiment]:
    """The experiments ``only`` names (comma list of runs, ``kind/run`` or kinds)."""
    if only is None:
        return exps
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    if not wanted:
        raise ValueError(f"no experiment given: choose from {', '.join(e.run for e in exps)} or a kind")
    known = {e.run for e in exps} | {e.name for e in exps} | {e.kind for e in exps}
    bad = [w for w in wanted if w not in known]
    if bad:
        raise ValueError(
            f"no experiment named {bad[0]!r}: choose from {', '.join(e.run for e in exps)} or a kind"
        )
    return [e for e in exps if {e.run, e.name, e.kind} & set(wanted)]


def why_lacking(kinds: list[str], manifest: Mapping[str, Any] | None) -> str:
    """Why a recording (its recording.json, None if unknown) may hold no runs of ``kinds``,
    for a notebook: ``" (reason; reason)"``, or ``""`` when the plan cannot say."""
    m = manifest if isinstance(manifest, Mapping) else {}
    made = m.get("plan_version")
    why = []
    for kind in kinds:
        if kind != "sweep" and str(m.get("device", "cuda")).startswith("cpu"):
            why.append("they need a CUDA GPU: this recording was made with --device cpu")
        elif kind == "concurrent":
            why.append("they need two GPUs")
        elif kind == "idle" and m.get("quick"):
            why.append("the idle runs are in the full plan only: this is a --quick recording")
        elif kind == "idle" and isinstance(made, int) and not isinstance(made, bool) and made < 3:
            why.append(f"the idle runs came with plan 3: this recording was made with plan {made}")
        elif kind == "reference" and isinstance(made, int) and not isinstance(made, bool) and made < 4:
            why.append(f"the reference run came with plan 4: this recording was made with plan {made}")
        elif kind == "reference" and m.get("quick"):
            why.append("the reference run is in the full plan only: this is a --quick recording")
        elif kind == "idle":
            why.append(
                "the idle runs came with plan 3: a --quick recording, or one made with an older plan, has none"
            )
        elif kind == "workload" and not m.get("quick"):
            why.append("the workload runs came with plan 4: a recording made with an older plan has none")
        elif m.get("quick") and not any(e.in_quick() for e in PLAN if e.kind == kind):
            why.append("only the full plan makes them: this is a --quick recording")
    said = "; ".join(dict.fromkeys(why))  # in order, each once
    return f" ({said})" if said else ""


def total_seconds(exps: list[Experiment], quick: bool = False) -> float:
    """Estimated seconds for ``exps`` on an H200."""
    return float(sum(e.quick_seconds if quick else e.seconds for e in exps))


def show_args(args: list[str] | tuple[str, ...]) -> str:
    """The arguments as one line, a long list of sizes or seqs shortened."""
    out = []
    for a in args:
        if len(a) > 40 and re.fullmatch(r"[0-9,]+", a):
            n = a.count(",") + 1
            out.append(f"<{n} values, {a.split(',')[0]}..{a.split(',')[-1]}>")
        else:
            out.append(a)
    return " ".join(out)


def plan_lines(runs: list[dict[str, Any]], gpus: int, device: str) -> list[str]:
    """``--dry-run``'s lines: each run (as stored in recording.json) with its estimate, then the total."""
    lines = []
    for i, r in enumerate(runs, 1):
        env = " ".join(f"{k}={v}" for k, v in r["env"].items())
        lines.append(
            f"{i:3d}. {r['name']:30s} ~{r['seconds']:4.0f} s  h2dlab {show_args(r['args'])}"
            + (f"  [{env}]" if env else "")
        )
    total = sum(r["seconds"] for r in runs)
    where = f"{gpus} GPU{'s' if gpus != 1 else ''}" if device != "cpu" else "its CPU (sweep only)"
    lines.append(f"estimated {total:.0f} s (~{total / 60:.1f} min) on an H200 machine with {where}")
    return lines
