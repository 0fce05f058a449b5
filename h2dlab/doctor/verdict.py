"""What to change at each copy site, and what it would save per step on a recorded machine.

The estimates come from a recording's ``sweep`` and ``d2h`` tables: the median time per copy
of each strategy at the site's copy size, interpolated in log-log between the recorded sizes
(:func:`h2dlab.explain.model.interpolate_ms`), and the fitted line
``latency = overhead + bytes / bandwidth`` (:func:`h2dlab.explain.model.fit`) for a strategy the
tables have no medians of. The medians come first because ``pageable``'s time is not a
straight line in size (13-15 GB/s at 16-64 MiB, 7 GB/s at 1 GiB on the H200): its line
would misjudge a 64 MiB batch by half. The doctor predicts each recipe's copy time per step
and ranks the recipes by the time they would leave in the step. The recipes are the kit's
(``RECIPES``): their code lives in ``examples/`` (issue #31); the workloads that recorded
the bundled traces implement each one (``data/traces/workloads.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

__all__ = ["RECIPES", "Machine", "load_machine", "verdicts"]

#: recipe id -> what a reader does (the first words of a recommendation)
RECIPES: dict[str, str] = {  # simplest first: among near-equal estimates the first here wins
    "as_is": "keep it as it is",
    "dataloader_pin_memory": "give the DataLoader pin_memory=True and copy with non_blocking=True",
    "pin_once_non_blocking": "pin the source once (outside the loop) and copy with non_blocking=True",
    "pin_each_step": "call pin_memory() on the batch, then .to(device, non_blocking=True)",
    "pinned_d2h_non_blocking": "copy into a pinned buffer with non_blocking=True and synchronize once, "
    "where the value is needed",
    "pack_small_tensors": "pack the small tensors into one pinned buffer and copy it once (non_blocking=True)",
    "side_stream_prefetch": "keep the batch in pinned memory and copy the next one on a side stream "
    "(non_blocking=True) while this step computes",
}
#: among estimates within this much (ms per step), the simpler recipe (earlier here) is named first
TIE_MS = 0.05
_ORDER = list(RECIPES)
#: a saving below both of these is not worth a change
MIN_SAVING_MS, MIN_SAVING_SHARE = 0.05, 0.05


@dataclass
class Machine:
    """A recording's copy times: fitted lines, strategy -> (overhead_ms, bytes per ms), and
    the medians per strategy and size (``model.medians``; None: lines only)."""

    name: str
    label: str
    lines: dict[str, tuple[float, float]] = field(default_factory=dict)
    medians: pd.DataFrame | None = None

    def ms(self, strategy: str, size_bytes: float) -> float:
        """Predicted time of one copy of ``size_bytes`` by ``strategy`` (NaN if not recorded)."""
        if not (size_bytes > 0):
            return float("nan")
        if self.medians is not None and (self.medians["strategy"] == strategy).any():
            from h2dlab.explain.model import interpolate_ms

            return interpolate_ms(self.medians, strategy, size_bytes)
        if strategy not in self.lines:
            return float("nan")
        a, per_ms = self.lines[strategy]
        return a + size_bytes / per_ms


def load_machine(recording: Any = "h200") -> Machine:
    """Fit the recording's sweep (host to device) and d2h tables, once.

    ``recording``: ``"h200"`` (bundled), a recording folder, or a ``session.Recorded``.
    """
    from h2dlab.explain import model
    from h2dlab.recording import session

    rec = (
        recording if isinstance(recording, session.Recorded) else session.recording(recording, mode="replay")
    )
    tables = []
    for kind in ("sweep", "d2h"):
        t = rec.get(kind)
        if t is not None:
            tables.append(t)
    lines: dict[str, tuple[float, float]] = {}
    med = None
    if tables:
        df = pd.concat(tables, ignore_index=True)
        f = model.fit(df, by=("strategy",), n_boot=0)
        for r in f.itertuples():
            lines[str(r.strategy)] = (float(r.overhead_us) / 1e3, float(r.gbps) * 1e6)
        med = model.medians(df)
    m = rec.machine()
    gpu = m.get("gpu_name") or "GPU unknown"
    label = f"{rec.name} ({gpu}, {rec.date()})" if hasattr(rec, "date") else f"{rec.name} ({gpu})"
    return Machine(name=rec.name, label=label, lines=lines, medians=med)


def _candidates(site: pd.Series, steps: int, kernel_ms: float, m: Machine, loader: bool) -> dict[str, float]:
    n = site["count"] / steps
    size = float(site["bytes_per_copy"])
    total = size * n
    out: dict[str, float] = {}
    if site["direction"] == "h2d" and site["source_memory"] in ("pageable", "pinned"):
        pinned = n * m.ms("pinned_reuse", size)
        out["side_stream_prefetch"] = max(0.0, pinned - kernel_ms)
        if n >= 8 and size <= 4 * 2**20:
            out["pack_small_tensors"] = m.ms("pinned_reuse", total)
        out["pin_once_non_blocking"] = pinned
        out["dataloader_pin_memory" if loader else "pin_each_step"] = n * m.ms("pin_then_copy", size)
    elif site["direction"] == "d2h" and site["dest_memory"] == "pageable":
        out["pinned_d2h_non_blocking"] = n * m.ms("d2h_pinned_reuse", size)
    return {k: v for k, v in out.items() if math.isfinite(v)}


_FROM = {"h2d": "from", "d2h": "into"}


def _mib(b: float) -> str:
    return f"{b / 2**20:.1f} MiB" if b >= 2**20 else f"{b / 1024:.1f} KiB" if b >= 1024 else f"{b:.0f} B"


def verdicts(analysis: Any, m: Machine) -> list[dict[str, Any]]:
    """One verdict per site of ``analysis`` (an :class:`~h2dlab.doctor.sites.Analysis`):
    ``recommendation`` (a sentence), ``recipe``, ``saving_ms_per_step`` and the ranked
    ``alternatives`` [{recipe, estimate_ms_per_step}] with ``as_is`` among them."""
    steps = analysis.steps
    out = []
    for _, s in analysis.sites.iterrows():
        current = float(s["cost_ms_per_step"])
        n = s["count"] / steps
        word = "copy" if n == 1 else "copies"
        head = (
            f"{n:g} {s['direction']} {word} of {_mib(s['bytes_per_copy'])} {_FROM.get(s['direction'], 'in')} "
            f"{s['host_memory']} memory per step, "
            f"{current:.2f} ms exposed"
            if s["bytes"] >= 0
            else f"{n:g} {s['direction']} {word} per step, {current:.2f} ms exposed"
        )
        if s["bytes"] < 0:
            out.append(_v("as_is", 0.0, f"{head}; the trace lacks their bytes: no estimate", []))
            continue
        if s["direction"] not in _FROM:
            out.append(_v("as_is", 0.0, f"{head}; not a host copy: nothing of the kit applies", []))
            continue
        cands = _candidates(s, steps, analysis.kernel_ms_per_step, m, analysis.has_dataloader)
        if not cands:
            why = (
                f"the recording {m.name!r} lacks the strategies this site needs"
                if s["source_memory"] in ("pageable", "pinned") or s["dest_memory"] == "pageable"
                else "nothing the kit measures would change it"
            )
            out.append(_v("as_is", 0.0, f"{head}; {why}", []))
            continue
        cands["as_is"] = current
        low = min(cands.values())
        first = min((k for k, v in cands.items() if v <= low + TIE_MS), key=_ORDER.index)
        ranked = [(first, cands[first])] + sorted(
            ((k, v) for k, v in cands.items() if k != first), key=lambda kv: (kv[1], _ORDER.index(kv[0]))
        )
        alts = [{"recipe": k, "estimate_ms_per_step": round(v, 4)} for k, v in ranked]
        best, best_ms = ranked[0]
        saving = current - best_ms
        if best == "as_is" or saving < max(MIN_SAVING_MS, MIN_SAVING_SHARE * current):
            text = f"{head}; {RECIPES['as_is']}: no recipe saves more than {max(saving, 0.0):.2f} ms per step on {m.label}"
            out.append(_v("as_is", 0.0, text, alts))
            continue
        text = f"{head}; {RECIPES[best]}: ≈{best_ms:.2f} ms per step on {m.label}"
        out.append(_v(best, saving, text, alts))
    return out


def _v(recipe: str, saving: float, text: str, alts: list) -> dict[str, Any]:
    return {
        "recipe": recipe,
        "recommendation": text,
        "saving_ms_per_step": round(float(max(saving, 0.0)), 4),
        "alternatives": alts,
    }
