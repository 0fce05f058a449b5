"""The explorer's widgets without a browser (tests/show/test_lab.py drives it in JupyterLab):
sizes chosen in KiB/MiB/GiB, any run opened by path, one run per timeline, headed tables
with readable sizes, and its title kept off the axes' own title."""

import matplotlib.pyplot as plt
import pytest

pytest.importorskip("ipywidgets")

from h2dlab.recording import datasets  # noqa: E402
from h2dlab.show.explore import ALL_RUNS, Explorer  # noqa: E402


@pytest.fixture(scope="module")
def ex():
    return Explorer("replay")


def test_size_range_is_in_binary_units(ex):
    labels = [label for label, _ in ex.sizes.options]
    assert labels[10] == "1 KiB" and labels[20] == "1 MiB" and labels[30] == "1 GiB"
    ex.sizes.value = (20, 26)  # 1 MiB .. 64 MiB
    sel = ex.selection()
    assert sel["size_bytes"].min() >= 2**20 and sel["size_bytes"].max() <= 2**26 and len(sel)
    assert ex.sizes.label == ("1 MiB", "64 MiB")


def test_open_any_run_by_path_or_say_why_not(ex, tmp_path):
    assert not ex.open_path(str(tmp_path / "nope.csv.gz"))
    assert "cannot open" in ex.status.value and "no such file" in ex.status.value
    path = datasets.DATA_DIR / "h200_allocator" / "pin-warm.csv.gz"
    assert ex.open_path(str(path))
    assert ex.df["run_id"].nunique() == 1 and ex.run.options == ((ALL_RUNS, ALL_RUNS),)


def test_one_run_per_timeline_and_headed_tables(ex):
    ex.source.value = "h200_forum"
    ex.source.value = "h200_sweep"
    assert ex.df["run_id"].nunique() == 3
    assert {label for label, _ in ex.run.options} == {ALL_RUNS, "pow2", "pow2-interleaved", "forum-sizes"}
    ex.view.value = "timeline"
    sel = ex.selection()
    run = ex.timeline_run(sel)
    assert run == sel["run_id"].iloc[0]
    ax = ex.snapshot("timeline")
    xs = [x for line in ax.get_lines() for x in line.get_xdata()]
    in_run = set(sel.loc[sel.run_id == run, "order"])
    assert xs and set(xs) <= in_run  # only that run's copies
    fig = ax.figure
    assert fig.get_suptitle() and fig.get_suptitle() != ax.get_title()
    fit, flagged = ex.tables(sel)
    assert list(fit.columns) == ["strategy", "overhead (µs)", "GB/s", "copies", "fit error"]
    assert "size" in flagged.columns and "run" in flagged.columns and "run_id" not in flagged.columns
    assert flagged["size"].str.contains("iB").all() and set(flagged["run"]) <= {
        "pow2",
        "pow2-interleaved",
        "forum-sizes",
    }
    plt.close("all")
