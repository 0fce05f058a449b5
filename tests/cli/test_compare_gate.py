"""``h2dlab compare``: the GB/s column and the ``--fail-above PCT`` regression gate (issue #35),
on synthetic tables (made-up times, not measurements): two runs whose medians are set exactly."""

import json

import numpy as np
import pandas as pd
import pytest

from h2dlab.cli import main as cli
from h2dlab.recording import datasets

KiB, MiB = 2**10, 2**20


def synthetic_run(path, run_id, ms, reps=5):
    """A synthetic table (not a measurement): per (strategy, size), ``reps`` timed copies of
    exactly ``ms[(strategy, size)]`` milliseconds, written at ``path`` with its env.json."""
    rows = [(s, n, rep, t) for (s, n), t in ms.items() for rep in range(reps)]
    df = pd.DataFrame(rows, columns=["strategy", "size_bytes", "rep", "event_ms"])
    df = df.assign(run_id=run_id, order=np.arange(len(df)), shape="", dtype="uint8", warmup=False,
                   t_s=np.arange(len(df)) * 0.01, wall_ms=df["event_ms"] * 1.01, host_allocs=0.0,
                   device_allocs=0.0, empty_cache=False, error="")  # fmt: skip
    return datasets.save(
        datasets.validate(df), path, env={"run_id": run_id, "schema_version": 6, "gpu_name": "synthetic"}
    )


#: The first (reference) run's synthetic medians, in ms.
OLD = {
    ("pageable", KiB): 0.020,
    ("pageable", MiB): 0.200,
    ("pinned_reuse", KiB): 0.010,
    ("pinned_reuse", MiB): 0.040,
}


@pytest.fixture
def runs(tmp_path):
    """old.csv, and new.csv where pageable 1 MiB is 30 % slower and pinned_reuse 1 KiB 4 % slower."""
    new = {**OLD, ("pageable", MiB): 0.260, ("pinned_reuse", KiB): 0.0104}
    return (
        str(synthetic_run(tmp_path / "old.csv", "synthetic-old", OLD)),
        str(synthetic_run(tmp_path / "new.csv", "synthetic-new", new)),
    )


def test_fail_above_exits_1_and_names_each_regressed_cell_synthetic(runs, capsys):
    rc = cli.main(["compare", *runs, "--fail-above", "5"])
    out, err = capsys.readouterr()
    assert rc == 1, err
    lines = [ln for ln in err.splitlines() if "regression" in ln]
    assert len(lines) == 1, err  # pinned_reuse 1 KiB is 4 % slower: under the 5 % gate
    assert "pageable 1 MiB" in lines[0] and "30.0% slower" in lines[0] and "200 µs" in lines[0]
    assert "across runs" in out  # the tables are still printed


def test_fail_above_passes_below_the_threshold_and_accepts_a_percent_sign_synthetic(runs, capsys):
    assert cli.main(["compare", *runs, "--fail-above", "30%"]) == 0  # 30.0 % is not more than 30 %
    assert "regression" not in capsys.readouterr().err
    assert cli.main(["compare", *runs, "--fail-above", "3"]) == 1
    assert capsys.readouterr().err.count("regression") == 2
    assert cli.main(["compare", *runs]) == 0  # no gate asked: exit 0 as before


def test_fail_above_gates_the_json_output_too_synthetic(runs, capsys):
    rc = cli.main(["compare", *runs, "--fail-above", "5", "--json"])
    out, err = capsys.readouterr()
    assert rc == 1 and len(json.loads(out)) == 8 and "pageable 1 MiB" in err


def test_a_faster_run_never_fails_the_gate_synthetic(runs, capsys):
    old, new = runs
    assert cli.main(["compare", new, old, "--fail-above", "0"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--fail-above", "-5"], "percentage of 0 or more"),
        (["--fail-above", "five"], "not a number"),
        (["--fail-above", "inf"], "percentage of 0 or more"),
    ],
)
def test_a_bad_percentage_is_refused_in_one_line_synthetic(runs, extra, needle, capsys, tmp_path):
    from tests.conftest import refused_in_one_line

    refused_in_one_line(["compare", *runs, *extra], [needle], capsys, tmp_path)


def test_fail_above_with_one_run_or_nothing_in_common_exits_2_synthetic(tmp_path, capsys):
    from tests.conftest import refused_in_one_line

    old = str(synthetic_run(tmp_path / "a.csv", "synthetic-a", OLD))
    refused_in_one_line(["compare", old, "--fail-above", "5"], ["two or more"], capsys, tmp_path)
    other = str(synthetic_run(tmp_path / "b.csv", "synthetic-b", {("staged", 4 * KiB): 0.05}))
    refused_in_one_line(["compare", old, other, "--fail-above", "5"], ["nothing to gate"], capsys, tmp_path)


def test_a_cell_missing_from_the_later_run_is_said_not_gated_synthetic(tmp_path, capsys):
    old = str(synthetic_run(tmp_path / "a.csv", "synthetic-a", OLD))
    part = {k: v for k, v in OLD.items() if k != ("pageable", MiB)}
    new = str(synthetic_run(tmp_path / "b.csv", "synthetic-b", part))
    assert cli.main(["compare", old, new, "--fail-above", "5"]) == 0
    assert "1 cell(s)" in capsys.readouterr().err  # said, not silently passed


def test_every_table_has_a_gbps_column_per_strategy_synthetic(runs, capsys):
    assert cli.main(["compare", runs[0]]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(ln for ln in lines if ln.strip().startswith("size"))
    assert header.split() == ["size", "pageable", "GB/s", "pinned_reuse", "GB/s"]
    row = next(ln for ln in lines if ln.strip().startswith("1 MiB"))
    # 1 MiB in 0.2 ms is 5.24 GB/s (10^9 bytes/s); in 0.04 ms 26.2 GB/s
    assert row.split()[-1] == "26.2" and " 5.24 " in row


def test_compare_json_carries_gbps_synthetic(runs, capsys):
    assert cli.main(["compare", runs[0], "--json"]) == 0
    cells = json.loads(capsys.readouterr().out)
    for c in cells:
        assert c["gbps"] == pytest.approx(c["size_bytes"] / c["median_ms"] / 1e6)


@pytest.mark.parametrize("g,text", [(0.0286, "0.0286"), (5.243, "5.24"), (26.21, "26.2"), (121.4, "121")])
def test_fmt_gbps_three_significant_digits(g, text):
    from h2dlab.cli.compare import fmt_gbps

    assert fmt_gbps(g) == text
    assert fmt_gbps(float("nan")) == "n/a"


def test_a_folders_runs_are_gated_in_natural_order_synthetic(tmp_path, capsys):
    """run-2, run-9, run-10 in one folder: run-2 is the reference, run-10 the 30 % slower one.
    By name run-10 came first and was the reference, so its regression passed the gate."""
    folder = tmp_path / "runs"
    folder.mkdir()
    for n, ms in ((2, OLD), (9, OLD), (10, {**OLD, ("pageable", MiB): 0.260})):
        synthetic_run(folder / f"run-{n}.csv", f"synthetic-{n}", ms)
    rc = cli.main(["compare", str(folder), "--fail-above", "5"])
    out, err = capsys.readouterr()
    assert rc == 1, err
    lines = [ln for ln in err.splitlines() if "regression" in ln]
    assert len(lines) == 1 and ":run-10 pageable 1 MiB" in lines[0] and f"{folder}:run-2," in lines[0]
    blocks = [ln.split(" (")[0] for ln in out.splitlines() if ln.startswith(str(folder))]
    assert blocks == [f"{folder}:run-{n}" for n in (2, 9, 10)]
    assert cli.main(["compare", str(folder), "--json"]) == 0
    order = list(dict.fromkeys(c["run"] for c in json.loads(capsys.readouterr().out)))
    assert order == [f"{folder}:run-{n}" for n in (2, 9, 10)]


@pytest.mark.parametrize(
    "names,expected",
    [
        (["run-10", "run-2", "run-9"], ["run-2", "run-9", "run-10"]),
        (["b1", "a10", "a2"], ["a2", "a10", "b1"]),
        (["x", "x-1", "x-01"], ["x", "x-01", "x-1"]),
    ],
)
def test_natural_order_reads_digits_as_numbers(names, expected):
    from h2dlab.cli.compare import in_natural_order

    ids = [f"id{i}" for i in range(len(names))]
    got = in_natural_order(ids, dict(zip(ids, names, strict=True)))
    assert [dict(zip(ids, names, strict=True))[i] for i in got] == expected
