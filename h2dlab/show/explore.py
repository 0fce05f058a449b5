"""An interactive explorer for JupyterLab (ipywidgets), used by notebooks/05-explore.

A thin layer over ``measure``, ``session``, ``model``, ``outliers`` and ``plots``: it picks a table,
filters it, and draws what those modules compute. It adds no analysis of its own.
"""

from __future__ import annotations

import threading
import time

import matplotlib.pyplot as plt
import pandas as pd

from h2dlab.escape import html_text
from h2dlab.explain import model, outliers
from h2dlab.recording import datasets
from h2dlab.show import plots
from h2dlab.units import fmt_bytes

__all__ = ["ALL_RUNS", "MEASURE_NOW", "SIZE_STEPS", "VIEWS", "Explorer", "styled"]

MEASURE_NOW = "measure this machine now"
VIEWS = ("latency", "bandwidth", "timeline")
ALL_RUNS = "all runs"
#: The size range's stops: powers of two, shown as 1 KiB ... 16 GiB.
SIZE_STEPS = [(fmt_bytes(2**k), k) for k in range(0, 35)]


def _runs_on_disk() -> list[str]:
    base = datasets.runs_dir()  # the user's recordings, never site-packages
    if not base.is_dir():
        return []
    found = sorted(
        {
            str(p.parent if p.parent != base else p)
            for p in base.rglob("*.csv*")
            if not p.name.endswith(".partial.csv")
        }
    )
    return found  # absolute: load() must find them from any working folder


def styled(table: pd.DataFrame):
    """``table`` as the explorer shows it: no index, every cell and every column header
    HTML-escaped (a strategy, run id, evidence or column name read from a file is text,
    never markup)."""
    return table.style.hide(axis="index").format(escape="html").format_index(escape="html", axis=1)


class Explorer:
    """Widgets: a source (recorded dataset, a run on disk, or a live sweep), strategies,
    a size range and a view; the figure, the fitted model and the flagged rows update in
    place."""

    def __init__(self, mode: str = "auto") -> None:
        import ipywidgets as W
        import torch

        from h2dlab.recording.session import resolve_mode

        self.mode = resolve_mode(mode)
        self.cuda = torch.cuda.is_available()
        tables = [n for n in datasets.names() if n not in datasets.TIMELINES]
        self.source = W.Dropdown(
            options=[*tables, *_runs_on_disk(), MEASURE_NOW],
            value="h200_sweep" if "h200_sweep" in tables else tables[0],
            description="data",
        )
        self.strategies = W.SelectMultiple(options=[], rows=6, description="strategies")
        self.sizes = W.SelectionRangeSlider(
            options=SIZE_STEPS, index=(10, 32), description="sizes", continuous_update=False
        )
        self.run = W.Dropdown(options=[(ALL_RUNS, ALL_RUNS)], value=ALL_RUNS, description="run")
        self.path = W.Text(
            placeholder="a recorded run or folder: path/to/run.csv.gz",
            description="open",
            continuous_update=False,
        )
        self.open_btn = W.Button(
            description="open", icon="folder-open", tooltip="load the table at this path"
        )
        self.view = W.ToggleButtons(options=VIEWS, value="latency", description="view")
        self.measure_btn = W.Button(
            description="measure now",
            icon="play",
            disabled=not self.cuda,
            tooltip=f"sweep this GPU, saving to {_shown(datasets.runs_dir())}",
        )
        self.stop_btn = W.Button(description="stop", icon="stop", disabled=True)
        self.status = W.HTML()
        self.progress = W.IntProgress(min=0, max=1, value=0, description="rows")
        self.fig_out = W.Output()
        self.table_out = W.Output()
        self.df: pd.DataFrame | None = None
        self.explained: pd.DataFrame | None = None
        self.redraws = 0
        self._stop = None
        self._quiet = False
        if not self.cuda:
            self.status.value = (
                "<i>measure now is disabled: this machine has no CUDA GPU "
                "(torch.cuda.is_available() is False). Explore the recorded data instead.</i>"
            )
        self.source.observe(lambda ch: self.load(ch["new"]), names="value")
        for w in (self.strategies, self.sizes, self.view, self.run):
            w.observe(lambda ch: self.redraw(), names="value")
        self.open_btn.on_click(lambda _b: self.open_path(self.path.value))
        self.path.observe(lambda ch: self.open_path(ch["new"]) if ch["new"].strip() else None, names="value")
        self.measure_btn.on_click(lambda _b: self.measure_now())
        self.stop_btn.on_click(lambda _b: self.stop())
        self.load(self.source.value)

    # --- data -----------------------------------------------------------------------
    def load(self, name: str) -> None:
        if name == MEASURE_NOW:
            if not self.cuda:
                self.status.value = "<b>measure now needs a CUDA GPU</b>; this machine has none."
                return
            self.measure_now()
            return
        self.set_table(datasets.load(name))

    def open_path(self, text: str) -> bool:
        """Load any recorded run or folder of runs by path; a bad path is said in the
        status line (no traceback). Returns whether it loaded."""
        text = (text or "").strip()
        try:
            df = datasets.load(text)
        except (ValueError, TypeError) as exc:  # SchemaError is a ValueError
            self.status.value = f"<b>cannot open {html_text(repr(text))}:</b> {html_text(exc)}"
            return False
        self.status.value = f"opened {html_text(text)} ({len(df)} rows)"
        self.set_table(df)
        return True

    def run_names(self) -> dict[str, str]:
        """run_id -> the run's name (its file name) for the table shown."""
        names = (self.df.attrs.get("run_names") or {}) if self.df is not None else {}
        ids = dict.fromkeys(self.df["run_id"]) if self.df is not None else {}
        return {rid: str(names.get(rid, rid)) for rid in ids}

    def set_table(self, df: pd.DataFrame) -> None:
        self.df = df
        self.explained = outliers.explain(df)
        names = list(dict.fromkeys(df["strategy"]))
        sizes = df["size_bytes"][df["size_bytes"] > 0]
        lo, hi = int(sizes.min()).bit_length() - 1, int(sizes.max() - 1).bit_length()
        runs = self.run_names()
        self._quiet = True  # one redraw for the whole update, not one per widget
        try:
            self.strategies.value = ()
            self.strategies.options = names
            self.strategies.value = tuple(names)
            self.sizes.index = (max(0, lo), min(len(SIZE_STEPS) - 1, hi))
            pairs = [(n, rid) for rid, n in runs.items()] if len(runs) > 1 else []
            self.run.options = [(ALL_RUNS, ALL_RUNS), *pairs]
            self.run.value = ALL_RUNS
        finally:
            self._quiet = False
        self.redraw()

    def selection(self) -> pd.DataFrame:
        e = self.explained
        lo, hi = self.sizes.value
        keep = e["strategy"].isin(self.strategies.value) & e["size_bytes"].between(2**lo, 2**hi)
        if self.run.value != ALL_RUNS:
            keep &= e["run_id"] == self.run.value
        out = e[keep]
        out.attrs = dict(self.df.attrs)
        return out

    def timeline_run(self, sel: pd.DataFrame) -> str | None:
        """The one run a timeline shows: the chosen one, else the first (runs have their
        own clocks; several on one time axis make a blob)."""
        if self.run.value != ALL_RUNS or sel.empty:
            return None if self.run.value == ALL_RUNS else self.run.value
        return str(sel["run_id"].iloc[0])

    def tables(self, sel: pd.DataFrame) -> tuple[pd.DataFrame | None, pd.DataFrame]:
        """The fitted model and the flagged rows of ``sel``, headed for a reader."""
        fit = model.fit(sel, by=("strategy",), n_boot=0) if not sel.empty else pd.DataFrame()
        shown_fit = None
        if len(fit):
            shown_fit = pd.DataFrame(
                {
                    "strategy": fit["strategy"],
                    "overhead (µs)": fit["overhead_us"].round(1),
                    "GB/s": fit["gbps"].round(1),
                    "copies": fit["n"],
                    "fit error": (100 * fit["median_abs_rel_err"]).round(0).astype(int).astype(str) + " %",
                }
            )
        f = sel[sel["is_outlier"]].head(15)
        names = self.run_names()
        flagged = pd.DataFrame(
            {
                "run": f["run_id"].map(names),
                "#": f["order"],
                "strategy": f["strategy"],
                "size": f["size_bytes"].map(fmt_bytes),
                "took (ms)": model.value_ms(f).round(3),
                "expected (ms)": f["expected_ms"].round(3),
                "cause": f["cause"],
                "evidence": f["evidence"],
            }
        )
        return shown_fit, flagged

    # --- drawing ------------------------------------------------------------------------
    def snapshot(self, view: str | None = None):
        """The current selection drawn as a plain figure (for rendered, non-interactive pages)."""
        sel = self.selection()
        fig, ax = plots.subplots(figsize=(9, 4.6))
        view = view or self.view.value
        self._draw(sel, ax, view, labels=False)
        fig.suptitle(f"{self._label()}: {view} (snapshot of the explorer's current selection)")
        return ax

    def _label(self) -> str:
        src = self.source.value if self.df is None else self.df.attrs.get("dataset", self.source.value)
        run = self.run.value
        return f"{src}, run {self.run_names().get(run, run)}" if run != ALL_RUNS else str(src)

    def _draw(self, sel: pd.DataFrame, ax, view: str, labels: bool = True) -> None:
        if view == "latency":
            plots.latency(sel, ax=ax)
        elif view == "bandwidth":
            plots.bandwidth(sel, ax=ax)
        else:
            run = self.timeline_run(sel)
            one = sel if run is None else sel[sel["run_id"] == run]
            plots.timeline(one, ax=ax, run_id=run)
            if run is not None and self.run.value == ALL_RUNS and sel["run_id"].nunique() > 1:
                ax.set_title(f"{ax.get_title()} (run {self.run_names().get(run, run)}; pick another above)")
            if labels:
                plots.annotate(one, ax=ax, max_labels=5)

    def redraw(self) -> None:
        if self.df is None or self._quiet:
            return
        sel = self.selection()
        self.fig_out.clear_output(wait=True)
        self.table_out.clear_output(wait=True)
        with self.fig_out:
            fig, ax = plots.subplots(figsize=(9, 4.6))
            if sel.empty:
                ax.text(0.5, 0.5, "nothing selected", ha="center", transform=ax.transAxes)
            else:
                self._draw(sel, ax, self.view.value)
            # Above the axes' own title (constrained layout makes room), never on it.
            fig.suptitle(f"{self._label()}: {self.view.value}, {len(sel)} rows")
            plt.show()
        with self.table_out:
            from IPython.display import HTML, display

            if not sel.empty:
                fit, flagged = self.tables(sel)
                if fit is not None:
                    display(HTML("<b>Fitted model (latency = overhead + bytes / bandwidth)</b>"))
                    display(styled(fit))
                display(HTML(f"<b>Slow copies flagged ({int(sel['is_outlier'].sum())}; the first 15)</b>"))
                display(styled(flagged))
        self.redraws += 1

    # --- a small live sweep ---------------------------------------------------------------
    def measure_now(self, sizes: str = "1KiB..256MiB", reps: int = 5) -> threading.Thread | None:
        """Sweep this GPU in the background (rows saved to ``datasets.runs_dir()`` as measured); the
        stop button ends it after the copy in flight, keeping every row."""
        if not self.cuda:
            self.status.value = "<b>measure now needs a CUDA GPU</b>; this machine has none."
            return None
        from h2dlab.measure import strategies
        from h2dlab.measure.harness import sweep
        from h2dlab.measure.plan import plan_spec
        from h2dlab.measure.recorder import StopFlag
        from h2dlab.measure.spec import SweepSpec
        from h2dlab.units import parse_sizes

        out = datasets.runs_dir() / f"{time.strftime('%Y%m%d-%H%M%S')}-explore.csv.gz"
        out.parent.mkdir(parents=True, exist_ok=True)
        self._stop = StopFlag()
        spec = SweepSpec(
            strategies=tuple(strategies.names()),
            sizes=tuple(parse_sizes(sizes)),
            device="cuda",
            reps=reps,
            warmup=1,
        )
        planned = plan_spec(spec)
        self.progress.max, self.progress.value = len(planned), 0
        self.measure_btn.disabled, self.stop_btn.disabled = True, False
        self.status.value = f"measuring {len(planned)} copies into {html_text(out.name)} ..."

        def work():
            try:
                df = sweep(
                    spec,
                    out=out,
                    progress=False,
                    stop=self._stop,
                    on_row=lambda n: setattr(self.progress, "value", n),
                )
                self.status.value = f"{'stopped' if df.attrs.get('stopped') else 'done'}: {len(df)} rows kept in {html_text(out)}"
                self.set_table(df)
            except Exception as exc:  # noqa: BLE001 - shown in the widget, not lost in a thread
                self.status.value = f"<b>measurement failed:</b> {html_text(exc)}"
            finally:
                self.measure_btn.disabled, self.stop_btn.disabled = False, True

        t = threading.Thread(target=work, daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.request()  # as if Ctrl-C: stop after the copy in flight

    def widget(self):
        import ipywidgets as W

        return W.VBox(
            [
                W.HBox([self.source, self.view]),
                W.HBox([self.path, self.open_btn, self.run]),
                W.HBox(
                    [
                        self.strategies,
                        W.VBox([self.sizes, W.HBox([self.measure_btn, self.stop_btn]), self.progress]),
                    ]
                ),
                self.status,
                self.fig_out,
                self.table_out,
            ]
        )

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget())


def _shown(path) -> str:
    """A folder as a shared notebook may show it: relative to the kit's folder when inside it
    (a rendered page keeps no reader's home folder), else as given."""
    from pathlib import Path

    kit = Path(__file__).resolve().parents[2]
    try:
        return str(Path(path).resolve().relative_to(kit))
    except ValueError:
        return str(path)
