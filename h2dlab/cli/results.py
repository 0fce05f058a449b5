"""What a measuring command prints when it ends: its result table, one line per cell (median
time per copy, GB/s, IQR, rows), as nvbandwidth, hyperfine and pytest-benchmark end with
theirs; and, with ``--json``, one JSON object on stdout instead (messages stay on stderr).

A cell is one strategy and size (``measure``), one way, tensor count and batch size
(``batch``), or one mode, direction and size (``duplex``). Times are the timed rows that
succeeded (CUDA events where measured, else the host clock), as ``explain`` and ``compare``
read them; GB/s is 10^9 bytes per second, sizes are binary units (KiB = 1024 bytes).
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["CELL_KEYS", "cells", "emit", "emitting", "finish", "json_stdout", "report_summary", "table_lines"]

#: The columns that name a cell, per command (``world``: copies at once, ``measure --gpus``).
CELL_KEYS = {
    "measure": ("strategy", "world", "size_bytes"),
    "batch": ("strategy", "n_tensors", "size_bytes"),
    "duplex": ("strategy", "direction", "size_bytes"),
}
_HEADS = {"strategy": "strategy", "world": "at once", "n_tensors": "tensors", "direction": "direction"}

#: Where :func:`emit` writes: the real stdout, saved while ``--json`` sends prints to stderr.
_JSON_OUT: list[Any] = []


def _finite(v: Any) -> Any:
    """A value JSON can hold: NaN and infinities as null, numpy scalars as Python ones."""
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    return None if isinstance(v, float) and not math.isfinite(v) else v


def cells(df: Any, command: str) -> list[dict[str, Any]]:
    """The result of a measuring run, one dict per cell.

    Parameters
    ----------
    df
        The run's table (one row per copy).
    command
        ``measure``, ``batch`` or ``duplex`` (:data:`CELL_KEYS`).

    Returns
    -------
    list of dict
        Per cell, by size, then tensor count or copies at once, direction, and fastest
        first (as pytest-benchmark sorts; no time last): its key columns, ``rows`` (timed
        copies that succeeded), ``error_rows`` (the cell's other timed copies: an error, or
        no positive time), ``median_ms``,
        ``q1_ms``, ``q3_ms``, ``iqr_ms`` and ``gbps`` (size over median, 10^9 bytes/s;
        None where no copy succeeded).
    """
    from h2dlab.explain.rows import value_ms

    keys = [k for k in CELL_KEYS[command] if k in df.columns]
    t = df[~df["warmup"].astype(bool)].reset_index(drop=True)  # a resumed run's index may repeat
    if t.empty:
        return []
    v = value_ms(t)
    ok = (t["error"] == "") & (v > 0)
    out = []
    for key, part in t.groupby(keys, sort=False, dropna=False):  # a row without a key is a cell too
        key = key if isinstance(key, tuple) else (key,)
        good = v[part.index][ok[part.index]]
        rec = {k: _finite(x) for k, x in zip(keys, key, strict=True)}
        rec["size_bytes"] = int(rec["size_bytes"])
        med = float(good.median()) if len(good) else float("nan")
        q1, q3 = (float(good.quantile(q)) for q in (0.25, 0.75)) if len(good) else (math.nan, math.nan)
        rec.update(rows=int(len(good)), error_rows=int(len(part) - len(good)), median_ms=med, q1_ms=q1,
                   q3_ms=q3, iqr_ms=q3 - q1, gbps=rec["size_bytes"] / med / 1e6 if med > 0 else math.nan)  # fmt: skip
        out.append({k: _finite(x) for k, x in rec.items()})
    numeric = [k for k in keys if k not in ("strategy", "direction", "size_bytes")]
    out.sort(key=lambda c: (c["size_bytes"], *((c[k] is None, c[k] or 0) for k in numeric), str(c.get("direction")),
                            c["median_ms"] is None, c["median_ms"] or 0.0))  # fmt: skip
    return out


def table_lines(found: list[dict[str, Any]], command: str) -> list[str]:
    """The result table as text: a header, then one line per cell of :func:`cells`."""
    from h2dlab.cli.compare import fmt_gbps, fmt_ms
    from h2dlab.units import fmt_size

    if not found:
        return ["no timed copy in this run: no result to show"]
    keys = [k for k in CELL_KEYS[command] if k in found[0] and k != "size_bytes"]

    def name(x: Any) -> str:  # a count read back as a float (2.0) shown as 2
        return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)

    width = {k: max(len(_HEADS[k]), *(len(name(c[k])) for c in found)) for k in keys}
    size_w = max(4, *(len(fmt_size(c["size_bytes"])) for c in found))

    def ms(x: float | None) -> str:
        return "n/a" if x is None else fmt_ms(x)

    rows = []
    for c in found:
        med = c["median_ms"]
        iqr = ms(c["iqr_ms"])
        failed = f"  ({c['error_rows']} failed)" if c["error_rows"] else ""
        rows.append(([name(c[k]) for k in keys], fmt_size(c["size_bytes"]), ms(med), iqr, fmt_gbps(math.nan if c["gbps"] is None else c["gbps"]),
                     f"{c['rows']}{failed}"))  # fmt: skip
    med_w = max(6, *(len(r[2]) for r in rows))
    iqr_w = max(3, *(len(r[3]) for r in rows))
    gb_w = max(4, *(len(r[4]) for r in rows))
    lead = "  ".join(f"{_HEADS[k]:<{width[k]}}" for k in keys)
    lines = [f"{lead}  {'size':>{size_w}}  {'median':>{med_w}}  {'IQR':>{iqr_w}}  {'GB/s':>{gb_w}}  rows"]
    for named, size, med, iqr, gb, n in rows:
        lead = "  ".join(f"{x:<{width[k]}}" for k, x in zip(keys, named, strict=True))
        lines.append(f"{lead}  {size:>{size_w}}  {med:>{med_w}}  {iqr:>{iqr_w}}  {gb:>{gb_w}}  {n}")
    lines.append(
        "median and IQR (middle half) of the timed copies per cell; GB/s = 10^9 bytes/s; KiB = 1024 B"
    )
    return lines


@contextlib.contextmanager
def json_stdout(enabled: bool) -> Iterator[None]:
    """While ``enabled`` (``--json``): what the command prints goes to stderr, so that stdout
    carries only the one object :func:`emit` writes."""
    if not enabled:
        yield
        return
    _JSON_OUT.append(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _JSON_OUT.pop()


def emitting() -> bool:
    """Whether a ``--json`` command is running (inside :func:`json_stdout`)."""
    return bool(_JSON_OUT)


def emit(obj: dict[str, Any]) -> None:
    """Write ``obj`` as JSON (NaN as null) to the command's stdout, also inside :func:`json_stdout`."""
    out = _JSON_OUT[-1] if _JSON_OUT else sys.stdout

    def clean(v: Any) -> Any:
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return str(v) if isinstance(v, Path) else _finite(v)

    out.write(json.dumps(clean(obj), indent=1, allow_nan=False, default=str) + "\n")
    out.flush()


def finish(df: Any, out: Path, command: str, as_json: bool, done: Callable[[], int], **more: Any) -> int:
    """End a measuring command: its result table on stdout (unless stopped or ``--json``),
    then ``done()`` (the "wrote ..." or "interrupted" lines on stderr, returning the exit
    code), then with ``as_json`` the one JSON object. Returns ``done()``'s code.

    The JSON object: ``command``, ``exit_code``, ``interrupted``, ``out`` (the table),
    ``env`` (its env.json), ``rows`` (all rows kept), ``timed_rows``, ``error_rows``,
    ``cells`` (:func:`cells`) and anything in ``more``."""
    from h2dlab.recording import datasets

    found = cells(df, command) if len(df) else []
    stopped = bool(df.attrs.get("stopped"))
    if not as_json and not stopped:
        print("\n".join(table_lines(found, command)), flush=True)
    code = done()
    if as_json:
        timed = int((~df["warmup"].astype(bool)).sum()) if len(df) else 0
        errors = int((df["error"] != "").sum()) if len(df) else 0
        emit({"command": command, "exit_code": code, "interrupted": stopped, "out": out,
              "env": datasets.env_path(out), "rows": len(df), "timed_rows": timed, "error_rows": errors,
              **more, "cells": found})  # fmt: skip
    return code


def report_summary(outdir: str | Path, code: int, started: float) -> dict[str, Any]:
    """``report --json``'s object: ``command``, ``exit_code``, ``outdir``, ``written`` (every
    file under ``outdir`` written since ``started``, a ``time.time()``) and ``timing`` (the
    report's own ``report-timing.json``: mode, data, seconds per notebook, the one that failed)."""
    from h2dlab.show.report import TIMING

    folder = Path(outdir)
    written = sorted(p for p in folder.rglob("*") if p.is_file() and p.stat().st_mtime >= started - 1)
    try:
        timing = json.loads((folder / TIMING).read_text())
    except (OSError, ValueError):
        timing = None
    return {"command": "report", "exit_code": code, "outdir": folder, "written": written, "timing": timing}
