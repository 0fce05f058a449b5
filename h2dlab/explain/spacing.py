"""What a small copy costs (``small_copy_floor``, here since issue #30) as one of two costs,
never mixed: back to back, as in a user's loop, or after an idle gap (the kit's own work
between copies before schema 6, or a ``--pause``), named from the host time between copies
(``causes_wake.idle_gap_ms``); and the reference check, the kit's medians against
``torch.utils.benchmark``'s. No torch here."""

from __future__ import annotations

from typing import Any

import pandas as pd

from h2dlab.escape import md_code
from h2dlab.explain.finding import Finding, size_text
from h2dlab.explain.rows import check_values, timed, value_ms

__all__ = [
    "BACK_TO_BACK_MS",
    "reference_agreement",
    "small_copy_floor",
    "spacing_lead",
    "spacing_of",
    "spacing_words",
]

#: Copies whose median host gap (one copy's end to the next one's start) is at most this
#: follow each other as in a user's loop: "back to back" (DESIGN.md: the kit's own work
#: between timed copies stays under 0.2 ms). Longer, each copy is a cost after an idle gap.
BACK_TO_BACK_MS = 0.2


def spacing_of(df: pd.DataFrame, rows: pd.Index) -> tuple[float, str]:
    """The median host gap (ms) before the copies at ``rows`` of ``df`` and its name:
    ``"back_to_back"``, ``"after_idle_gap"``, or ``"unknown"`` (no start times)."""
    from h2dlab.explain.causes_wake import idle_gap_ms

    try:
        gap = float(idle_gap_ms(df).reindex(rows).median())
    except ValueError:
        gap = float("nan")
    if gap != gap:
        return gap, "unknown"
    return gap, "back_to_back" if gap <= BACK_TO_BACK_MS else "after_idle_gap"


def spacing_lead(size: str, gap: float, spacing: str) -> str:
    """The opening of a sentence on copies of ``size`` that says which cost they show,
    ending with "A" (or "a") for "... copy costs"."""
    if spacing == "back_to_back":
        return (
            f"At {size}, the copies ran back to back: a median {gap:.2f} ms of host time between one "
            "copy's end and the next one's start. A"
        )
    if spacing == "after_idle_gap":
        return (
            f"At {size}, each copy followed an idle gap: a median {gap:.2f} ms of host time since the "
            "previous copy ended, so these are costs after an idle gap, not back to back. A"
        )
    return f"At {size} a"


def spacing_words(gaps: dict[float, float], have: list[float]) -> str:
    """For the idle runs (``factors_idle.idle_wake``): which pauses' copies ran back to back
    (a median gap of at most :data:`BACK_TO_BACK_MS`) and which each followed an idle gap."""

    def _and(items: list[str]) -> str:
        return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]

    if not have:
        return ""
    b2b = [f"{q:g}" for q in have if gaps[q] <= BACK_TO_BACK_MS]
    idle = [f"{q:g}" for q in have if gaps[q] > BACK_TO_BACK_MS]
    if not b2b:
        return " Every time here is a cost after an idle gap, not a back-to-back cost."
    if not idle:
        return (
            f" Every pause left at most {BACK_TO_BACK_MS:g} ms between copies: these are back-to-back costs."
        )
    return (
        f" Copies after {_and(b2b)} ms ran back to back (at most {BACK_TO_BACK_MS:g} ms between them); "
        f"those after {_and(idle)} ms are costs after an idle gap."
    )


def small_copy_floor(df: pd.DataFrame, *, same_within: float = 1.5) -> Finding:
    """What the smallest measured copy costs, per strategy (CUDA events and host clock,
    median and quartiles in µs). ``holds`` ("whatever the strategy") when the slowest
    strategy is within ``same_within`` x the fastest.

    It names which of two costs the copies show: back to back, or after an idle gap
    (:func:`spacing_of`, from the host time between copies).

    Parameters
    ----------
    df
        A sweep run.
    same_within
        The largest slowest/fastest ratio still called "the same".

    Returns
    -------
    Finding
        ``values``: ``lo_us``, ``hi_us``, ``gap_ms``, ``spacing``; ``table``: per strategy
        ``event_us``, ``q1_us``, ``q3_us``, ``wall_us``.

    Raises
    ------
    ValueError
        ``df`` holds no timed copy that succeeded.
    """
    check_values(df, ("strategy", "size_bytes", "wall_ms"))
    t = timed(df)
    if t.empty:
        raise ValueError(
            "small_copy_floor needs timed copies that succeeded: the table has none (warm-up, errors)"
        )
    t = t[t.size_bytes == t.size_bytes.min()]
    t = t.assign(event_us=value_ms(t) * 1e3, wall_us=t.wall_ms * 1e3)
    by = (
        t.groupby("strategy")
        .agg(
            event_us=("event_us", "median"),
            q1_us=("event_us", lambda v: v.quantile(0.25)),
            q3_us=("event_us", lambda v: v.quantile(0.75)),
            wall_us=("wall_us", "median"),
        )
        .sort_values("event_us")
    )
    lo, hi = by.event_us.iloc[0], by.event_us.iloc[-1]
    holds = bool(hi / lo <= same_within)
    size = size_text(int(t.size_bytes.iloc[0]))
    gap, spacing = spacing_of(df, t.index)
    verdict = (
        f"{spacing_lead(size, gap, spacing)} copy costs {lo:.0f}–{hi:.0f} µs by CUDA events (medians): "
        f"`{by.index[0]}` fastest, `{by.index[-1]}` slowest, {hi / lo:.1f}x apart; "
        f"by the host clock {by.wall_us.min():.0f}–{by.wall_us.max():.0f} µs. "
        + ("The strategy hardly matters at this size." if holds else "The strategy matters even here.")
        + " These are the host's figures: they, and which strategy is fastest, move between recordings."
    )
    values = {"lo_us": float(lo), "hi_us": float(hi), "gap_ms": gap, "spacing": spacing}
    return Finding(verdict, holds, values, by.reset_index())


def reference_agreement(rows: list[dict[str, Any]], *, bounds: tuple[float, float] = (0.8, 1.25)) -> Finding:
    """The kit's medians against ``torch.utils.benchmark``'s (copy + synchronize, same process):
    the rows ``measure --reference`` stores in env.json under ``reference`` (or a benchmark's
    ``reference`` list). ``holds`` when every kit / reference ratio lies within ``bounds``
    (issue #30: the event time may read shorter than copy + synchronize, not much longer).

    Parameters
    ----------
    rows
        Dicts with ``strategy``, ``size_bytes``, ``kit_median_us`` and ``reference_median_us``.
    bounds
        The lowest and highest ratio that still agree.

    Returns
    -------
    Finding
        ``values``: ``lo``, ``hi`` (ratios), ``outside`` (cells out of bounds); ``table``: the
        rows with ``ratio``. With no rows, ``holds`` is False and the verdict says so.
    """
    cols = ["strategy", "size_bytes", "kit_median_us", "reference_median_us"]
    # the rows come from an env.json, a file anyone can edit: rows that are not objects, and
    # cells without a positive finite size and times, are left out; names stay text
    t = pd.DataFrame([r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else [], columns=cols)
    t["strategy"] = t["strategy"].astype(str)
    for c in cols[1:]:
        t[c] = pd.to_numeric(t[c], errors="coerce")
    good = t[cols[1:]].apply(lambda s: s.between(0, float("inf"), inclusive="neither")).all(axis=1)
    t = t[good & (t["size_bytes"] == t["size_bytes"].round())]
    if t.empty:
        return Finding(
            "No reference check in this run: `h2dlab measure --reference` (the recording's "
            "`reference/reference`) times the same copies with `torch.utils.benchmark`.",
            False,
            {"lo": float("nan"), "hi": float("nan"), "outside": []},
            t,
        )
    t = t.assign(ratio=t.kit_median_us / t.reference_median_us).sort_values(["strategy", "size_bytes"])
    out = t[(t.ratio < bounds[0]) | (t.ratio > bounds[1])]
    lo, hi = float(t.ratio.min()), float(t.ratio.max())
    sizes = f"{size_text(int(t.size_bytes.min()))}–{size_text(int(t.size_bytes.max()))}"
    names = ", ".join(md_code(s) for s in dict.fromkeys(t.strategy))
    verdict = (
        f"Beside `torch.utils.benchmark` (copy + synchronize, same process), the kit's medians were "
        f"{lo:.2f}–{hi:.2f}x its times over {len(t)} cells ({names}, {sizes}). "
        "The kit's figure is CUDA-event time, which leaves out the synchronize's return; the reference's is "
        "the host's time for the copy and its synchronize. "
        + (
            f"All lie within {bounds[0]:g}–{bounds[1]:g}x."
            if out.empty
            else "Out of "
            + f"{bounds[0]:g}–{bounds[1]:g}x: "
            + ", ".join(
                f"{md_code(r.strategy)} at {size_text(int(r.size_bytes))} ({r.ratio:.2f}x)"
                for r in out.itertuples()
            )
            + "."
            + (
                " A copy of 64 KiB or less is mostly the host's time to issue it, which moves from process to "
                "process."
                if (out.size_bytes <= 2**16).any()
                else ""
            )
        )
    )
    values = {"lo": lo, "hi": hi, "outside": [(r.strategy, int(r.size_bytes)) for r in out.itertuples()]}
    return Finding(verdict, out.empty, values, t.reset_index(drop=True))
