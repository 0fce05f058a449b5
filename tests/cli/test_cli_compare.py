"""h2dlab compare: median (IQR) per size x strategy and ratios against a baseline
strategy, checked against pandas on the recorded runs; refusals in one line."""

import json

import pytest

from h2dlab.cli import main as cli
from h2dlab.cli.compare import fmt_ms
from h2dlab.recording import datasets
from tests.conftest import refused_in_one_line, run_cli


def _medians(run_name):
    d = datasets.run_named(datasets.load("h200_sweep"), run_name)
    t = d[~d.warmup & (d.error == "")]
    v = t.event_ms.where(t.event_ms.notna(), t.wall_ms)
    return t.assign(v=v).groupby(["strategy", "size_bytes"])["v"]


def test_compare_json_matches_pandas():
    r = run_cli("compare", "h200_sweep:pow2", "--sizes", "1MiB,1GiB", "--json")
    assert r.returncode == 0, r.stderr
    cells = json.loads(r.stdout)
    g = _medians("pow2")
    med, q1, q3 = g.median(), g.quantile(0.25), g.quantile(0.75)
    assert {c["size_bytes"] for c in cells} == {2**20, 2**30} and len(cells) == 12
    for c in cells:
        key = (c["strategy"], c["size_bytes"])
        assert c["run"] == "h200_sweep:pow2" and c["baseline"] == "pageable"
        assert c["median_ms"] == pytest.approx(med[key]) and c["q1_ms"] == pytest.approx(q1[key])
        assert c["q3_ms"] == pytest.approx(q3[key])
        assert c["ratio"] == pytest.approx(med[key] / med[("pageable", c["size_bytes"])])


def test_compare_table_reads_at_a_glance():
    r = run_cli("compare", "h200_sweep:pow2", "--sizes", "1GiB", "--strategies", "pageable,pinned_reuse")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("h200_sweep:pow2 (NVIDIA H200")
    header = next(ln for ln in lines if ln.strip().startswith("size"))
    assert header.split() == ["size", "pageable", "GB/s", "pinned_reuse", "GB/s"]  # the baseline first
    row = next(ln for ln in lines if ln.strip().startswith("1 GiB"))
    med = _medians("pow2").median()
    ratio = med[("pinned_reuse", 2**30)] / med[("pageable", 2**30)]
    assert f"{fmt_ms(med[('pageable', 2**30)])} (" in row and f"{ratio:.2f}x" in row


def test_compare_several_runs_adds_the_runs_against_the_first():
    r = run_cli(
        "compare",
        "h200_sweep:pow2",
        "h200_sweep:pow2-interleaved",
        "--sizes",
        "1GiB",
        "--strategies",
        "staged",
    )
    assert r.returncode == 0, r.stderr
    assert "across runs: median time as a multiple of h200_sweep:pow2's" in r.stdout
    g1, g2 = _medians("pow2").median(), _medians("pow2-interleaved").median()
    ratio = g2[("staged", 2**30)] / g1[("staged", 2**30)]
    line = next(ln for ln in r.stdout.splitlines() if "h200_sweep:pow2-interleaved" in ln and "staged" in ln)
    assert f"{ratio:.2f}x" in line


def test_compare_baseline_and_refusals():
    r = run_cli("compare", "h200_sweep:pow2", "--sizes", "1GiB", "--baseline", "pinned_reuse", "--json")
    cells = json.loads(r.stdout)
    assert all(c["baseline"] == "pinned_reuse" for c in cells)
    assert next(c for c in cells if c["strategy"] == "pinned_reuse")["ratio"] == pytest.approx(1.0)
    for args, needle in [
        (["h200_sweep:pow2", "--baseline", "teleport"], "no strategy 'teleport'"),
        (["no_such_dataset"], "unknown dataset"),
        (["h200_sweep:nope"], "no run named 'nope'"),
        (["h200_sweep:pow2", "--sizes", "3KiB"], "--sizes 3 KiB: these runs have no timed copy of that size"),
        (["h200_sweep:pow2", "--baseline", ""], "--baseline is empty"),  # was: pageable, silently
        (["h200_sweep:pow2", "--baseline", "  "], "--baseline is empty"),
    ]:
        r = run_cli("compare", *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr


@pytest.mark.parametrize(
    "ms,text",
    [(0.0523, "52.3 µs"), (1.2649, "1.26 ms"), (19.46, "19.5 ms"), (758.9, "759 ms"), (1234.0, "1.23 s")],
)
def test_fmt_ms(ms, text):
    assert fmt_ms(ms) == text


def test_compare_refuses_a_strategy_the_runs_lack(tmp_path, capsys):
    """--strategies pinned_reuse,nosuch showed pinned_reuse and passed over the typo."""
    argv = [
        "compare",
        "h200:sweep:pow2-interleaved",
        "--strategies",
        "pinned_reuse,nosuch",
        "--sizes",
        "1GiB",
    ]
    line = refused_in_one_line(
        argv, ["unknown strategy 'nosuch'", "--strategies", "pinned_reuse, "], capsys, tmp_path
    )
    assert "pageable" in line and "'pinned_reuse'" not in line


def test_compare_refuses_a_size_the_runs_lack(tmp_path, capsys):
    argv = ["compare", "h200:sweep:pow2-interleaved", "--strategies", "pinned_reuse", "--sizes", "1GiB,7GiB"]
    line = refused_in_one_line(
        argv, ["--sizes 7 GiB", "no timed copy of that size", "1 KiB, 2 KiB"], capsys, tmp_path
    )
    assert line.endswith("1 GiB, 2 GiB")


def test_compare_with_known_names_and_sizes_still_shows_them(capsys):
    assert (
        cli.main(
            [
                "compare",
                "h200:sweep:pow2-interleaved",
                "--strategies",
                "pinned_reuse",
                "--sizes",
                "1GiB",
                "--json",
            ]
        )
        == 0
    )
    cells = json.loads(capsys.readouterr().out)
    assert [(c["strategy"], c["size_bytes"]) for c in cells] == [("pinned_reuse", 2**30)]


def test_a_file_of_two_runs_names_each_by_its_run_id_and_compare_refuses_a_run_twice(tmp_path, capsys):
    """pd.concat of two runs saved as one file showed both as the file's name: explain said
    'run(s) mix, mix' and `compare mix.csv:a` could pick neither; `compare t t` said 1.00x."""
    from h2dlab.recording import datasets, sources, tableio

    d = sources.load("h200:sweep:pow2-interleaved")
    d = d[d.strategy.isin(["pageable", "pinned_reuse"])]
    d = d.assign(run_id=["a" if i % 2 else "b" for i in range(len(d))])
    # as pd.concat of two runs saved with the first one's env.json: it names run a (an env.json
    # naming neither run is not used, with a warning: tests/measure/test_env_belongs.py)
    mix = tableio.save(d, tmp_path / "mix.csv", {**d.attrs["env"], "run_id": "a"})
    assert set(datasets.load(str(mix)).attrs["run_names"].values()) == {"a", "b"}
    assert cli.main(["compare", f"{mix}:a"]) == 0
    assert f"{mix}:a" in capsys.readouterr().out
    assert cli.main(["compare", str(mix), str(mix)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hold the same run" in err[0]
