"""The Excel workbook behind the report: the tables, one sheet each, readable as they open.

A first sheet (``README``) says what each sheet holds, the units, and which machine and
command made the data. Every table sheet has a bold, frozen header row with an
auto-filter, widths that fit, number formats by unit (ms with 3 decimals, GB/s with 1,
µs with 1, ratios with 2, fractions as %), run names instead of run ids, and a readable
``size`` column beside ``size_bytes``. Bandwidth columns are headed ``GB/s``
(gigabytes, 1e9 bytes, per second).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from h2dlab.recording import datasets, session
from h2dlab.units import fmt_bytes

__all__ = ["FORMATS", "sheets", "write"]

#: Number format per column (after renaming); columns ending ``_ms`` get "0.000".
FORMATS = {
    "GB/s": "0.0",
    "GB/s lo": "0.0",
    "GB/s hi": "0.0",
    "overhead_us": "0.0",
    "overhead_us_lo": "0.0",
    "overhead_us_hi": "0.0",
    "robust_z": "0.0",
    "vs_pageable": "0.00",
    "fit_error": "0.0%",
    "iqr_over_median": "0.0%",
    "size_bytes": "#,##0",
}
RENAME = {
    "gbps": "GB/s",
    "gbps_lo": "GB/s lo",
    "gbps_hi": "GB/s hi",
    "median_abs_rel_err": "fit_error",
}
FLAGGED = ["run_id", "order", "strategy", "size_bytes", "wall_ms", "event_ms", "expected_ms", "robust_z",
           "episode", "cause", "evidence"]  # fmt: skip


def _readable(df: pd.DataFrame, names: dict[str, str] | None = None) -> pd.DataFrame:
    out = df.rename(columns=RENAME).copy()
    if "run_id" in out.columns:
        out.insert(out.columns.get_loc("run_id"), "run", out["run_id"].map(lambda r: (names or {}).get(r, r)))
        out = out.drop(columns="run_id")
    if "size_bytes" in out.columns:
        out.insert(out.columns.get_loc("size_bytes"), "size", out["size_bytes"].map(fmt_bytes))
    return out.reset_index(drop=True)


def _per_run_medians(df: pd.DataFrame) -> pd.DataFrame:
    from h2dlab.explain import model

    parts = [model.medians(g).assign(run_id=rid) for rid, g in df.groupby("run_id", sort=False)]
    med = pd.concat(parts, ignore_index=True)
    return med[["run_id", *[c for c in med.columns if c != "run_id"]]]


def _commands(df: pd.DataFrame, label: str) -> dict[str, str]:
    names, envs = df.attrs.get("run_names") or {}, df.attrs.get("envs") or {}
    return {f"{label}/{names.get(r, r)}": str((envs.get(r) or {}).get("command") or "unknown") for r in envs}


def sheets(
    data: str | Path = session.BUNDLED,
) -> tuple[dict[str, tuple[pd.DataFrame, str]], dict[str, Any], dict[str, str]]:
    """The sheets (name -> (table, what it is)) from the recording ``data``, the
    machine's fingerprint, and the command that made each run (``kind/run`` -> command);
    kinds the recording lacks get no sheet."""
    from h2dlab.explain import model, outliers
    from h2dlab.findings import advice

    rec = session.Recorded(data)
    label = "h200" if rec.bundled else "recording"
    out: dict[str, tuple[pd.DataFrame, str]] = {}
    commands: dict[str, str] = {}
    if rec.has("sweep"):
        sweep = rec.table("sweep")
        names = sweep.attrs.get("run_names") or {}
        commands.update(_commands(sweep, "sweep"))
        fit = model.fit(sweep, n_boot=50)
        out[f"fit_{label}_sweep"] = (
            _readable(fit, names),
            "latency = overhead + bytes / bandwidth fitted per run and strategy; lo/hi: 95% bootstrap "
            "interval; fit_error: median relative error of the line (above 10%: read the medians)",
        )
        out[f"medians_{label}_sweep"] = (
            _readable(_per_run_medians(sweep), names),
            "per run, strategy and size: median time and quartiles (q1, q3) of the timed copies, n "
            "copies, GB/s at the median, IQR as a fraction of the median",
        )
        for size in (2**30, 2**26):
            adv = advice.of_recording(rec, size)  # the notebooks' and the README's advice table
            if adv is not None:
                out[f"advice_{fmt_bytes(size).replace(' ', '')}"] = (
                    _readable(adv),
                    f"the advice table at {fmt_bytes(size)} (the one notebooks 01, 02, 04 and the README show): "
                    "per way, the median time per copy with its quartiles, GB/s, what it pays once up front, its "
                    "speed against its plain way (vs_pageable) and the rows it rests on (basis)",
                )
    tables = {"forum_a100": datasets.load("forum_a100")}
    tables.update({f"{label}_{k}": rec.table(k) for k in ("forum", "allocator") if rec.has(k)})
    for name, df in tables.items():
        if name != "forum_a100":
            commands.update(_commands(df, name.split("_", 1)[1]))
        e = outliers.explain(df)
        out[f"flagged_{name}"] = (
            _readable(e[e["is_outlier"]][FLAGGED], df.attrs.get("run_names")),
            f"every copy of {name} flagged as slow (robust_z: noise scales above the expected time), "
            "with its cause and the evidence for it, in time order",
        )
    env = rec.machine() if rec.name != session.BUNDLED else datasets.run_env(rec.table("sweep"))
    return out, env, commands


def _readme(
    sheets_: dict[str, tuple[pd.DataFrame, str]], env: dict[str, Any], commands, data
) -> pd.DataFrame:
    from h2dlab.recording.env import describe

    rows = [
        ("data", f"recording {data!r}" if str(data) != session.BUNDLED else "the bundled H200 recording (h200)"),
        ("machine", describe(env) if env else "unknown (no env.json)"),
        ("host", str(env.get("hostname") or "unknown")),
        ("units", "times in ms (milliseconds, _ms) or µs (_us); GB/s = 1e9 bytes per second; "
                  "sizes in bytes (size_bytes) with a readable size beside (KiB = 1024 bytes)"),
        ("forum_a100", "the A100 table published in the forum thread (host clock, one shot each)"),
    ]  # fmt: skip
    rows += [(f"command {run}", cmd) for run, cmd in commands.items()]
    rows += [("", ""), ("sheet", "what it holds")]
    rows += [(name, what) for name, (_, what) in sheets_.items()]
    return pd.DataFrame(rows, columns=["about", "h2dlab tables"])


def _style(ws, df: pd.DataFrame, header_row: int = 1) -> None:
    from openpyxl.styles import Alignment, Font
    from openpyxl.utils import get_column_letter

    bold = Font(bold=True)
    for cell in ws[header_row]:
        cell.font = bold
    ws.freeze_panes = ws.cell(row=header_row + 1, column=1)
    ws.auto_filter.ref = ws.dimensions
    for j, col in enumerate(df.columns, 1):
        letter = get_column_letter(j)
        fmt = FORMATS.get(col) or ("0.000" if str(col).endswith("_ms") else None)
        if fmt:
            for cell in ws[letter][header_row:]:
                cell.number_format = fmt
        sample = [len(str(v)) for v in df[col].head(200)]
        width = max([len(str(col)), *sample, 4]) + 2
        ws.column_dimensions[letter].width = min(width, 90)
        if width > 90:
            for cell in ws[letter][header_row:]:
                cell.alignment = Alignment(wrap_text=True, vertical="top")


def write(path: str | Path, data: str | Path = session.BUNDLED) -> Path:
    """Write the workbook of the recording ``data`` to ``path`` (atomically); returns it."""
    from h2dlab.escape import defuse_sheet, sheet_frame, text_columns

    tables, env, commands = sheets(data)
    # text from an env.json or a table may hold a control character, which openpyxl refuses
    readme = sheet_frame(_readme(tables, env, commands, data))
    tables = {name: (sheet_frame(df), rest) for name, (df, rest) in tables.items()}

    def writer(p: str) -> None:
        with pd.ExcelWriter(p, engine="openpyxl") as xw:
            readme.to_excel(xw, sheet_name="README", index=False)
            _style(xw.sheets["README"], readme)
            defuse_sheet(xw.sheets["README"])  # commands and env text are never formulas
            for name, (df, _) in tables.items():
                df.to_excel(xw, sheet_name=name[:31], index=False)
                _style(xw.sheets[name[:31]], df)
                defuse_sheet(xw.sheets[name[:31]], text_columns(df))

    path = Path(path)
    datasets.atomic_write(path, writer)
    return path
