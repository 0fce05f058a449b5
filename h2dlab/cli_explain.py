"""``h2dlab explain``: the fitted model per strategy and the flagged rows, as text.

A part of the command line (kept beside ``cli`` so that each stays one screenful):
it prints what ``model`` and ``outliers`` compute and adds no analysis of its own.
"""

from __future__ import annotations

import sys
from pathlib import Path

from h2dlab import datasets
from h2dlab.errors import UsageError
from h2dlab.units import fmt_bytes

__all__ = ["explain", "load_source"]


def load_source(source: str):
    """The table named by ``source`` (a recorded dataset or a path); a file that is not
    a readable h2dlab table is the user's mistake (``UsageError``)."""
    try:
        df = datasets.load(source)
    except ValueError as exc:  # SchemaError, or a name that cannot be a dataset ('')
        raise UsageError(str(exc)) from exc
    if df.empty:
        raise UsageError(f"{source}: the table has no rows")
    return df


def explain(
    source: str,
    *,
    out: Path | None = None,
    show_all: bool = False,
    limit: int = 40,
    argv: list[str] | None = None,
) -> int:
    """Print the fitted model per strategy and the flagged rows with cause and evidence.

    Parameters
    ----------
    source
        A recorded dataset name or a table's path.
    out
        Also write the annotated table here (a checked path; format by its suffix).
    show_all
        Print every flagged row, not the first ``limit``.
    argv
        The command line, recorded in the annotated table's env.json.

    Returns
    -------
    int
        The exit code (0).
    """
    from h2dlab import model, outliers
    from h2dlab.env import describe

    df = load_source(source)
    env = datasets.run_env(df)
    print(
        f"{source}: {len(df)} rows, {df['run_id'].nunique()} run(s); {describe(env) if env else 'no env.json'}"
    )
    fitted = model.fit(df, n_boot=100)
    if len(fitted):
        print("\nlatency = overhead + bytes / bandwidth, fitted robustly per run and strategy (95% CI):")
        show = fitted.assign(
            overhead_us=lambda f: f.apply(
                lambda r: f"{r.overhead_us:8.1f} [{r.overhead_us_lo:.1f}, {r.overhead_us_hi:.1f}]", axis=1
            ),
            gbps=lambda f: f.apply(lambda r: f"{r.gbps:6.2f} [{r.gbps_lo:.2f}, {r.gbps_hi:.2f}]", axis=1),
            fit_err=lambda f: (100 * f.median_abs_rel_err).map(lambda v: f"{v:.0f}%"),
        )[["run_id", "strategy", "overhead_us", "gbps", "n", "fit_err"]]
        print(show.to_string(index=False))
    e = outliers.explain(df)
    flagged = e[e["is_outlier"]].sort_values(["run_id", "order"])
    timed = int((~e["warmup"] & (e["error"] == "")).sum())
    print(f"\n{len(flagged)} of {timed} timed rows flagged as slow:")
    counts = flagged.groupby(["strategy", "cause"]).size().rename("rows").reset_index()
    if len(counts):
        print(counts.to_string(index=False))
        cols = ["run_id", "order", "strategy", "size_bytes", "expected_ms", "robust_z", "cause", "evidence"]
        rows = flagged if show_all else flagged.head(limit)
        view = rows[cols].assign(size=rows["size_bytes"].map(fmt_bytes), z=rows["robust_z"].round(1))
        print()
        for r in view.itertuples(index=False):
            print(f"[{r.run_id} #{r.order}] {r.strategy} {r.size}: {r.cause} (z={r.z}) - {r.evidence}")
        if not show_all and len(flagged) > limit:
            print(f"... {len(flagged) - limit} more (use --all or --out)")
    if out is not None:
        _write_annotated(e, Path(out), _annotated_env(env, source, argv))
        print(f"\nwrote the annotated table to {out}", file=sys.stderr)
    return 0


def _annotated_env(env: dict | None, source: str, argv: list[str] | None) -> dict:
    # The measurement's own fingerprint (the data came from that machine), plus where
    # and how this annotated copy was made.
    import shlex

    out = dict(env or {})
    out["annotated"] = {"source": str(source), "command": shlex.join(argv) if argv else None}
    return out


def _write_annotated(e, path: Path, env: dict) -> None:
    # Not datasets.save: the annotated table carries the derived columns, which save()
    # (the measurement table's writer) leaves out on purpose.
    suf = datasets.suffix_of(path)
    if suf == ".parquet":
        writer = lambda t: e.to_parquet(t, index=False)  # noqa: E731
    elif suf == ".xlsx":
        writer = lambda t: e.to_excel(t, index=False, engine="openpyxl")  # noqa: E731
    else:
        writer = lambda t: e.to_csv(t, index=False, compression="gzip" if suf == ".csv.gz" else None)  # noqa: E731
    datasets.atomic_write(path, writer)
    datasets.write_env(env, datasets.env_path(path))
