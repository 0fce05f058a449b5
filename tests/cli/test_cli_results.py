"""What a measuring command prints when it ends (issue #35): its result table, one line per
cell, before the "wrote" line (measure, batch, duplex), and ``--json``'s one object on stdout
(measure, batch, duplex, record, report) with the messages left on stderr. The CPU runs here
are real host copies; the duplex run uses tests/fake_cuda.py (synthetic events, 1 ms each)."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch

from h2dlab.cli import main as cli
from h2dlab.cli.compare import fmt_ms
from h2dlab.recording import datasets
from tests.conftest import ROOT
from tests.fake_cuda import fake_cuda  # noqa: F401 - fixture

MEASURE = ["measure", "--device", "cpu", "--sizes", "1KiB,4KiB", "--strategies", "pageable,pageable_non_blocking",
           "--reps", "5", "--warmup", "1", "--no-progress"]  # fmt: skip


def _medians(path, keys):
    d = datasets.read(path)
    t = d[~d.warmup & (d.error == "")]
    v = t.event_ms.where(t.event_ms.notna(), t.wall_ms)
    return t.assign(v=v).groupby(keys)["v"]


@pytest.mark.slow  # a process of its own
def test_measure_prints_its_result_table_before_the_wrote_line(tmp_path):
    out = tmp_path / "r.csv"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("H2DLAB_DEBUG", None)
    r = subprocess.run([sys.executable, "-m", "h2dlab", *MEASURE, "--out", str(out)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300, env=env, cwd=ROOT)  # fmt: skip
    assert r.returncode == 0, r.stdout
    lines = r.stdout.splitlines()
    wrote = next(i for i, ln in enumerate(lines) if ln.startswith("wrote "))
    head = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["strategy", "size"])
    assert head < wrote
    assert lines[head].split() == ["strategy", "size", "median", "IQR", "GB/s", "rows"]
    cells = lines[head + 1 : head + 5]
    assert lines[head + 5].startswith("median and IQR") and "10^9 bytes/s" in lines[head + 5]
    g = _medians(out, ["strategy", "size_bytes"])
    med = g.median()
    for line in cells:  # one line per strategy and size: median, IQR, GB/s, rows, as the table holds them
        name, num, unit, *rest = line.split()
        size = int(num) * {"KiB": 1024}[unit]
        assert f"{fmt_ms(med[(name, size)])}" in line
        assert rest[-1] == "5"  # timed copies
    assert {tuple(ln.split()[:3]) for ln in cells} == {(s, n, "KiB") for s in ("pageable", "pageable_non_blocking")
                                                      for n in ("1", "4")}  # fmt: skip


def test_measure_json_is_one_object_on_stdout_and_the_messages_stay_on_stderr(tmp_path, capsys):
    out = tmp_path / "r.csv"
    assert cli.main([*MEASURE, "--out", str(out), "--json"]) == 0
    o, err = capsys.readouterr()
    got = json.loads(o)  # the whole of stdout is one object
    assert got["command"] == "measure" and got["exit_code"] == 0 and got["interrupted"] is False
    assert got["out"] == str(out) and got["env"] == str(datasets.env_path(out))
    assert got["rows"] == 24 and got["timed_rows"] == 20 and got["error_rows"] == 0
    assert "wrote" in err and "strategy" not in err  # no text table anywhere with --json
    g = _medians(out, ["strategy", "size_bytes"])
    med, q1, q3 = g.median(), g.quantile(0.25), g.quantile(0.75)
    assert len(got["cells"]) == 4
    for c in got["cells"]:
        key = (c["strategy"], c["size_bytes"])
        assert c["median_ms"] == pytest.approx(med[key]) and c["rows"] == 5
        assert c["q1_ms"] == pytest.approx(q1[key]) and c["q3_ms"] == pytest.approx(q3[key])
        assert c["gbps"] == pytest.approx(c["size_bytes"] / med[key] / 1e6)
    sizes = [c["size_bytes"] for c in got["cells"]]
    assert sizes == sorted(sizes)  # by size, fastest first within one
    for s in set(sizes):
        times = [c["median_ms"] for c in got["cells"] if c["size_bytes"] == s]
        assert times == sorted(times)


def test_batch_prints_one_line_per_way_count_and_total_and_its_json(tmp_path, capsys):
    args = ["batch", "--device", "cpu", "--counts", "1,4", "--totals", "64KiB", "--reps", "3",
            "--methods", "loop_to,foreach_copy,to_device_packed", "--no-progress"]  # fmt: skip
    assert cli.main([*args, "--out", str(tmp_path / "b.csv")]) == 0
    o, err = capsys.readouterr()
    lines = o.splitlines()
    assert lines[0].split() == ["strategy", "tensors", "size", "median", "IQR", "GB/s", "rows"]
    assert len(lines) == 1 + 6 + 1 and "wrote" in err
    packed = [ln for ln in lines if ln.startswith("to_device_packed")]  # needs CUDA: every copy an error row
    assert len(packed) == 2 and all("n/a" in ln and "(3 failed)" in ln for ln in packed)
    assert cli.main([*args, "--out", str(tmp_path / "b2.csv"), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["command"] == "batch" and got["error_rows"] == 2 * (3 + 1)  # warm-up rows fail too
    med = _medians(tmp_path / "b2.csv", ["strategy", "n_tensors"]).median()
    for c in got["cells"]:
        if c["strategy"] == "to_device_packed":
            assert c["median_ms"] is None and c["gbps"] is None and c["rows"] == 0 and c["error_rows"] == 3
        else:
            assert c["median_ms"] == pytest.approx(med[(c["strategy"], c["n_tensors"])]) and c["rows"] == 3


def test_duplex_prints_one_line_per_mode_direction_and_size_synthetic(
    fake_cuda,  # noqa: F811
    monkeypatch,
    tmp_path,
    capsys,
):
    from h2dlab.measure import duplex as mod

    real = mod.duplex
    monkeypatch.setattr(mod, "duplex", lambda spec, **kw: real(spec, device=torch.device("cpu"), **kw))
    args = ["duplex", "--sizes", "4KiB,64KiB", "--reps", "2", "--warmup", "1", "--no-progress"]
    assert cli.main([*args, "--out", str(tmp_path / "d.csv")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["strategy", "direction", "size", "median", "IQR", "GB/s", "rows"]
    cells = lines[1:-1]
    assert len(cells) == 2 * 2 * 2  # alone/duplex x h2d/d2h x 2 sizes
    duo = [ln for ln in cells if ln.startswith("duplex")]  # the fake events: 1 ms each duplex copy
    assert len(duo) == 4 and all(ln.split()[4:6] == ["1.00", "ms"] for ln in duo)
    assert cli.main([*args, "--out", str(tmp_path / "d2.csv"), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["command"] == "duplex" and len(got["cells"]) == 8
    assert {(c["strategy"], c["direction"]) for c in got["cells"]} == {
        (s, d) for s in ("alone", "duplex") for d in ("h2d", "d2h")
    }
    for c in got["cells"]:
        if c["strategy"] == "duplex":  # the fake events' 1 ms
            assert c["median_ms"] == 1.0 and c["gbps"] == pytest.approx(c["size_bytes"] / 1e6)


def test_a_stopped_run_prints_no_table_and_its_json_says_interrupted_synthetic(tmp_path, capsys):
    from h2dlab.cli import results

    df = pd.DataFrame({"strategy": ["pageable"] * 3, "size_bytes": 1024, "warmup": [True, False, False],
                       "event_ms": [1.0, 2.0, 4.0], "wall_ms": 5.0, "error": ""})  # fmt: skip
    df.attrs["stopped"] = True
    assert results.finish(df, tmp_path / "x.csv", "measure", False, lambda: 130) == 130
    assert capsys.readouterr().out == ""
    with results.json_stdout(True):
        assert results.finish(df, tmp_path / "x.csv", "measure", True, lambda: 130) == 130
    got = json.loads(capsys.readouterr().out)
    assert got["interrupted"] is True and got["exit_code"] == 130 and got["rows"] == 3
    assert got["cells"] == [{"strategy": "pageable", "size_bytes": 1024, "rows": 2, "error_rows": 0, "median_ms": 3.0,
                             "q1_ms": 2.5, "q3_ms": 3.5, "iqr_ms": 1.0, "gbps": 1024 / 3.0 / 1e6}]  # fmt: skip


def test_record_dry_run_json_is_the_plan(tmp_path, capsys):
    assert cli.main(["record", "--device", "cpu", "--dry-run", "--json", "--out", str(tmp_path / "rec")]) == 0
    o, _ = capsys.readouterr()
    got = json.loads(o)
    assert got["command"] == "record" and got["dry_run"] is True and got["device"] == "cpu"
    assert got["experiments"] and all(e["kind"] == "sweep" for e in got["experiments"])
    assert got["estimated_s"] == pytest.approx(sum(e["seconds"] for e in got["experiments"]))


@pytest.mark.slow  # a process of its own
def test_record_json_names_each_experiment_and_its_table(tmp_path):
    tiny = {"kind": "sweep", "run": "tiny", "seconds": 3,
            "args": ["measure", "--sizes", "1KiB..4KiB", "--reps", "2", "--warmup", "0", "--strategies", "pageable"]}  # fmt: skip
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([tiny]))
    folder = tmp_path / "rec"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("H2DLAB_DEBUG", None)
    r = subprocess.run([sys.executable, "-m", "h2dlab", "record", "--device", "cpu", "--plan", str(plan), "--out",
                        str(folder), "--json"], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)  # fmt: skip
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["command"] == "record" and got["exit_code"] == 0 and got["folder"] == str(folder)
    (e,) = got["experiments"]
    assert e["name"] == "sweep/tiny" and e["status"] == "done" and e["rc"] == 0
    assert e["table"] == str(folder / "sweep" / "tiny.csv.gz") and os.path.exists(e["table"])
    assert "recorded 1 of 1" in r.stderr


def test_report_json_lists_the_files_written_and_keeps_stdout_for_itself(monkeypatch, tmp_path, capsys):
    """report.build replaced by a synthetic one (no notebook runs): it prints as the real one
    does, on stdout, and writes two pages and the timing file."""
    from h2dlab.show import report

    def fake_build(outdir, **kw):
        print("[1/1] executing 01-synthetic ...")
        for name in ("01-synthetic.html", "h2dlab-tables.xlsx"):
            (outdir_path := __import__("pathlib").Path(outdir)).mkdir(exist_ok=True)
            (outdir_path / name).write_text("synthetic")
        (outdir_path / report.TIMING).write_text(
            json.dumps({"mode": "replay", "notebooks": {"01-synthetic": 0.1}})
        )
        return 0

    monkeypatch.setattr(report, "build", fake_build)
    outdir = tmp_path / "reports"
    assert cli.main(["report", "--outdir", str(outdir), "--json"]) == 0
    o, err = capsys.readouterr()
    got = json.loads(o)
    assert "executing 01-synthetic" in err  # what build printed went to stderr
    assert got["command"] == "report" and got["exit_code"] == 0 and got["outdir"] == str(outdir)
    assert got["written"] == [
        str(outdir / n) for n in ("01-synthetic.html", "h2dlab-tables.xlsx", report.TIMING)
    ]
    assert got["timing"]["notebooks"] == {"01-synthetic": 0.1}


def test_every_timed_row_lands_in_a_cell_synthetic():
    """A resumed run's repeated index and a row without a key value (NaN) are still counted:
    groupby drops NaN keys by default, which would leave rows out of the table in silence."""
    from h2dlab.cli import results

    df = pd.DataFrame({"strategy": ["a", "a", "b", "b"], "size_bytes": 1024, "world": [1, None, 1, 2],
                       "warmup": False, "event_ms": [1.0, 2.0, 3.0, 0.0], "wall_ms": 1.0, "error": ""},
                      index=[0, 0, 1, 1])  # fmt: skip
    found = results.cells(df, "measure")
    assert sum(c["rows"] + c["error_rows"] for c in found) == 4
    assert {(c["strategy"], c["world"]): c["median_ms"] for c in found} == {
        ("a", 1): 1.0,
        ("a", None): 2.0,
        ("b", 1): 3.0,
        ("b", 2): None,  # 0 ms: no positive time
    }
    lines = results.table_lines(found, "measure")
    assert lines[0].split()[:2] == ["strategy", "at"] and len(lines) == 1 + 4 + 1
    assert any(ln.split()[:2] == ["b", "2"] and "(1 failed)" in ln for ln in lines)
