"""Text and rendered reports: ``h2dlab explain`` and ``h2dlab report``."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from h2dlab import datasets

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = [
    "01-forum-experiment-revisited",
    "02-fastest-way",
    "03-spikes-explained",
    "04-pinned-memory-primer",
    "05-explore",
]
#: The notebooks rendered to reports/ (05 is interactive: it lives in JupyterLab).
REPORTED = NOTEBOOKS[:4]


def _fmt_size(n: float) -> str:
    from h2dlab.measure import fmt_bytes

    return fmt_bytes(n)


def explain_cli(source: str, *, out: str | None = None, show_all: bool = False) -> int:
    """Print the fitted model per strategy and the flagged rows with cause and evidence."""
    from h2dlab import model, outliers

    if out is not None:
        suf = datasets.suffix_of(out)
        if suf not in datasets.SUFFIXES:
            raise ValueError(f"cannot write {Path(out).name!r}: use one of {', '.join(datasets.SUFFIXES)}")
        if not Path(out).resolve().parent.is_dir():
            raise ValueError(f"the folder of --out {out!r} does not exist: create it first")
    df = datasets.load(source)
    if df.empty:
        raise ValueError(f"{source}: the table has no rows")
    env = datasets.run_env(df)
    from h2dlab.env import describe

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
        rows = flagged if show_all else flagged.head(40)
        view = rows[cols].assign(size=rows["size_bytes"].map(_fmt_size), z=rows["robust_z"].round(1))
        print()
        for r in view.itertuples(index=False):
            print(f"[{r.run_id} #{r.order}] {r.strategy} {r.size}: {r.cause} (z={r.z}) - {r.evidence}")
        if not show_all and len(flagged) > 40:
            print(f"... {len(flagged) - 40} more (use --all or --out)")
    if out is not None:
        p = Path(out)
        suf = datasets.suffix_of(p)
        if suf == ".parquet":
            writer = lambda t: e.to_parquet(t, index=False)  # noqa: E731
        elif suf == ".xlsx":
            writer = lambda t: e.to_excel(t, index=False, engine="openpyxl")  # noqa: E731
        else:
            writer = lambda t: e.to_csv(t, index=False)  # noqa: E731
        datasets.atomic_write(p, writer)
        print(f"\nwrote the annotated table to {out}", file=sys.stderr)
    return 0


# --- notebook sessions: replay or live ----------------------------------------------------

MODES = ("auto", "replay", "live")
RUNS_DIR = ROOT / "data" / "runs"


def resolve_mode(mode: str = "auto") -> str:
    """'replay' or 'live' from a notebook's MODE and the H2DLAB_MODE variable (which wins).

    Raises ``RuntimeError`` for ``live`` without CUDA and ``ValueError`` for an unknown
    mode, each in one line that says what to do.
    """
    import torch

    mode = os.environ.get("H2DLAB_MODE", mode) or "auto"
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: use auto, replay or live (H2DLAB_MODE)")
    cuda = torch.cuda.is_available()
    if mode == "live" and not cuda:
        raise RuntimeError(
            "live mode needs CUDA and this machine has none: use H2DLAB_MODE=replay "
            "(or auto) to replay the recorded H200 data"
        )
    if mode == "auto":
        return "live" if cuda else "replay"
    return mode


class Session:
    """What a notebook reads: recorded datasets (replay) or runs measured now (live).

    ``data(name)`` returns the recorded dataset in replay mode; in live mode it runs
    the matching measurement with the kit's CLI (a fresh process, so that CUDA
    start-up lands where the forum's did), saves it under ``data/runs/`` with its
    env.json, and returns it.
    """

    #: What a live notebook measures in place of each recorded dataset: run name, CLI
    #: arguments, extra environment. The same experiments as data/record_h200.sh, capped
    #: at 1 GiB and with fewer repetitions so that a whole live report takes minutes.
    REG = {"PYTORCH_CUDA_ALLOC_CONF": "pinned_use_cuda_host_register:True,pinned_num_register_threads:8"}
    PIN = [
        "measure",
        "--sizes",
        "forum",
        "--strategies",
        "pin_then_copy",
        "--reps",
        "2",
        "--warmup",
        "0",
        "--order",
        "ascending",
    ]
    DEV = [
        "measure",
        "--sizes",
        "1KiB..256MiB",
        "--strategies",
        "pageable,pinned_reuse",
        "--reps",
        "5",
        "--warmup",
        "1",
    ]
    LIVE = {
        "h200_forum": [(f"ascending-{i}", ["forum"], {}) for i in (1, 2, 3)]
        + [("shuffled-1", ["forum", "--order", "shuffled", "--seed", "1"], {})],
        "h200_sweep": [
            (
                "pow2",
                ["measure", "--sizes", "1KiB..1GiB", "--reps", "10", "--reps-large", "3", "--warmup", "2"],
                {},
            ),
            (
                "forum-sizes",
                [
                    "measure",
                    "--sizes",
                    "forum",
                    "--strategies",
                    "pageable,pinned_reuse",
                    "--reps",
                    "3",
                    "--warmup",
                    "1",
                ],
                {},
            ),
        ],
        "h200_allocator": [
            ("pin-warm", PIN, {}),
            ("pin-emptied", [*PIN, "--empty-host-cache"], {}),
            ("pin-register-warm", PIN, REG),
            ("pin-register-emptied", [*PIN, "--empty-host-cache"], REG),
            ("device-cache-kept", DEV, {}),
            ("device-empty-cache", [*DEV, "--empty-cache"], {}),
        ],
        "h200_overlap": [("overlap", ["overlap", "--size", "256MiB", "--reps", "5"], {})],
    }

    def __init__(self, mode: str = "auto") -> None:
        self.mode = resolve_mode(mode)
        self.sources: dict[str, str] = {}
        self._cache: dict[str, object] = {}

    def data(self, name: str):
        """The recorded dataset ``name`` (replay), or the same experiment run now (live)."""
        if name in self._cache:
            return self._cache[name]
        if self.mode == "replay" or name not in self.LIVE:
            df = datasets.timeline(name) if name in datasets.TIMELINES else datasets.load(name)
            self.sources[name] = f"recorded `{name}`"
        else:
            df = self._measure(name)
        self._cache[name] = df
        return df

    def run(self, name: str, run: str):
        """One run of a dataset by its file name (e.g. ``pow2``), in either mode."""
        return datasets.run_named(self.data(name), run)

    def _measure(self, name: str):
        import subprocess

        stamp = time.strftime("%Y%m%d-%H%M%S")
        folder = RUNS_DIR / f"{stamp}-{name.replace('h200_', '')}"
        folder.mkdir(parents=True, exist_ok=True)
        for run, args, extra in self.LIVE[name]:
            out = folder / f"{run}.csv.gz"
            cmd = [sys.executable, "-m", "h2dlab.cli", *args, "--out", str(out)]
            if args[0] in ("measure", "forum"):
                cmd.append("--no-progress")
            print("measuring:", " ".join(["h2dlab", *cmd[3:]]), flush=True)
            subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, **extra})
        df = datasets.timeline(str(folder)) if name in datasets.TIMELINES else datasets.load(str(folder))
        df.attrs["dataset"] = f"live run {folder.relative_to(ROOT)}"
        self.sources[name] = f"measured now, saved in `{folder.relative_to(ROOT)}`"
        return df

    def banner(self):
        """An HTML banner: which mode ran, on what GPU, when, from which data."""
        from IPython.display import HTML

        from h2dlab.env import collect_env, describe

        here = collect_env(gpu=self.mode == "live")
        if self.mode == "replay":
            envs = [datasets.run_env(d) for d in self._cache.values() if hasattr(d, "attrs")]
            rec = next((e for e in envs if e and e.get("gpu_name")), {})
            what = (
                f"<b>Replay</b> of recorded data ({', '.join(self.sources.values()) or 'none yet'}), "
                f"measured on {describe(rec) if rec else 'the machine named in each figure'}."
            )
            why = (
                "No CUDA GPU here" if not here.get("cuda_available") else "Replay was asked for"
            ) + ": set <code>H2DLAB_MODE=live</code> on a GPU machine to measure it instead."
        else:
            what = f"<b>Live</b> measurement on this machine: {describe(here)}."
            why = "Runs are saved under <code>data/runs/</code> with their env.json."
        return HTML(
            f'<div class="h2dlab-banner" style="border-left:4px solid #1f77b4;padding:6px 10px;'
            f'background:#f3f7fb;font-size:90%">{what} {why}<br><small>executed '
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by h2dlab</small></div>"
        )


# --- the rendered report ------------------------------------------------------------------


def build(
    outdir: str | Path = "reports",
    mode: str | None = None,
    notebooks: list[str] | None = None,
    inplace: bool = False,
    timeout: int = 600,
) -> int:
    """Execute the notebooks and render ``reports/*.html`` plus an Excel workbook.

    ``inplace`` also writes the executed notebooks back to ``notebooks/`` (how the
    committed outputs are refreshed).
    """
    import jupytext
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    from nbconvert import HTMLExporter

    if mode is not None:
        os.environ["H2DLAB_MODE"] = mode
    # Figures must reach the notebook whatever backend the caller's environment names.
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    resolved = resolve_mode("auto")  # fails early, in one line, for live without CUDA
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    names = notebooks or REPORTED
    exporter = HTMLExporter(template_name="lab")
    t_all = time.time()
    for k, name in enumerate(names, 1):
        src = ROOT / "notebooks" / f"{name}.py"
        nb = jupytext.read(src)
        t0 = time.time()
        print(f"[{k}/{len(names)}] executing {name} ({resolved}) ...", flush=True)
        failed = None
        try:
            NotebookClient(
                nb,
                timeout=timeout,
                kernel_name="python3",
                resources={"metadata": {"path": str(ROOT / "notebooks")}},
            ).execute()
        except CellExecutionError as exc:
            failed = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        if inplace:
            nb.metadata["jupytext"] = {"formats": "ipynb,py:percent"}
            nbformat.write(nb, ROOT / "notebooks" / f"{name}.ipynb")
        html, _ = exporter.from_notebook_node(nb)
        (out / f"{name}.html").write_text(html)
        if failed:
            print(
                f"h2dlab: error: notebook {name} failed ({failed}); the error is shown in "
                f"{out / (name + '.html')}",
                file=sys.stderr,
            )
            return 1
        print(f"      wrote {out / (name + '.html')} in {time.time() - t0:.0f} s", flush=True)
    workbook(out / "h2dlab-tables.xlsx")
    print(f"wrote {out / 'h2dlab-tables.xlsx'}; all done in {time.time() - t_all:.0f} s")
    return 0


def workbook(path: str | Path) -> Path:
    """The tables behind the report, one sheet each, from the recorded data."""
    from h2dlab import model, outliers

    sheets = {}
    sweep = datasets.load("h200_sweep")
    sheets["fit_h200_sweep"] = model.fit(sweep, n_boot=50)
    sheets["medians_h200_sweep"] = model.medians(sweep)
    sheets["advice_1GiB"] = model.advise(2**30, df=sweep)
    sheets["advice_64MiB"] = model.advise(2**26, df=sweep)
    for name in ("forum_a100", "h200_forum", "h200_allocator"):
        e = outliers.explain(datasets.load(name))
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

    path = Path(path)
    with pd.ExcelWriter(path, engine="openpyxl") as xw:
        for sheet, df in sheets.items():
            df.to_excel(xw, sheet_name=sheet[:31], index=False)
    return path
