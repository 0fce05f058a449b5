"""``h2dlab doctor``: read a torch.profiler trace and say what its copies cost and what to change.

    import h2dlab
    with h2dlab.profile("trace.json.gz") as p:   # a few steps of your loop
        for batch in loader:
            step(batch); p.step()
    h2dlab.doctor("trace.json.gz")               # sites, exposed time, the recipe to use

Reading the trace is :mod:`~h2dlab.doctor.trace`; the copies and their exposed time
:mod:`~h2dlab.doctor.sites`; the verdicts, from a recording's copy times,
:mod:`~h2dlab.doctor.verdict`; the figure :mod:`~h2dlab.doctor.plot`.
"""

from __future__ import annotations

import os
import re
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from h2dlab.doctor.profiling import profile
from h2dlab.doctor.sites import Analysis, analyse
from h2dlab.doctor.trace import env_beside, read_trace
from h2dlab.doctor.verdict import RECIPES, Machine, load_machine, verdicts
from h2dlab.errors import UsageError
from h2dlab.escape import md_code, md_text

__all__ = [
    "RECIPES",
    "SCHEMA",
    "TRACES",
    "Diagnosis",
    "Machine",
    "diagnose",
    "load_machine",
    "profile",
    "trace_path",
]

#: the ``schema`` of ``h2dlab doctor --json``
SCHEMA = "h2dlab.doctor/1"


@dataclass(repr=False)
class Diagnosis:
    """A trace's copy sites with a verdict each (:func:`diagnose`)."""

    analysis: Analysis
    machine: Machine
    verdicts: list[dict[str, Any]]
    #: the trace's env.json (:func:`~h2dlab.doctor.trace.env_beside`; ``{}``: none): its GPU and date
    env: dict[str, Any] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return self.analysis.steps

    @property
    def exposed_copy_ms_per_step(self) -> float:
        """What the copies between host and GPU add to a step: their exposed GPU time plus
        the GPU idle time that waits on the host while it issues them or pins their source,
        per step. Copies within the GPU (``d2d``, e.g. inside ``torch.cat``) are sites of
        their own but not counted here: they are the program's compute, not its data feed."""
        c = self.analysis.copies
        c = c[(c["step"] >= 0) & c["direction"].isin(("h2d", "d2h"))]
        return float((c["exposed_ms"].sum() + c["idle_wait_ms"].sum()) / self.steps)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` object: ``schema``, ``steps``, ``exposed_copy_ms_per_step``, ``sites``."""
        sites = []
        c = self.analysis.copies
        c = c[c["step"] >= 0].assign(cost=lambda d: d["exposed_ms"] + d["idle_wait_ms"])
        keys = ["site", "direction", "source_memory", "dest_memory", "host_memory", "stream"]
        by_step = c.groupby([*keys, "step"], dropna=False)["cost"].sum()
        for (_, s), v in zip(self.analysis.sites.iterrows(), self.verdicts, strict=True):
            per = by_step.get(tuple(s[k] for k in keys), None)
            steps = [round(float(per.get(i, 0.0)), 4) if per is not None else 0.0 for i in range(self.steps)]
            sync = s["synchronous_share"]
            sites.append(
                {
                    "site": str(s["site"]),
                    "op_chain": s["op_chain"] if isinstance(s["op_chain"], str) else "",  # NaN: no call
                    "direction": s["direction"],
                    "source_memory": s["source_memory"],
                    "dest_memory": s["dest_memory"],
                    "host_memory": s["host_memory"],
                    "stream": int(s["stream"]),
                    "count": int(s["count"]),
                    "bytes": int(s["bytes"]),
                    "bytes_per_copy": float(s["bytes_per_copy"]),
                    "gpu_ms": round(float(s["gpu_ms"]), 4),
                    "exposed_ms": round(float(s["exposed_ms"]), 4),
                    "idle_wait_ms": round(float(s["idle_wait_ms"]), 4),
                    "exposed_ms_per_step": round(float(s["cost_ms_per_step"]), 4),
                    "exposed_ms_by_step": steps,
                    "synchronous": None if sync != sync else bool(sync >= 0.5),
                    "synchronous_share": None if sync != sync else round(float(sync), 3),
                    **v,
                }
            )
        return {
            "schema": SCHEMA,
            "trace": os.path.basename(self.analysis.path),
            "steps": self.steps,
            "exposed_copy_ms_per_step": round(self.exposed_copy_ms_per_step, 4),
            "kernel_ms_per_step": round(self.analysis.kernel_ms_per_step, 4),
            "recording": self.machine.label,
            "notes": list(self.analysis.notes),
            "sites": sites,
        }

    def table(self) -> str:
        """The terminal table: the answer first, then one line per site and its verdict."""
        a = self.analysis
        head = (
            f"{os.path.basename(a.path)}: {self.steps} step{'s' if self.steps != 1 else ''}"
            f"{'' if a.has_steps else ' (no ProfilerStep# ranges: the whole trace)'}; "
            f"copies add {self.exposed_copy_ms_per_step:.2f} ms per step "
            f"(kernels {a.kernel_ms_per_step:.2f} ms per step); estimates from {self.machine.label}"
        )
        cols = f"{'#':>2} {'site':34.34s} {'dir':4s} {'host mem':8s} {'n/step':>7s} {'MiB/step':>9s} "
        cols += f"{'gpu ms':>7s} {'exposed':>8s} {'idle':>6s} {'sync':>4s} {'saves ms':>8s}"
        lines = [head, "", cols]
        for i, ((_, s), v) in enumerate(zip(a.sites.iterrows(), self.verdicts, strict=True), 1):
            st = self.steps
            sync = s["synchronous_share"]
            lines.append(
                f"{i:>2} {str(s['site']):34.34s} {s['direction']:4s} {s['host_memory']:8.8s} "
                f"{s['count'] / st:7.4g} {max(s['bytes'], 0) / st / 2**20:9.2f} {s['gpu_ms'] / st:7.2f} "
                f"{s['exposed_ms'] / st:8.2f} {s['idle_wait_ms'] / st:6.2f} "
                f"{'?' if sync != sync else 'yes' if sync >= 0.5 else 'no':>4s} {v['saving_ms_per_step']:8.2f}"
            )
        lines.append("")
        lines += [f"{i:>2} {v['recommendation']}" for i, v in enumerate(self.verdicts, 1)]
        lines += [f"note: {n}" for n in a.notes]
        return "\n".join(lines)

    def summary(self) -> str:
        """One paragraph in words, computed from the diagnosis: what the copies add to a step
        and the first site's verdict (Markdown)."""
        a = self.analysis
        name = os.path.basename(a.path)
        text = (
            f"In {md_code(name)} ({self.steps} traced step{'s' if self.steps != 1 else ''}), copies add "
            f"{self.exposed_copy_ms_per_step:.2f} ms to each step, beside {a.kernel_ms_per_step:.2f} ms of kernels."
        )
        if self.verdicts:
            v = self.verdicts[0]
            head, _, advice = str(v["recommendation"]).partition("; ")  # two sentences, not one long one
            text += f" The costliest site ({md_code(a.sites['site'].iat[0])}): {md_text(head)}." + (
                f" What to do: {md_text(advice)}." if advice else ""
            )
        return text + "".join(f" Note: {md_text(n)}." for n in a.notes)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        # short: the trace's file name, not its folder (a shared notebook keeps no home path)
        name = str(self.analysis.path).replace("\\", "/").rsplit("/", 1)[-1]
        return (
            f"<Diagnosis of {name!r}: {self.steps} step(s), {len(self.verdicts)} copy site(s), "
            f"{self.exposed_copy_ms_per_step:.2f} ms of copies exposed per step>"
        )

    def _repr_markdown_(self) -> str:
        # a code fence no line of the table can close: longer than any run of backticks in it
        # (a site or file name read from the trace may hold some)
        text = self.table()
        fence = "`" * max(3, 1 + max((len(r) for r in re.findall(r"`+", text)), default=0))
        return f"{fence}\n{text}\n{fence}"


#: where the bundled traces live (``data/traces/record_traces.py`` writes them)
TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"


def trace_path(trace: str | os.PathLike[str] = "", example: str = "batch_pageable") -> Path:
    """``trace`` when given, else the bundled trace named ``example`` (``data/traces``).

    Raises
    ------
    h2dlab.errors.UsageError
        The bundled trace is not there (it is recorded on a GPU by ``record_traces.py``).
    """
    if os.fspath(trace):
        return Path(trace).expanduser()
    p = TRACES / f"{example}.json.gz"
    if not p.is_file():
        have = sorted(q.name.removesuffix(".json.gz") for q in TRACES.glob("*.json.gz"))
        raise UsageError(
            f"no bundled trace {example!r} in {TRACES} (it has: {', '.join(have) or 'none yet'}): give your "
            "own TRACE, or record them on a GPU with python data/traces/record_traces.py --out data/traces"
        )
    return p


def diagnose(
    path: str | os.PathLike[str], recording: Any = "h200", machine: Machine | None = None
) -> Diagnosis:
    """Read a torch.profiler trace and judge its copies against a recorded machine.

    Parameters
    ----------
    path
        The ``.json`` or ``.json.gz`` trace that ``torch.profiler`` (or :func:`profile`) wrote.
    recording
        ``"h200"`` (bundled), a recording folder, or a ``session.Recorded``: whose fitted
        lines estimate each recipe.
    machine
        An already fitted :class:`Machine` (skips fitting the recording again).

    Returns
    -------
    Diagnosis
        ``to_dict()`` (the ``--json`` object), ``table()`` (the terminal table).

    Raises
    ------
    h2dlab.errors.UsageError
        The file is not a trace, is truncated, holds no GPU activity or no copies.
    """
    analysis = analyse(read_trace(path))
    m = machine if machine is not None else load_machine(recording)
    return Diagnosis(analysis=analysis, machine=m, verdicts=verdicts(analysis, m), env=env_beside(path))


class _CallableModule(types.ModuleType):
    """``h2dlab.doctor(path)`` is :func:`diagnose`; the rest stays a module."""

    def __call__(self, path: str | os.PathLike[str], recording: Any = "h200") -> Diagnosis:
        return diagnose(path, recording=recording)


sys.modules[__name__].__class__ = _CallableModule
