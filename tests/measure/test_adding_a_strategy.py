"""Adding a strategy, done once the way docs/ARCHITECTURE.md says: a class registered in the
strategy registry (``measure/strategies.py``), its record in ``measure/names.py``'s RECORDS,
and a test. Here both are added at run time; a sweep then times the new way beside
``pageable``, its rows read back under its name, figures colour it, and its code is named."""

from __future__ import annotations

import matplotlib
import pandas as pd
import pytest
import torch

from h2dlab.measure import names, strategy
from h2dlab.measure.harness import sweep
from h2dlab.measure.spec import SweepSpec
from h2dlab.recording import datasets
from h2dlab.show import plots, plots_style

matplotlib.use("Agg")


class _Clone(strategy.Strategy):
    name = "toy_clone"
    summary = "x.clone() on the host (a toy way, for this test)"
    needs_cuda = False
    allocates = True

    def copy(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(strategy.REGISTRY, _Clone.name, _Clone)
    monkeypatch.setitem(names.RECORDS, _Clone.name, names.Record("x.clone()", "#123456"))
    return _Clone.name


def test_a_strategy_added_in_two_places_is_timed_read_named_and_coloured(toy, tmp_path):
    spec = SweepSpec((toy, "pageable"), (1024, 4096), device="cpu", reps=3, warmup=1, seed=1)
    df = sweep(spec, out=tmp_path / "r.csv", progress=False)
    timed = df[~df["warmup"]]
    assert timed.groupby(["strategy", "size_bytes"]).size().to_dict() == {
        (toy, 1024): 3, (toy, 4096): 3, ("pageable", 1024): 3, ("pageable", 4096): 3,
    }  # fmt: skip
    assert (timed["error"] == "").all() and (timed["wall_ms"] > 0).all()
    back = datasets.read(tmp_path / "r.csv")
    assert back.attrs["env"]["spec"]["strategies"] == [toy, "pageable"]
    assert names.code(toy) == "x.clone()"
    assert plots_style.palette_for([toy, "pageable"]) == {
        toy: "#123456",
        "pageable": names.RECORDS["pageable"].colour,
    }
    ax = plots.latency(back, fitted=False)
    drawn = {line.get_label(): matplotlib.colors.to_hex(line.get_color()) for line in ax.get_lines()}
    assert drawn.get(toy) == "#123456"
    matplotlib.pyplot.close("all")


def test_a_strategy_without_a_colour_gets_a_spare_one_no_other_name_uses(toy, monkeypatch):
    monkeypatch.setitem(names.RECORDS, toy, names.Record("x.clone()"))
    colours = plots_style.palette_for([toy, *plots_style.PALETTE])
    assert colours[toy] not in set(plots_style.PALETTE.values())
    assert isinstance(pd.Series(colours)[toy], str)
