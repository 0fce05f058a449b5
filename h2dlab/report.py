"""The rendered report: ``build()`` executes the notebooks into HTML, ``workbook()``
writes the tables behind them to one Excel file."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from h2dlab import datasets, session
from h2dlab.session import ROOT, resolve_mode

__all__ = ["NOTEBOOKS", "REPORTED", "build", "workbook"]

NOTEBOOKS = [
    "01-forum-experiment-revisited",
    "02-fastest-way",
    "03-spikes-explained",
    "04-pinned-memory-primer",
    "05-explore",
]
#: The notebooks rendered to reports/ (05 is interactive: it lives in JupyterLab).
REPORTED = NOTEBOOKS[:4]


def build(
    outdir: str | Path = "reports",
    mode: str | None = None,
    notebooks: list[str] | None = None,
    inplace: bool = False,
    timeout: int = 600,
    data: str | Path | None = None,
) -> int:
    """Execute the notebooks and render ``reports/*.html`` plus an Excel workbook.

    Parameters
    ----------
    outdir
        Where the HTML pages and the workbook go.
    mode
        ``H2DLAB_MODE`` for the notebook kernels (default: this process's variable).
    notebooks
        Names from :data:`NOTEBOOKS` (default: :data:`REPORTED`).
    inplace
        Also write the executed notebooks back to ``notebooks/`` (how the committed
        outputs are refreshed).
    timeout
        Seconds a cell may run.
    data
        The recording the notebooks read (``H2DLAB_DATA`` for the kernels): ``"h200"``
        or a recording folder (default: this process's variable, else each notebook's
        ``DATA``). In live mode this machine's recording is found or made once, here,
        before any notebook runs, and every notebook reads that same folder.

    Returns
    -------
    int
        0, or 1 when a notebook failed (the error is shown in its HTML page).
    """
    import jupytext
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    from nbconvert import HTMLExporter

    # The kernels get their own environment; this process's stays as it was.
    # Figures must reach the notebook whatever backend the caller's environment names.
    kernel_env = {**os.environ, "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    if mode is not None:
        kernel_env["H2DLAB_MODE"] = mode
    # The notebooks replay unless H2DLAB_MODE says otherwise (their MODE is "replay"); live
    # without CUDA fails here, early, in one line.
    resolved = resolve_mode("auto", kernel_env) if kernel_env.get("H2DLAB_MODE") else "replay"
    if data is not None:
        rec = session.Recorded(data if str(data) == session.BUNDLED else Path(data).resolve())  # checks it
        kernel_env["H2DLAB_DATA"] = rec.name if rec.name == session.BUNDLED else str(rec.folder)
    if resolved == "live":  # record this machine once (or find its recording), then every notebook reads it
        rec = session.recording(kernel_env.get("H2DLAB_DATA", session.BUNDLED), "live", environ=kernel_env)
        kernel_env["H2DLAB_DATA"] = str(rec.folder)
    shown = kernel_env.get("H2DLAB_DATA", "each notebook's DATA")
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    names = notebooks or REPORTED
    exporter = HTMLExporter(template_name="lab")
    t_all = time.time()
    for k, name in enumerate(names, 1):
        src = ROOT / "notebooks" / f"{name}.py"
        nb = jupytext.read(src)
        t0 = time.time()
        print(f"[{k}/{len(names)}] executing {name} ({resolved}, data: {shown}) ...", flush=True)
        failed = None
        try:
            NotebookClient(
                nb,
                timeout=timeout,
                kernel_name="python3",
                resources={"metadata": {"path": str(ROOT / "notebooks")}},
            ).execute(env=kernel_env)
        except CellExecutionError as exc:
            failed = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        if inplace:
            nb.metadata["jupytext"] = {"formats": "ipynb,py:percent"}
            nbformat.write(nb, ROOT / "notebooks" / f"{name}.ipynb")
        html, _ = exporter.from_notebook_node(nb)
        datasets.atomic_write(out / f"{name}.html", lambda p, html=html: Path(p).write_text(html))
        if failed:
            print(
                f"h2dlab: error: notebook {name} failed ({failed}); the error is shown in "
                f"{out / (name + '.html')}",
                file=sys.stderr,
            )
            return 1
        print(f"      wrote {out / (name + '.html')} in {time.time() - t0:.0f} s", flush=True)
    workbook(out / "h2dlab-tables.xlsx", kernel_env.get("H2DLAB_DATA", session.BUNDLED))
    print(f"wrote {out / 'h2dlab-tables.xlsx'}; all done in {time.time() - t_all:.0f} s")
    return 0


def workbook(path: str | Path, data: str | Path = session.BUNDLED) -> Path:
    """The tables behind the report, one sheet each, from the recording ``data``
    (``"h200"``, the bundled one, or a recording folder); kinds it lacks get no sheet."""
    from h2dlab import model, outliers

    rec = session.Recorded(data)
    label = "h200" if rec.name == session.BUNDLED else "recording"
    sheets = {}
    if rec.has("sweep"):
        sweep = rec.table("sweep")
        sheets[f"fit_{label}_sweep"] = model.fit(sweep, n_boot=50)
        sheets[f"medians_{label}_sweep"] = model.medians(sweep)
        sheets["advice_1GiB"] = model.advise(2**30, df=sweep)
        sheets["advice_64MiB"] = model.advise(2**26, df=sweep)
    tables = {"forum_a100": datasets.load("forum_a100")}
    tables.update({f"{label}_{k}": rec.table(k) for k in ("forum", "allocator") if rec.has(k)})
    for name, df in tables.items():
        e = outliers.explain(df)
        sheets[f"flagged_{name}"] = e[e.is_outlier][
            [
                "run_id",
                "order",
                "strategy",
                "size_bytes",
                "wall_ms",
                "event_ms",
                "expected_ms",
                "robust_z",
                "episode",
                "cause",
                "evidence",
            ]
        ]
    import pandas as pd

    def write(p: str) -> None:
        with pd.ExcelWriter(p, engine="openpyxl") as xw:
            for sheet, df in sheets.items():
                df.to_excel(xw, sheet_name=sheet[:31], index=False)

    path = Path(path)
    datasets.atomic_write(path, write)
    return path
