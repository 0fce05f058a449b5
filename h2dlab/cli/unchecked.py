"""What ``explain`` could not check, and why: said beside its answer, never left out unseen.

Kept beside ``cli_explain``. A timed row (no warm-up, no error) is checked when
``outliers.detect`` scored it against an expectation (its ``robust_z``); it is not when its
time is 0 ms (no expectation can use it) or its strategy has too few usable timed copies in
its run. This module only counts and words them; the rules are ``outliers``'.
"""

from __future__ import annotations

from h2dlab.errors import UsageError

__all__ = ["nothing_checked", "unchecked", "unfitted"]


def unchecked(e) -> tuple[int, list[str]]:
    """The timed rows ``detect`` checked, and why the others were not.

    Parameters
    ----------
    e
        ``outliers.explain``'s table (``warmup``, ``error``, ``wall_ms``, ``event_ms``,
        ``robust_z``).

    Returns
    -------
    tuple
        (rows checked, one sentence per reason the other timed rows were not; empty when
        every timed row was checked).
    """
    from h2dlab.explain.rows import value_ms

    timed = ~e["warmup"].astype(bool) & (e["error"] == "")
    checked = timed & e["robust_z"].notna()
    rest = timed & ~checked
    zero = rest & ~(value_ms(e) > 0)
    few = rest & ~zero
    reasons = []
    if zero.any():
        cols = [c for c in ("wall_ms", "event_ms") if (zero & (e[c] == 0)).any()]
        reasons.append(
            f"{int(zero.sum())} with a time of 0 ms ({', '.join(cols) or 'wall_ms'}), which neither the fit nor the check can use"
        )
    if few.any():
        names = ", ".join(sorted(set(e.loc[few, "strategy"].astype(str))))
        reasons.append(
            f"{int(few.sum())} of a strategy with fewer than 3 usable timed copies in its run ({names})"
        )
    return int(checked.sum()), reasons


def unfitted(e, fitted, names: dict) -> list[str]:
    """One sentence per run and strategy whose timed copies got no fitted line (``model.fit``
    needs copies of two sizes or more with a time above 0), naming its one size."""
    from h2dlab.explain.rows import timed
    from h2dlab.units import fmt_bytes

    done = set(zip(fitted["run_id"], fitted["strategy"], strict=True)) if len(fitted) else set()
    out = []
    for (rid, strategy), g in timed(e).groupby(["run_id", "strategy"], sort=False):
        if (rid, strategy) not in done:
            sizes = sorted(set(g["size_bytes"]))
            out.append(f"{names.get(rid, rid)} {strategy}: copies of one size only ({fmt_bytes(sizes[0])})")
    return out


def nothing_checked(rep: dict, source: str) -> None:
    """Refuse (``UsageError``, exit 2) a report that checked no copy, saying why: an answer
    of "0 of N flagged" would read as a clean bill (``compare`` too exits 2 with nothing)."""
    if rep["checked_rows"]:
        return
    why = "; ".join(rep["not_checked"]) or "every row is a warm-up or records an error"
    what = "no timed copy that succeeded" if not rep["timed_rows"] else f"{rep['timed_rows']} timed copies"
    raise UsageError(f"nothing to explain: {source} holds {what}, and no copy could be checked ({why})")
