"""An interactive explorer for JupyterLab (ipywidgets), used by notebooks/05-explore.

A thin layer over ``measure``, ``session``, ``model``, ``outliers`` and ``plots``: it picks a table,
filters it, and draws what those modules compute. It adds no analysis of its own.
"""

from __future__ import annotations

import threading
import time

import matplotlib.pyplot as plt
import pandas as pd

from h2dlab import datasets, model, outliers, plots

__all__ = ["MEASURE_NOW", "VIEWS", "Explorer"]

MEASURE_NOW = "measure this machine now"
VIEWS = ("latency", "bandwidth", "timeline")


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


class Explorer:
    """Widgets: a source (recorded dataset, a run on disk, or a live sweep), strategies,
    a size range and a view; the figure, the fitted model and the flagged rows update in
    place."""

    def __init__(self, mode: str = "auto") -> None:
        import ipywidgets as W
        import torch

        from h2dlab.session import resolve_mode

        self.mode = resolve_mode(mode)
        self.cuda = torch.cuda.is_available()
        tables = [n for n in datasets.names() if n not in datasets.TIMELINES]
        self.source = W.Dropdown(
            options=[*tables, *_runs_on_disk(), MEASURE_NOW],
            value="h200_sweep" if "h200_sweep" in tables else tables[0],
            description="data",
        )
        self.strategies = W.SelectMultiple(options=[], rows=6, description="strategies")
        self.sizes = W.IntRangeSlider(
            min=10, max=32, value=(10, 32), description="log2 size", continuous_update=False
        )
        self.view = W.ToggleButtons(options=VIEWS, value="latency", description="view")
        self.measure_btn = W.Button(
            description="measure now",
            icon="play",
            disabled=not self.cuda,
            tooltip=f"sweep this GPU, saving to {datasets.runs_dir()}",
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
        for w in (self.strategies, self.sizes, self.view):
            w.observe(lambda ch: self.redraw(), names="value")
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

    def set_table(self, df: pd.DataFrame) -> None:
        self.df = df
        self.explained = outliers.explain(df)
        names = list(dict.fromkeys(df["strategy"]))
        sizes = df["size_bytes"][df["size_bytes"] > 0]
        lo, hi = int(sizes.min()).bit_length() - 1, int(sizes.max() - 1).bit_length()
        self._quiet = True  # one redraw for the whole update, not one per widget
        try:
            self.strategies.value = ()
            self.strategies.options = names
            self.strategies.value = tuple(names)
            self.sizes.min, self.sizes.max = 0, 48
            self.sizes.value = (lo, hi)
            self.sizes.min, self.sizes.max = lo, hi
        finally:
            self._quiet = False
        self.redraw()

    def selection(self) -> pd.DataFrame:
        e = self.explained
        lo, hi = self.sizes.value
        keep = e["strategy"].isin(self.strategies.value) & e["size_bytes"].between(2**lo, 2**hi)
        out = e[keep]
        out.attrs = dict(self.df.attrs)
        return out

    # --- drawing ------------------------------------------------------------------------
    def snapshot(self, view: str | None = None):
        """The current selection drawn as a plain figure (for rendered, non-interactive pages)."""
        sel = self.selection()
        fig, ax = plt.subplots(figsize=(9, 4.6))
        view = view or self.view.value
        if view == "latency":
            plots.latency(sel, ax=ax)
        elif view == "bandwidth":
            plots.bandwidth(sel, ax=ax)
        else:
            plots.timeline(sel, ax=ax)
        ax.set_title(f"{self.source.value}: {view} (snapshot of the explorer's current selection)")
        return ax

    def redraw(self) -> None:
        if self.df is None or self._quiet:
            return
        sel = self.selection()
        self.fig_out.clear_output(wait=True)
        self.table_out.clear_output(wait=True)
        with self.fig_out:
            fig, ax = plt.subplots(figsize=(9, 4.6))
            if sel.empty:
                ax.text(0.5, 0.5, "nothing selected", ha="center", transform=ax.transAxes)
            elif self.view.value == "latency":
                plots.latency(sel, ax=ax)
            elif self.view.value == "bandwidth":
                plots.bandwidth(sel, ax=ax)
            else:
                plots.timeline(sel, ax=ax)
                plots.annotate(sel, ax=ax, max_labels=5)
            ax.set_title(f"{self.source.value}: {self.view.value}, {len(sel)} rows")
            plt.show()
        with self.table_out:
            from IPython.display import display

            if not sel.empty:
                fit = model.fit(sel, by=("strategy",), n_boot=0)
                if len(fit):
                    display(fit[["strategy", "overhead_us", "gbps", "n", "median_abs_rel_err"]].round(3))
                flagged = sel[sel.is_outlier]
                display(
                    flagged[
                        ["run_id", "order", "strategy", "size_bytes", "expected_ms", "cause", "evidence"]
                    ].head(15)
                )
        self.redraws += 1

    # --- a small live sweep ---------------------------------------------------------------
    def measure_now(self, sizes: str = "1KiB..256MiB", reps: int = 5) -> threading.Thread | None:
        """Sweep this GPU in the background (rows saved to ``datasets.runs_dir()`` as measured); the
        stop button ends it after the copy in flight, keeping every row."""
        if not self.cuda:
            self.status.value = "<b>measure now needs a CUDA GPU</b>; this machine has none."
            return None
        from h2dlab import strategies
        from h2dlab.measure import sweep
        from h2dlab.plan import plan_spec
        from h2dlab.recorder import StopFlag
        from h2dlab.spec import SweepSpec
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
        self.status.value = f"measuring {len(planned)} copies into {out.name} ..."

        def work():
            try:
                df = sweep(
                    spec,
                    out=out,
                    progress=False,
                    stop=self._stop,
                    on_row=lambda n: setattr(self.progress, "value", n),
                )
                self.status.value = (
                    f"{'stopped' if df.attrs.get('stopped') else 'done'}: {len(df)} rows kept in {out}"
                )
                self.set_table(df)
            except Exception as exc:  # noqa: BLE001 - shown in the widget, not lost in a thread
                self.status.value = f"<b>measurement failed:</b> {exc}"
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
