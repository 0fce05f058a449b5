"""``h2dlab compare``: median (IQR) per size x strategy of recorded runs, with each
strategy's time as a ratio of a baseline strategy's, and runs against the first run.

In the spirit of ``torch.utils.benchmark.Compare`` and ``pyperf compare_to``: a table a
person reads at a glance in a terminal. It prints what ``model.medians`` computes (GB/s
too: size over median, 10^9 bytes/s) and adds no analysis of its own. ``--fail-above PCT``
makes it a CI gate, as pytest-benchmark's ``--benchmark-compare-fail``: exit 1 when a later
run's median is more than PCT % above the first run's at some strategy and size. Runs come in
the order given; a folder's runs (one file each) in the natural order of their names
(``run-2``, ``run-9``, ``run-10``), not by start time: an env.json's ``date`` is when a run
ended, and a table may have none.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from typing import Any

from h2dlab.errors import UsageError

__all__ = [
    "add_parser",
    "fmt_gbps",
    "fmt_ms",
    "gate",
    "in_natural_order",
    "load_runs",
    "natural_key",
    "percent_arg",
    "regressions",
    "run",
    "table",
]

#: A cell whose IQR exceeds this fraction of its median is marked "!" (unsteady).
UNSTEADY = 0.10


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``compare`` on the ``h2dlab`` command's subparsers."""
    from h2dlab.cli.common import sizes_arg

    c = sub.add_parser(
        "compare",
        help="median (IQR) per size and strategy of recorded runs, as ratios of a baseline strategy",
        description="RUN is a recorded dataset (all its runs), a table or folder of tables, "
        "DATASET:RUN for one run of a dataset (h200_sweep:pow2), or RECORDING:KIND[:RUN] for a kind "
        "of a recording, h200 or a folder `h2dlab record` wrote (h200:sweep, h200:sweep:pow2-interleaved).",
    )
    c.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="a dataset, a table's path, DATASET:RUN or RECORDING:KIND[:RUN]",
    )
    c.add_argument(
        "--baseline",
        default=None,
        metavar="STRATEGY",
        help="the strategy the ratios are taken against [pageable, else the run's first]",
    )
    c.add_argument("--strategies", default=None, help="comma list: show only these strategies")
    c.add_argument("--sizes", type=sizes_arg, default=None, help="show only these sizes, e.g. 1MiB,1GiB")
    c.add_argument("--json", action="store_true", help="one JSON object per cell instead of tables")
    c.add_argument(
        "--fail-above",
        type=percent_arg,
        default=None,
        metavar="PCT",
        help="exit 1 when a cell's median time in a later run is more than PCT %% slower than in "
        "the first (a CI gate, as pytest-benchmark's --benchmark-compare-fail); each such cell in one line",
    )
    return c


def percent_arg(text: str) -> float:
    """argparse type: a percentage, ``5`` or ``5%``, at least 0 and finite."""
    from h2dlab.cli.common import number_arg

    v = number_arg(text.strip().removesuffix("%"))
    if not 0 <= v < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r}: give a percentage of 0 or more, e.g. 5 or 5%")
    return v


def fmt_ms(ms: float, scale_of: float | None = None) -> str:
    """A time in ms as µs, ms or s with three significant digits; ``scale_of`` picks
    the unit from another value (an IQR is written in its median's unit)."""
    if not math.isfinite(ms):
        return "n/a"
    if scale_of is not None and not math.isfinite(scale_of):  # a median that overflowed: n/a
        scale_of = None
    ref = abs(scale_of if scale_of is not None else ms)
    unit, f = ("µs", 1e3) if ref < 1 else ("ms", 1.0) if ref < 1000 else ("s", 1e-3)
    v = ms * f
    if scale_of is not None:  # same unit and as many decimals as its median shows
        rv = ref * f
        return f"{v:.{max(0, 2 - int(math.floor(math.log10(rv))))}f}" if rv > 0 else f"{v:.3g}"
    return f"{v:.{max(0, 2 - int(math.floor(math.log10(v))))}f} {unit}" if v > 0 else f"0 {unit}"


def load_runs(sources: list[str]):
    """``[(label, table), ...]``: one per run of each source (a dataset, a path,
    ``DATASET:RUN`` or ``RECORDING:KIND[:RUN]``: ``h2dlab.recording.sources``), labelled ``source:run name``."""
    from h2dlab.recording.sources import resolve, stopped_note

    out, seen = [], {}
    for given in sources:
        df, src, run_name = resolve(given)
        if note := stopped_note(df, given):
            print(note, file=sys.stderr)
        names = df.attrs.get("run_names") or {}
        for rid in in_natural_order(list(dict.fromkeys(df["run_id"])), names):
            name = names.get(rid, rid)
            if run_name is None or name == run_name:
                if rid in seen:  # the same run twice: every ratio 1.00x, which says nothing
                    raise UsageError(
                        f"{given} and {seen[rid]} hold the same run ({rid}): compare a run with another one"
                    )
                seen[rid] = given
                part = df[df["run_id"] == rid]
                part.attrs = {**df.attrs, "env": (df.attrs.get("envs") or {}).get(rid)}
                out.append((f"{src}:{name}" if name != src else src, part))
    return out


def natural_key(name: str) -> tuple:
    """A sort key that reads the digits in ``name`` as numbers: ``run-9`` before ``run-10``."""
    parts = re.split(r"([0-9]+)", name)
    return tuple((0, int(t), "") if i % 2 else (1, 0, t) for i, t in enumerate(parts))


def in_natural_order(ids: list[Any], names: dict[Any, str]) -> list[Any]:
    """The runs ``ids`` of one source in the natural order of their names (``run-2``,
    ``run-9``, ``run-10``; a folder lists its files by name, ``run-10`` first), where each
    run has a file of its own; a file of several runs keeps its own order (their names are
    run ids, random hex)."""
    if any(names.get(rid, rid) == rid for rid in ids):
        return ids
    return sorted(ids, key=lambda rid: (natural_key(str(names[rid])), str(names[rid])))  # x-01, x-1: by text


def table(df, baseline: str | None = None):
    """Per (strategy, size): median, quartiles, n, and ``ratio`` = median / the
    baseline strategy's median at that size (NaN where the baseline lacks the size)."""
    from h2dlab.explain import model

    med = model.medians(df)
    strategies = list(dict.fromkeys(df["strategy"]))
    base = baseline or ("pageable" if "pageable" in strategies else strategies[0])
    if base not in strategies:
        raise UsageError(
            f"no strategy {base!r} in this run to compare against: it has {', '.join(strategies)}"
        )
    ref = med[med["strategy"] == base].set_index("size_bytes")["median_ms"]
    med["ratio"] = med["median_ms"] / med["size_bytes"].map(ref)
    med["baseline"] = base
    med["strategy"] = med["strategy"].astype("category").cat.set_categories(strategies)
    return med.sort_values(["size_bytes", "strategy"]).reset_index(drop=True)


def _cell(r) -> str:
    iqr = r.q3_ms - r.q1_ms
    text = f"{fmt_ms(r.median_ms)} ({fmt_ms(iqr, r.median_ms)})"
    if r.iqr_over_median > UNSTEADY:
        text += "!"
    if r.strategy != r.baseline and math.isfinite(r.ratio):
        text += f" {r.ratio:.2f}x"
    return text


def fmt_gbps(g: float) -> str:
    """GB/s (10^9 bytes/s) with three significant digits, ``n/a`` where not finite."""
    if not math.isfinite(g):
        return "n/a"
    return f"{g:.0f}" if g >= 100 else f"{g:.1f}" if g >= 10 else f"{g:.2f}" if g >= 1 else f"{g:.3g}"


def _print_block(label: str, env: dict | None, t) -> None:
    from h2dlab.recording.env import describe
    from h2dlab.units import fmt_bytes

    base = t["baseline"].iloc[0]
    print(f"{label} ({describe(env) if env else 'no env.json'})")
    print(
        f"  median (IQR) per copy; Nx = time as a multiple of {base}'s at that size (below 1: faster); "
        "GB/s = size / median, 10^9 bytes/s"
    )
    wide = t.pivot(index="size_bytes", columns="strategy", values="cell").fillna("")
    rate = t.assign(g=[fmt_gbps(g) for g in t["gbps"]]).pivot(
        index="size_bytes", columns="strategy", values="g"
    )
    present = set(t["strategy"])
    cols = [base] * (base in present) + [c for c in wide.columns if c in present and c != base]
    widths = {c: max(len(str(c)), *(len(v) for v in wide[c])) for c in cols}
    rates = {c: max(4, *(len(v) for v in rate[c].fillna(""))) for c in cols}
    print(
        (
            "  " + f"{'size':>10}  " + "  ".join(f"{str(c):<{widths[c]}}  {'GB/s':>{rates[c]}}" for c in cols)
        ).rstrip()
    )
    for size, row in wide.iterrows():
        cells = "  ".join(
            f"{row[c]:<{widths[c]}}  {rate.at[size, c] if row[c] else '':>{rates[c]}}" for c in cols
        )
        print(("  " + f"{fmt_bytes(size):>10}  " + cells).rstrip())
    if t["iqr_over_median"].gt(UNSTEADY).any():
        print(f"  ! IQR above {UNSTEADY:.0%} of the median: an unsteady cell (more reps, a quieter machine)")
    print()


def _across(tables: list[tuple[str, Any]]) -> None:
    from h2dlab.units import fmt_bytes

    ref_label, ref = tables[0]
    ref = ref.set_index(["strategy", "size_bytes"])["median_ms"]
    lines = []
    for label, t in tables[1:]:
        other = t.set_index(["strategy", "size_bytes"])["median_ms"]
        common = ref.index.intersection(other.index)
        for key in common:
            lines.append((label, key[0], key[1], other[key] / ref[key]))
    if not lines:
        print(f"no strategy and size in common with {ref_label}: nothing to compare across runs")
        return
    print(f"across runs: median time as a multiple of {ref_label}'s (below 1: faster)")
    for label, strategy, size, ratio in lines:
        verdict = (
            "same"
            if abs(ratio - 1) < 0.02
            else f"{1 / ratio:.2f}x faster"
            if ratio < 1
            else f"{ratio:.2f}x slower"
        )
        print(f"  {label:<28} {str(strategy):<22} {fmt_bytes(size):>10}  {ratio:6.2f}x  ({verdict})")


def _known(keep: list[str] | None, sizes: list[int] | None, tables: list[Any]) -> None:
    """Refuse a --strategies name or --sizes size that no run has a timed copy of: it was
    left out in silence, so a typo read as 'that strategy has no rows'."""
    from h2dlab.units import fmt_bytes

    have = list(dict.fromkeys(str(s) for t in tables for s in t["strategy"]))
    bad = [s for s in keep or [] if s not in have]
    if bad:
        raise UsageError(
            f"unknown strategy {', '.join(map(repr, bad))} in --strategies: these runs have timed copies "
            f"of {', '.join(have) or 'none'}"
        )
    there = sorted({int(s) for t in tables for s in t["size_bytes"]})
    bad = [s for s in sizes or [] if s not in there]
    if bad:
        raise UsageError(
            f"--sizes {', '.join(fmt_bytes(s) for s in bad)}: these runs have no timed copy of {'that size' if len(bad) == 1 else 'those sizes'}; "
            f"they have {', '.join(fmt_bytes(s) for s in there) or 'none'}"
        )


def run(a: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Print the comparison (or JSON); exit code 0, or with ``--fail-above`` 1 when a cell regressed."""
    if a.baseline is not None and not a.baseline.strip():
        raise UsageError(
            "--baseline is empty: name a strategy (e.g. pinned_reuse), or leave it out for pageable"
        )
    if a.strategies is not None and not a.strategies.replace(",", "").strip():
        raise UsageError(
            "--strategies is empty: name strategies (e.g. pageable,pinned_reuse), or leave it out"
        )
    from h2dlab.cli.common import names

    keep = None if a.strategies is None else list(names(a.strategies, "--strategies"))
    tables, made = [], [(label, df, table(df, a.baseline)) for label, df in load_runs(a.runs)]
    _known(keep, a.sizes, [t for _, _, t in made])
    for label, df, t in made:
        if keep is not None:
            t = t[t["strategy"].isin(keep)]
        if a.sizes is not None:
            t = t[t["size_bytes"].isin(a.sizes)]
        if t.empty:
            continue
        tables.append((label, df.attrs.get("env"), t.assign(strategy=t["strategy"].astype(str))))
    if not tables:
        if keep is None and a.sizes is None:
            raise UsageError("nothing to compare: these runs hold no timed copy that succeeded")
        raise UsageError("nothing to compare: no timed rows match --strategies/--sizes in these runs")
    if a.fail_above is not None and len(tables) < 2:  # before any table is printed
        raise UsageError("--fail-above compares runs: give two or more (e.g. old.csv new.csv)")
    if a.json:
        cells = [
            {
                "run": label,
                **{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()},
            }
            for label, _, t in tables
            for r in t.to_dict("records")
        ]
        print(json.dumps(cells, indent=1, default=str))
    else:
        for label, env, t in tables:
            _print_block(label, env, t.assign(cell=[_cell(r) for r in t.itertuples()]))
        if len(tables) > 1:
            _across([(label, t) for label, _, t in tables])
    if a.fail_above is None:
        return 0
    return gate([(label, t) for label, _, t in tables], a.fail_above)


def regressions(tables: list[tuple[str, Any]], pct: float) -> tuple[list[str], list[str], int]:
    """The cells of each later run whose median time is more than ``pct`` % above the first
    run's at the same strategy and size, one line each; the first run's cells a later run
    lacks (not gated), one line per run; and how many cells were compared.

    Parameters
    ----------
    tables
        ``[(label, table), ...]`` as :func:`table` makes them; the first is the reference.
    pct
        The allowed slow-down in percent (``5``: a median up to 1.05 times the first's passes).
    """
    from h2dlab.units import fmt_bytes

    ref_label, ref = tables[0]
    ref = ref.set_index(["strategy", "size_bytes"])["median_ms"]
    failed, missing, compared = [], [], 0
    for label, t in tables[1:]:
        other = t.set_index(["strategy", "size_bytes"])["median_ms"]
        common = ref.index.intersection(other.index)
        compared += len(common)
        for key in common:
            was, now = float(ref[key]), float(other[key])
            if now > was * (1 + pct / 100):
                failed.append(
                    f"{label} {key[0]} {fmt_bytes(key[1])}: median {fmt_ms(now)} against {fmt_ms(was)} in "
                    f"{ref_label}, {(now / was - 1) * 100:.1f}% slower (--fail-above {pct:g}%)"
                )
        lacking = ref.index.difference(other.index)
        if len(lacking):
            missing.append(f"{label} has no timed copy of {len(lacking)} cell(s) of {ref_label}: not gated")
    return failed, missing, compared


def gate(tables: list[tuple[str, Any]], pct: float) -> int:
    """``--fail-above``: each regressed cell in one line on stderr; 1 if any, else 0.

    Raises
    ------
    UsageError
        Fewer than two runs, or no strategy and size in common: nothing would be gated.
    """
    if len(tables) < 2:
        raise UsageError("--fail-above compares runs: give two or more (e.g. old.csv new.csv)")
    failed, missing, compared = regressions(tables, pct)
    if not compared:
        raise UsageError(f"--fail-above: no strategy and size in common with {tables[0][0]}: nothing to gate")
    for line in missing:
        print(f"h2dlab: note: {line}", file=sys.stderr)
    for line in failed:
        print(f"h2dlab: regression: {line}", file=sys.stderr)
    return 1 if failed else 0
