"""Side by side with PyTorch's tutorial "A guide on good usage of ``non_blocking`` and
``pin_memory()`` in PyTorch" (pytorch.org/tutorials/intermediate/pinmem_nonblock.html):
where the kit's measurements agree with its two timing claims, and where they do not.

1. ``tensor.pin_memory().to(device)`` is usually slower than ``tensor.to(device)``, up to
   about twice as slow. Checked per size on a sweep (``pin_then_copy`` against ``pageable``,
   its pinned block cached) and, where recorded, inside a training-like step (``workload``).
2. For many small tensors, a loop of ``.to(device, non_blocking=True)`` with one
   synchronisation beats a loop of blocking ``.to(device)``. Checked on the ``batch`` table.

Both are host-side figures (pinning and staging run on the host): they move between
recordings of the same machine. No torch here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from h2dlab.explain.finding import Finding
from h2dlab.explain.rows import timed, value_ms
from h2dlab.units import fmt_bytes

__all__ = ["TUTORIAL", "tutorial"]

#: Where the claims come from.
TUTORIAL = "PyTorch's pin_memory/non_blocking tutorial"


def _medians(df: pd.DataFrame, by: list[str]) -> pd.Series:
    t = timed(df)
    return t.assign(ms=value_ms(t)).groupby(by)["ms"].median()


def _pin_first(sweep: pd.DataFrame) -> tuple[str, dict]:
    m = _medians(sweep[sweep.strategy.isin(["pin_then_copy", "pageable"])], ["strategy", "size_bytes"])
    if not {"pin_then_copy", "pageable"} <= set(m.index.get_level_values(0)):
        return "This sweep has no `pin_then_copy` and `pageable` rows to check the first claim.", {}
    ratio = (m["pin_then_copy"] / m["pageable"]).dropna()
    slower = ratio[ratio > 1]
    worst = float(ratio.max())
    at = fmt_bytes(int(ratio.idxmax()))
    values = {"pin_ratio": ratio.to_dict(), "slower_sizes": len(slower), "sizes": len(ratio), "worst": worst}
    agree = "agrees" if len(slower) > len(ratio) / 2 else "does not agree"
    text = (
        f"Pinning first was slower than `x.to()` at {len(slower)} of {len(ratio)} sizes, by up to "
        f'{worst:.2f}x (at {at}), with its pinned block cached: the sweep {agree} with "usually slower".'
    )
    if len(slower) < len(ratio):
        faster = ratio[ratio <= 1]
        lo, hi = (fmt_bytes(int(v)) for v in (faster.index.min(), faster.index.max()))
        text += f" It was faster at the other {len(faster)}, between {lo} and {hi}."
    return text, values


def _in_a_step(workload: pd.DataFrame) -> tuple[str, dict]:
    t = timed(workload)
    steps = t.groupby("strategy")["wall_ms"].median()
    if not {"pin_memory_each_step", "pageable_to"} <= set(steps.index):
        return "", {}
    r = float(steps["pin_memory_each_step"] / steps["pageable_to"])
    word = "slower" if r > 1 else "faster"
    return (
        f"Inside a training-like step, pinning every batch first made the step {r:.2f}x as long as plain `.to()`"
        f" ({word}).",
        {"step_ratio": r},
    )


def _non_blocking(batch: pd.DataFrame) -> tuple[str, dict]:
    b = batch[batch.strategy.isin(["loop_to", "loop_non_blocking"])]
    if b.empty:
        return "This recording has no batch rows to check the second claim.", {}
    n = int(b.n_tensors.max())
    t = timed(b[b.n_tensors == n])
    m = t.groupby(["strategy", "size_bytes"])["wall_ms"].median()  # the host clock brackets every launch
    if not {"loop_to", "loop_non_blocking"} <= set(m.index.get_level_values(0)):
        return "This recording lacks one of the two loops of `.to()`.", {}
    ratio = (m["loop_non_blocking"] / m["loop_to"]).dropna()
    faster = int((ratio < 1).sum())
    agree = "agrees" if faster == len(ratio) else "partly agrees" if faster else "does not agree"
    text = (
        f"For {n} tensors a batch, the non_blocking loop took {ratio.min():.2f}x to {ratio.max():.2f}x the "
        f"blocking loop's time over {len(ratio)} batch totals: the batch run {agree} with the tutorial."
    )
    return text, {"nb_ratio": ratio.to_dict(), "n_tensors": n}


def tutorial(
    sweep: pd.DataFrame, batch: pd.DataFrame | None = None, workload: pd.DataFrame | None = None
) -> Finding:
    """The tutorial's two timing claims, checked against this recording.

    Parameters
    ----------
    sweep
        A sweep with ``pin_then_copy`` and ``pageable`` rows.
    batch
        A ``batch`` table (``loop_to``, ``loop_non_blocking``), or None.
    workload
        A ``workload`` table, or None.

    Returns
    -------
    Finding
        ``verdict``: one sentence per claim, then the note that these are host-side figures;
        ``holds``: both claims agree with the data that is there; ``values``: the ratios.
    """
    first, v1 = _pin_first(sweep)
    step, v2 = _in_a_step(workload) if workload is not None else ("", {})
    second, v3 = _non_blocking(batch) if batch is not None else ("", {})
    holds = (not v1 or v1["slower_sizes"] > v1["sizes"] / 2) and (
        not v3 or all(r < 1 for r in v3["nb_ratio"].values())
    )
    parts = [f"{TUTORIAL} says `x.pin_memory().to()` is usually slower than `x.to()`. {first}"]
    if step:
        parts.append(step)
    if second:
        parts.append(
            f"It also says a loop of `non_blocking=True` copies with one synchronisation beats blocking ones. {second}"
        )
    parts.append("Both are host-side figures: they move between recordings of the same machine.")
    values = {**v1, **v2, **v3}
    return Finding(" ".join(parts), bool(holds) and not np.isnan(v1.get("worst", 0.0)), values)
