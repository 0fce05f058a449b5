"""``h2dlab explain``: the fitted model per run and strategy and the flagged rows, as
text or JSON (:data:`JSON_SCHEMA`).

A part of the command line (kept beside ``cli`` so that each stays one screenful): it
prints what ``model`` and ``outliers`` compute. Its own judgements are presentational:
which fits to warn about (:data:`POOR_FIT_ERR`, :data:`FAR_FROM_MEASURED`) and which
flagged rows to print as one stretch (consecutive in time order, same cause).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from h2dlab.errors import UsageError
from h2dlab.recording import datasets
from h2dlab.units import fmt_bytes

__all__ = [
    "FAR_FROM_MEASURED",
    "JSON_SCHEMA",
    "POOR_FIT_ERR",
    "explain",
    "judged_fits",
    "load_source",
    "report",
]

#: A fit whose median relative error exceeds this is called poor.
POOR_FIT_ERR = 0.10
#: ... and so is one whose line, at the run's largest size, predicts a GB/s that differs
#: from the measured median GB/s there by more than this factor (either way). Like with
#: like: the line's prediction at that size (``size / (overhead + size / bandwidth)``),
#: not its asymptotic bandwidth, which a run of small copies never reaches.
FAR_FROM_MEASURED = 1.5
#: The ``--json`` output: an object with these keys (values: JSON types; NaN -> null).
JSON_SCHEMA = {
    "schema": "str: 'h2dlab.explain/1'",
    "source": "str: the dataset name or path given",
    "machine": "str or null: GPU, link, torch, date of the (first) run, from its env.json",
    "rows": "int: rows in the table",
    "timed_rows": "int: rows that are not warm-ups and have no error",
    "runs": "list of {run_id, run}: run is the run's name (its file name) or its id",
    "fit": "list of {run, run_id, strategy, overhead_us, overhead_us_lo, overhead_us_hi, gbps, "
    "gbps_lo, gbps_hi, n, sizes, fit_error, largest_size_bytes, measured_gbps, predicted_gbps, poor_fit, "
    "warning}: latency = overhead + bytes / bandwidth per run and strategy, 95% bootstrap CI (null: too "
    "few rows), gbps in GB/s (1e9 bytes/s), measured_gbps the median GB/s at the run's largest size, "
    "predicted_gbps the GB/s the fitted line gives at that size",
    "flagged": "list of {run, run_id, order, strategy, size_bytes, value_ms, expected_ms, robust_z, "
    "episode, cause, evidence}: every row flagged as slow, in time order per run",
    "causes": "object: cause -> number of flagged rows",
    "checked_rows": "int: timed rows scored against an expectation (the others cannot be flagged)",
    "not_checked": "list of str: why the other timed rows were not checked (empty: every one was)",
    "not_fitted": "list of str: each run and strategy with timed copies but no fitted line, and why",
}


def load_source(source: str):
    """The table named by ``source`` (a recorded dataset, a path, ``DATASET:RUN`` or
    ``RECORDING:KIND[:RUN]``: :func:`h2dlab.recording.sources.load`); a name or file that is not a
    readable h2dlab table is the user's mistake (``UsageError``)."""
    from h2dlab.recording.sources import load, stopped_note

    df = load(source)
    if df.empty:
        raise UsageError(f"{source}: the table has no rows")
    if note := stopped_note(df, source):
        print(note, file=sys.stderr)
    return df


def _run_names(df) -> dict[str, str]:
    names = df.attrs.get("run_names") or {}
    return {rid: str(names.get(rid, rid)) for rid in dict.fromkeys(df["run_id"])}


def judged_fits(df, names: dict[str, str] | None = None, n_boot: int = 100):
    """The fitted line per run and strategy, with explain's judgement of each.

    Parameters
    ----------
    df
        A measurement table.
    names
        Run id -> the name to print (default: the table's ``run_names``, else the id).
    n_boot
        Bootstrap resamples for the 95 % intervals (0: none).

    Returns
    -------
    pandas.DataFrame
        :func:`h2dlab.explain.model.fit`'s columns plus ``run``, ``largest_size_bytes``,
        ``measured_gbps`` (median GB/s at that size), ``predicted_gbps`` (the GB/s the
        line gives at that size), ``poor_fit`` (median error above :data:`POOR_FIT_ERR`,
        or measured and predicted GB/s more than :data:`FAR_FROM_MEASURED` apart) and
        ``warning`` (the sentence, "" when the fit is not poor).
    """
    from h2dlab.explain import model

    names = (df.attrs.get("run_names") or {}) if names is None else names
    fitted = model.fit(df, n_boot=n_boot)
    if fitted.empty:
        return fitted
    t = model.timed(df)
    t = t.assign(gbps=t["size_bytes"] / model.value_ms(t) / 1e6)
    measured, largest = [], []
    for r in fitted.itertuples():
        g = t[(t["run_id"] == r.run_id) & (t["strategy"] == r.strategy)]
        big = g["size_bytes"].max()
        largest.append(int(big))
        measured.append(float(g.loc[g["size_bytes"] == big, "gbps"].median()))
    fitted = fitted.assign(
        run=[names.get(rid, rid) for rid in fitted["run_id"]],
        largest_size_bytes=largest,
        measured_gbps=measured,
    )
    fitted["predicted_gbps"] = (
        fitted["largest_size_bytes"] / model.predict(fitted, fitted["largest_size_bytes"]) / 1e6
    )
    ratio = fitted["measured_gbps"] / fitted["predicted_gbps"]
    far = (ratio > FAR_FROM_MEASURED) | (ratio < 1 / FAR_FROM_MEASURED)
    fitted["poor_fit"] = (fitted["median_abs_rel_err"] > POOR_FIT_ERR) | far
    fitted["warning"] = [
        (
            f"{r.run} {r.strategy}: the straight line fits poorly ({_err_text(r.median_abs_rel_err)} median "
            f"error; the fitted line predicts {r.predicted_gbps:.1f} GB/s at {fmt_bytes(r.largest_size_bytes)}, "
            f"measured {r.measured_gbps:.1f} GB/s): trust the measured medians (h2dlab compare) over the fit"
        )
        if r.poor_fit
        else ""
        for r in fitted.itertuples()
    ]
    return fitted


def _err_text(err: float) -> str:
    """``err`` as a percentage with the fewest decimals (up to 2) that keep it on its own
    side of :data:`POOR_FIT_ERR` (10.4 % prints "10.4%", not "10%", when above 10 %)."""
    for digits in range(3):
        text = f"{100 * err:.{digits}f}"
        if (float(text) / 100 > POOR_FIT_ERR) == (err > POOR_FIT_ERR):
            break
    return f"{text}%"


def _ci(v: float, lo: float, hi: float, fmt: str, n: int) -> str:
    if math.isfinite(lo) and math.isfinite(hi):
        return f"{v:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"
    return f"{v:{fmt}} n/a (too few {'rows' if n < 8 else 'sizes'})"


def _stretches(flagged) -> list[list[Any]]:
    """Flagged rows grouped: consecutive ``order`` in one run with the same cause."""
    groups: list[list[Any]] = []
    for r in flagged.itertuples(index=False):
        last = groups[-1][-1] if groups else None
        if (
            last is not None
            and (r.run_id, r.cause) == (last.run_id, last.cause)
            and r.order == last.order + 1
        ):
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups


def _span(values, fmt: str) -> str:
    lo, hi = f"{min(values):{fmt}}", f"{max(values):{fmt}}"
    return lo if lo == hi else f"{lo}-{hi}"


def _stretch_line(g: list[Any]) -> str:
    first = g[0]
    if len(g) == 1:
        return (
            f"[{first.run} #{first.order}] {first.strategy} {fmt_bytes(first.size_bytes)}: "
            f"{first.cause} (z={first.robust_z:.1f}) - {first.evidence}"
        )
    what = sorted({f"{r.strategy} {fmt_bytes(r.size_bytes)}" for r in g})
    where = ", ".join(what) if len(what) <= 3 else f"{len(what)} strategy/size cells"
    ev = first.evidence
    if first.cause == "unexplained":  # each row alone says "isolated": the stretch says otherwise
        ev = ev.partition("an isolated slow copy: ")[2] or ev
        ev = f"{len(g)} consecutive slow copies, too few for an episode; {ev}"
    return (
        f"[{first.run} #{first.order}-#{g[-1].order}] {where}: {first.cause} x{len(g)} "
        f"(z={_span([r.robust_z for r in g], '.1f')}) - {_span([r.value_ms for r in g], '.2f')} ms where "
        f"{_span([r.expected_ms for r in g], '.2f')} ms was expected; {ev}"
    )


def _records(frame) -> list[dict[str, Any]]:
    def clean(v):
        if hasattr(v, "item"):
            v = v.item()
        return None if isinstance(v, float) and not math.isfinite(v) else v

    return [{k: clean(v) for k, v in r.items()} for r in frame.to_dict("records")]


FIT_COLUMNS = (
    "run", "run_id", "strategy", "overhead_us", "overhead_us_lo", "overhead_us_hi", "gbps", "gbps_lo",
    "gbps_hi", "n", "sizes", "median_abs_rel_err", "largest_size_bytes", "measured_gbps", "predicted_gbps", "poor_fit",
    "warning",
)  # fmt: skip
FLAG_COLUMNS = (
    "run", "run_id", "order", "strategy", "size_bytes", "value_ms", "expected_ms", "robust_z", "episode",
    "cause", "evidence",
)  # fmt: skip


def report(source: str, n_boot: int = 100, table=None) -> dict[str, Any]:
    """What ``explain`` prints, as a dict in the :data:`JSON_SCHEMA` layout, plus the
    tables behind it under keys starting ``_`` (``_env``, ``_fit``, ``_explained``,
    ``_flagged``), which the JSON leaves out; ``table``: ``source`` already loaded."""
    from h2dlab.cli.unchecked import unchecked, unfitted
    from h2dlab.explain import model, outliers
    from h2dlab.explain.causes_stall import censuses_by_run
    from h2dlab.explain.causes_wake import run_pauses
    from h2dlab.explain.wake_source import of_table
    from h2dlab.recording.env import describe
    from h2dlab.recording.machines import describe_runs

    df = load_source(source) if table is None else table
    env, names, setups = datasets.run_env(df), _run_names(df), describe_runs(df)
    # Analyse a copy without attrs: pandas deep-copies attrs (every run's env.json) on each
    # column access, which cost more CPU than the fit itself; explain gets what it reads of
    # them (the runs' --pause, calibration by the idle runs, stall census) as arguments.
    wake, pauses, censuses = of_table(df), run_pauses(df), censuses_by_run(df)
    df = df.copy(deep=False)
    df.attrs = {}
    fitted = judged_fits(df, names, n_boot)
    e = outliers.explain(df, wake=wake, pauses=pauses, censuses=censuses)
    e = e.assign(run=e["run_id"].map(names), value_ms=model.value_ms(e))
    flagged = e[e["is_outlier"]].sort_values(["run_id", "order"], kind="stable")
    flagged = flagged.sort_values("run_id", key=lambda s: s.map(list(names).index), kind="stable")
    checked, why = unchecked(e)
    fit_rows = (
        fitted[list(FIT_COLUMNS)].rename(columns={"median_abs_rel_err": "fit_error"}) if len(fitted) else None
    )
    return {
        "schema": "h2dlab.explain/1",
        "source": str(source),
        "machine": describe(env) if env else None,
        "rows": int(len(df)),
        "timed_rows": int((~e["warmup"] & (e["error"] == "")).sum()),
        "runs": [{"run_id": rid, "run": name} for rid, name in names.items()],
        "fit": [] if fit_rows is None else _records(fit_rows),
        "flagged": _records(flagged[list(FLAG_COLUMNS)]),
        "causes": {str(k): int(v) for k, v in flagged["cause"].value_counts().items()},
        "checked_rows": checked,
        "not_checked": why,
        "not_fitted": unfitted(e, fitted, names),
        "_env": env,
        "_fit": fitted,
        "_explained": e,
        "_flagged": flagged,
        "_setups": setups,  # every run's, where "machine" is the first run's
    }


def explain(
    source: str,
    *,
    out: Path | None = None,
    show_all: bool = False,
    limit: int = 40,
    as_json: bool = False,
    argv: list[str] | None = None,
) -> int:
    """Print the fitted model per run and strategy and the flagged rows with their cause.

    Parameters
    ----------
    source
        A recorded dataset name or a table's path.
    out
        Also write the annotated table here (a checked path; format by its suffix).
    show_all
        Print every flagged row, not the first ``limit`` lines.
    as_json
        Print one JSON object (:data:`JSON_SCHEMA`) instead of text.
    argv
        The command line, recorded in the annotated table's env.json.

    Returns
    -------
    int
        The exit code (0); a table with no timed copy it can check raises ``UsageError``
        (exit 2), as ``compare`` does with nothing to compare.
    """
    from h2dlab.cli.annotated import annotated_env, check_one_env, write_annotated
    from h2dlab.cli.unchecked import nothing_checked

    df = load_source(source)
    if out is not None:  # before any output: a refusal is the whole answer
        check_one_env(df, source)
    rep = report(source, table=df)
    fitted, flagged = rep["_fit"], rep["_flagged"]
    nothing_checked(rep, source)  # exit 2 before any output, as compare with nothing to compare
    if as_json:
        print(json.dumps({k: v for k, v in rep.items() if not k.startswith("_")}, indent=1))
    else:
        _print_text(source, rep, fitted, flagged, show_all, limit)
    if out is not None:
        env = annotated_env(rep["_env"], source, argv)
        write_annotated(rep["_explained"].drop(columns=["run", "value_ms"]), Path(out), env)
        print(f"\nwrote the annotated table to {out}", file=sys.stderr)
    return 0


def _print_text(source, rep, fitted, flagged, show_all: bool, limit: int) -> None:
    runs = ", ".join(r["run"] for r in rep["runs"])
    print(f"{source}: {rep['rows']} rows, run(s) {runs}; {rep['_setups'] or 'no env.json'}")
    if len(fitted):
        print("\nlatency = overhead + bytes / bandwidth, fitted robustly per run and strategy (95% CI):")
        rows = list(fitted.itertuples())
        show = fitted.assign(
            overhead_us=[_ci(r.overhead_us, r.overhead_us_lo, r.overhead_us_hi, ".1f", r.n) for r in rows],
            gbps=[_ci(r.gbps, r.gbps_lo, r.gbps_hi, ".2f", r.n) for r in rows],
            fit_err=[f"{_err_text(r.median_abs_rel_err)}{' !' if r.poor_fit else ''}" for r in rows],
            measured=[
                f"{r.measured_gbps:.1f} / {r.predicted_gbps:.1f} @ {fmt_bytes(r.largest_size_bytes)}"
                for r in rows
            ],
        )[["run", "strategy", "overhead_us", "gbps", "n", "fit_err", "measured"]]
        header = {"gbps": "GB/s", "measured": "measured / line GB/s"}
        print(show.rename(columns=header).to_string(index=False))
        for w in fitted.loc[fitted["poor_fit"], "warning"]:
            print(f"! {w}")
    if rep["not_fitted"]:
        print(f"\nno line fitted (a line needs copies of two sizes or more): {'; '.join(rep['not_fitted'])}")
    left = rep["timed_rows"] - rep["checked_rows"]
    why = f" ({left} not checked: {'; '.join(rep['not_checked'])})" if left else ""
    print(f"\n{len(flagged)} of {rep['timed_rows']} timed rows flagged as slow{why}:")
    counts = flagged.groupby(["strategy", "cause"]).size().rename("rows").reset_index()
    if len(counts):
        print(counts.to_string(index=False))
        groups = _stretches(flagged)
        print()
        for g in groups if show_all else groups[:limit]:
            print(_stretch_line(g))
        if not show_all and len(groups) > limit:
            rest = sum(len(g) for g in groups[limit:])
            print(f"... {rest} more row(s) in {len(groups) - limit} line(s) (use --all or --out)")
