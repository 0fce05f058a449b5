"""The answer first: which recipe to paste, from a recording's ``workload`` table.

:func:`decision` is the one function that turns the table (one row per training-like step,
:mod:`h2dlab.measure.workload`) into the decision table of notebook 02 and the README: your
situation, the code, the measured step time and *exposed copy time* (a way's median step
minus the median step with the batch already on the GPU), the step against the way it
replaces, and when the recipe does not pay. No torch here.

Regenerate the README's table from a recording (the lead's step after a new one)::

    python -m h2dlab.findings.workload data/h200 --readme README.md
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from h2dlab.explain.finding import Finding, spread
from h2dlab.units import fmt_bytes

__all__ = ["ROWS", "Row", "decision", "exposed", "main", "readme_block"]


@dataclass(frozen=True)
class Row:
    """One line of the decision table: a situation, its recipe's way, the way it replaces."""

    situation: str
    recipe: str
    code: str
    way: str
    against: str
    against_code: str
    caveat: str


#: The decision table's rows, in the order a reader meets the situations (recipes in examples/).
ROWS: tuple[Row, ...] = (
    Row("One large tensor, copied once", "one_tensor", "`x.to(device)`",
        "pageable_to", "pin_memory_each_step", "`x.pin_memory().to(device)`",
        "a tensor that crosses every step: reuse a pinned buffer (next row)"),
    Row("A batch of one shape every step", "pinned_buffer",
        "pinned buffer made once, `copy_(non_blocking=True)`, event", "pinned_buffer", "pageable_to",
        "`x.to(device)`", "shapes that change every step; here the copy into the buffer is counted"),
    Row("Batches from a `DataLoader`", "dataloader",
        "`DataLoader(pin_memory=True)`, `.to(device, non_blocking=True)`", "loader_pinned", "loader_pageable",
        "`DataLoader()`, `.to(device)`", "`num_workers=0`: the main process then pins every batch itself"),
    Row("Copy batch i+1 while step i computes", "prefetch",
        "side stream, `wait_stream`, `record_stream`", "loader_prefetch", "loader_pageable",
        "`DataLoader()`, `.to(device)`", "a pageable source: its copy cannot run beside compute"),
    Row("Many small tensors every step", "many_tensors",
        "pack into one pinned buffer made once, one copy", "many_packed", "many_loop_to",
        "`[t.to(device) for t in ts]`", "a few large tensors: a copy's fixed cost is then small"),
    Row("Results back to the host", "results_to_host",
        "pinned destination, `non_blocking=True`, event", "results_pinned", "results_cpu",
        "`y.cpu()`", "you read the result at once: the wait moves, it does not go"),
)  # fmt: skip


def exposed(df: pd.DataFrame) -> pd.DataFrame:
    """Per way: the step time's spread and the exposed copy time.

    Parameters
    ----------
    df
        A ``workload`` table (timed rows without an error are used).

    Returns
    -------
    pandas.DataFrame
        Indexed by way: ``step_ms`` (median ``wall_ms``), ``q1_ms``, ``q3_ms``, ``n``,
        ``exposed_ms`` (``step_ms`` minus the ``resident`` way's; NaN without it),
        ``size_bytes``, ``direction``, ``n_tensors``. Ways whose every step failed carry
        their first error in ``error``.
    """
    rows = []
    for way, part in df.groupby("strategy", sort=False):
        ok = part[~part["warmup"].astype(bool) & (part["error"] == "")]
        s = spread(ok["wall_ms"])
        errs = part.loc[part["error"] != "", "error"]
        rows.append({"way": way, "step_ms": s["median"], "q1_ms": s["q1"], "q3_ms": s["q3"], "n": s["n"],
                     "size_bytes": int(part["size_bytes"].iloc[0]), "direction": part["direction"].iloc[0],
                     "n_tensors": int(part["n_tensors"].iloc[0]),
                     "error": errs.iloc[0] if len(errs) and not s["n"] else ""})  # fmt: skip
    out = pd.DataFrame(rows).set_index("way") if rows else pd.DataFrame(columns=["step_ms"])
    base = out["step_ms"].get("resident", np.nan) if len(out) else np.nan
    out["exposed_ms"] = out["step_ms"] - base
    return out


def _ms(v: float) -> str:
    return "–" if not np.isfinite(v) else f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}"


def decision(df: pd.DataFrame, source: str | None = None) -> Finding:
    """The decision table: your situation -> the code -> measured -> when it does not pay.

    Parameters
    ----------
    df
        A ``workload`` table (``h2dlab workload``; a recording's ``workload`` kind).
    source
        What to call the data in the footer (default: the table's dataset name).

    Returns
    -------
    Finding
        ``verdict``: a one-sentence answer, the Markdown table and a footer naming the data;
        ``holds``: the recipes' steps were faster than the ways they replace in every row
        measured; ``values``: ``answer`` (the sentence), ``markdown`` (the table) and
        ``footer``; ``table``: one row per situation with the numbers.
    """
    ex = exposed(df)
    waits = _spec(df).get("loader_wait_ms") or {}
    recs = []
    for r in ROWS:
        have = r.way in ex.index and ex.loc[r.way, "n"] > 0
        base = r.against in ex.index and ex.loc[r.against, "n"] > 0
        mine = ex.loc[r.way] if have else None
        them = ex.loc[r.against] if base else None
        times = them["step_ms"] / mine["step_ms"] if have and base else np.nan
        pays = bool(have and base and them["q1_ms"] > mine["q3_ms"])  # quartiles apart
        if not have:
            why = ex.loc[r.way, "error"] if r.way in ex.index else "not in this recording"
            when = f"not measured: {why}"
        elif base and not pays and mine["q1_ms"] > them["q3_ms"]:
            when = f"did not pay here: its step was slower than {r.against_code}'s"
        elif base and not pays:
            when = f"did not pay here: its steps and {r.against_code}'s overlap (quartiles)"
        else:
            when = r.caveat
        if have and not pays and r.recipe == "one_tensor":
            when = (
                f"{when}. These steps repeat: from the second, {r.against_code} found its pinned block cached. "
                "Copied once, its first call makes a new block (the pinning-first section)"
            )
        if have and _waited_more(waits, r.way, r.against):
            when += f"; its step waited {_ms(waits[r.way])} ms for each batch, against {_ms(waits[r.against])} ms unpinned"
            if not pays:
                when += ": the loader, not the copy, set the pace"
        recs.append({"situation": r.situation, "recipe": r.recipe, "code": r.code, "way": r.way, "against": r.against,
                     "step_ms": mine["step_ms"] if have else np.nan,
                     "exposed_ms": mine["exposed_ms"] if have else np.nan,
                     "against_step_ms": them["step_ms"] if base else np.nan,
                     "against_exposed_ms": them["exposed_ms"] if base else np.nan,
                     "times": times, "pays": pays, "when_not": when, "against_code": r.against_code})  # fmt: skip
    table = pd.DataFrame(recs)
    lines = [
        "| your situation | the code (in `examples/`) | step ms | exposed copy ms | against | speed-up (their step ÷ yours; under 1: slower) | when it does not pay |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for t in table.itertuples():
        vs = f"{t.against_code}: {_ms(t.against_step_ms)} ms, {_ms(t.against_exposed_ms)} exposed"
        x = f"{t.times:.2f}×" if np.isfinite(t.times) else "–"
        lines.append(
            f"| {t.situation} | {t.code} (`recipe_{t.recipe}.py`) | {_ms(t.step_ms)} | {_ms(t.exposed_ms)} | {vs} | {x} | {t.when_not} |"
        )
    markdown = "\n".join(lines)
    footer = _footer(df, ex, source)
    answer = _answer(ex, "CPU (a test run)" if _spec(df).get("device") == "cpu" else "GPU", table, waits)
    holds = bool(table["pays"].all())
    return Finding(
        verdict=f"{answer}\n\n{markdown}\n\n{footer}",
        holds=holds,
        values={"answer": answer, "markdown": markdown, "footer": footer},
        table=table,
    )


def _answer(
    ex: pd.DataFrame, device: str = "GPU", table: pd.DataFrame | None = None, waits: dict | None = None
) -> str:
    """The answer, its numbers from ``ex``. It recommends the pinned ``DataLoader`` unless
    ``table`` (the decision rows) shows that it did not pay; then the recipe whose step gained
    most over the way it replaces, and says that the pinned loader did not pay here."""

    def e(way: str) -> float:
        return float(ex.loc[way, "exposed_ms"]) if way in ex.index and ex.loc[way, "n"] > 0 else np.nan

    first = "Pin once and copy without blocking: `DataLoader(pin_memory=True)` with `.to(device, non_blocking=True)`."
    rows = table.set_index("way") if table is not None else None
    loader_paid = rows is None or "loader_pinned" not in rows.index or bool(rows.loc["loader_pinned", "pays"])
    best = rows[rows["pays"] & (rows.index != "loader_pinned")] if rows is not None else None
    if not loader_paid and best is not None and len(best):
        b = best.loc[best["times"].idxmax()]
        first = (
            f"Pin once and copy without blocking: {b['code']} (`recipe_{b['recipe']}.py`), "
            f"{b['times']:.2f}× faster steps than {b['against_code']} here. "
            "`DataLoader(pin_memory=True)` with `.to(device, non_blocking=True)` did not pay in this recording."
        )
    first += _pin_once_note(ex)
    ways = ("pageable_to", "loader_pinned", "loader_prefetch")
    if not all(np.isfinite(e(w)) for w in ways):
        return first
    size = fmt_bytes(int(ex.loc["pageable_to", "size_bytes"]))
    naive, pinned, pre = (f"{_ms(e(w))} ms" if e(w) > 0 else "nothing measurable" for w in ways)
    said = (
        f"{first} Here getting a {size} batch to the {device} added {naive} to each step by plain `.to()`, "
        f"{pinned} from a pinned loader and {pre} with a side-stream prefetch."
    )
    try:
        held = [float(waits[w]) for w in ("loader_pinned", "loader_prefetch")]
    except (KeyError, TypeError, ValueError):
        return said
    return (
        f"{said} Of the loader steps' time, {_ms(held[0])} and {_ms(held[1])} ms went to waiting for the "
        "loader's next batch, not to the copy."
    )


def _pin_once_note(ex: pd.DataFrame) -> str:
    """Where pinning every batch afresh stepped within the quartiles of the pinned buffer made
    once, say so: the answer's "pin once" is then not what the data separates (empty otherwise)."""
    ok = [w in ex.index and ex.loc[w, "n"] > 0 for w in ("pinned_buffer", "pin_memory_each_step")]
    if not all(ok):
        return ""
    once, each = ex.loc["pinned_buffer"], ex.loc["pin_memory_each_step"]
    if once["q3_ms"] < each["q1_ms"]:
        return ""
    return (
        f" Pinning every batch afresh (`x.pin_memory().to(device)`, {_ms(each['step_ms'])} ms a step) "
        f"came within the quartiles of the buffer made once ({_ms(once['step_ms'])} ms) here."
    )


def _spec(df: pd.DataFrame) -> dict:
    """The run's spec from its env.json (``{}`` when the table carries none)."""
    envs = df.attrs.get("envs") if isinstance(df.attrs.get("envs"), dict) else {}
    env = next(iter(envs.values()), None) if envs else df.attrs.get("env")
    spec = env.get("spec") if isinstance(env, dict) else None
    return spec if isinstance(spec, dict) else {}


def _footer(df: pd.DataFrame, ex: pd.DataFrame, source: str | None) -> str:
    from h2dlab.recording.machines import describe_runs

    name = source or df.attrs.get("dataset") or "live run"
    spec = _spec(df)
    how = ""
    if spec.get("matmuls"):
        shape = "x".join(str(d) for d in spec.get("shape", []))
        how = f"; batch {shape} float32, {spec['matmuls']} products of 1024 x 1024 a step"
    base = ex["step_ms"].get("resident", np.nan) if len(ex) else np.nan
    n = int(ex.loc[ex["n"] > 0, "n"].min()) if (ex["n"] > 0).any() else 0
    return (
        f"data: {name} · {describe_runs(df) or 'no fingerprint'}{how}. The step with the batch already on "
        f"the GPU took {_ms(base)} ms (median); medians of at least {n} steps a way. Exposed copy: a way's "
        "median step minus that one. Every figure here is a step timed on the host clock (host-side): "
        f"it moves between recordings; rerun on your machine.{_loader_note(ex, spec)}"
    )


def _waited_more(waits: dict, way: str, against: str) -> bool:
    """Whether ``way``'s steps waited longer for their loader's batch than ``against``'s."""
    try:
        return float(waits[way]) > float(waits[against])
    except (KeyError, TypeError, ValueError):
        return False


def _loader_note(ex: pd.DataFrame, spec: dict) -> str:
    """Say what the DataLoader rows' exposed time holds besides the copy, from the data: the
    unpinned loader's exposed time against plain ``.to()`` of the same batch (empty without both)."""

    def e(way: str) -> float:
        return float(ex.loc[way, "exposed_ms"]) if way in ex.index and ex.loc[way, "n"] > 0 else np.nan

    loader, plain = e("loader_pageable"), e("pageable_to")
    if not (np.isfinite(loader) and np.isfinite(plain)):
        return ""
    workers = f" (`num_workers={spec['workers']}`)" if "workers" in spec else ""
    more = loader - plain
    note = (
        f" The `DataLoader` rows{workers} also wait for the loader's batches: `DataLoader()`, `.to(device)` "
        f"exposed {_ms(loader)} ms against {_ms(plain)} ms for `x.to(device)` of the same batch"
        + (f", {_ms(more)} ms that is not the copy." if more > 0 else ".")
    )
    waits = spec.get("loader_wait_ms") or {}
    got = [(w, waits[w]) for w in ("loader_pageable", "loader_pinned", "loader_prefetch") if w in waits]
    if not got:
        return note
    names = {"loader_pageable": "unpinned", "loader_pinned": "pinned", "loader_prefetch": "prefetching"}
    note = (
        f" The `DataLoader` rows{workers} are steps fed by a loader. A step waited for its next batch (median): "
        + ", ".join(f"{_ms(v)} ms with the {names[w]} loader" for w, v in got)
        + "."
    )
    if "loader_pageable" in waits and more > 0:
        rest = more - float(waits["loader_pageable"])
        note += (
            f" The unpinned loader's step still exposed {_ms(loader)} ms against {_ms(plain)} ms for `x.to(device)`"
            + (
                f" of a batch made in this process: its `.to()` of a worker's batch took about {_ms(rest)} ms longer."
                if rest > 0
                else "."
            )
        )
    return note


#: Where the README holds the generated table (between these two lines).
START, END = "<!-- workload-table:start -->", "<!-- workload-table:end -->"


def readme_block(df: pd.DataFrame, source: str) -> str:
    """The README's block (markers included) for the workload table ``df``."""
    f = decision(df, source)
    return f"{START}\n{f.values['answer']}\n\n{f.values['markdown']}\n\n{f.values['footer']}\n{END}"


def main(argv: list[str] | None = None) -> int:
    """``python -m h2dlab.findings.workload RECORDING [--readme README.md]``: print the block,
    or write it between the README's markers. Exit 2 (one line) on a bad recording."""
    p = argparse.ArgumentParser(prog="python -m h2dlab.findings.workload", description=main.__doc__)
    p.add_argument("recording", help="a recording folder with a workload kind (e.g. data/h200)")
    p.add_argument("--readme", default=None, help="replace the block between the markers in this file")
    a = p.parse_args(argv)
    from h2dlab.recording import session

    try:
        rec = session.Recorded(a.recording)
        if not rec.has("workload"):
            raise ValueError(
                f"{a.recording} has no workload runs: record them with h2dlab record --only workload"
            )
        df = rec.table("workload")
    except ValueError as exc:  # UsageError is one
        print(f"h2dlab: {exc}", file=sys.stderr)
        return 2
    block = readme_block(df, f"{rec.name} (workload)")
    if a.readme is None:
        try:
            print(block)
        except BrokenPipeError:  # `... | head`
            pass
        return 0
    path = Path(a.readme)
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        print(f"h2dlab: {path} has no {START} ... {END} block to replace", file=sys.stderr)
        return 2
    path.write_text(pattern.sub(lambda _: block, text, count=1), encoding="utf-8")
    print(f"wrote the workload table into {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
