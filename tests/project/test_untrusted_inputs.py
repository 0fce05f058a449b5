"""What a recording folder, a table or an env.json someone sent cannot do: run code, write
through a planted link, plant a spreadsheet formula, break a figure, or leave a row that
was never measured (synthetic inputs; nothing here is measured)."""

from __future__ import annotations

import json
import signal
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from h2dlab.errors import UsageError  # noqa: E402
from h2dlab.escape import defuse_frame, defuse_text  # noqa: E402
from h2dlab.measure.recorder import StopFlag  # noqa: E402
from h2dlab.recording import folder as rfolder  # noqa: E402
from h2dlab.recording import run as rrun  # noqa: E402


def test_children_never_import_from_the_current_folder():
    cmd = rrun.python_command()
    assert cmd[0] == sys.executable
    if sys.version_info >= (3, 11):
        assert cmd[1] == "-P"  # no '' first on sys.path: a planted h2dlab/ is not what runs


@pytest.mark.parametrize("name", ["sweep/x\ntouch PWNED\n#", "sweep/../x", "other/pow2", "sweep/pow2\r"])
def test_an_experiment_whose_name_is_not_its_kind_and_run_is_refused(name):
    m = json.loads(open("data/h200/recording.json").read())
    r = dict(m["experiments"][0])
    assert rfolder.experiment_problem(r) is None
    r["name"] = name
    assert "is not its kind/run" in rfolder.experiment_problem(r)


def test_the_log_is_never_written_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    log = tmp_path / "record.log"
    log.symlink_to(victim)
    with pytest.raises(UsageError, match="cannot write the recording's log"):
        rrun.open_log(log)
    assert victim.read_text() == "untouched\n"
    plain = tmp_path / "plain.log"
    with rrun.open_log(plain) as fh:
        fh.write("a line\n")
    assert plain.read_text() == "a line\n"


@pytest.mark.parametrize("text", ["=1+2", "+SUM(A1)", "-2+3", "@x", "\tx", "\rx", '=HYPERLINK("http://x")'])
def test_text_a_spreadsheet_would_run_gets_a_quote_in_a_csv(text, tmp_path):
    assert defuse_text(text) == "'" + text
    df = pd.DataFrame({"strategy": [text, "pinned_reuse"], "size_bytes": [1, 2], text: ["a", "b"]})
    safe = defuse_frame(df)
    assert safe["strategy"].tolist() == ["'" + text, "pinned_reuse"] and "'" + text in safe.columns
    assert df["strategy"].tolist() == [text, "pinned_reuse"]  # the caller's frame is left alone
    assert defuse_text(-2.5) == -2.5 and defuse_text("pinned_reuse") == "pinned_reuse"


def test_an_annotated_csv_from_explain_holds_no_formula(tmp_path, cli):
    src = pd.read_csv("data/h200/sweep/pow2-interleaved.csv.gz")
    src["error"] = src["error"].astype(object)
    src.loc[src.index[:5], "error"] = "=1+2"
    table = tmp_path / "t.csv.gz"
    src.to_csv(table, index=False)
    (tmp_path / "t.csv.gz.env.json").write_text(
        json.dumps(
            {
                **json.load(open("data/h200/sweep/pow2-interleaved.csv.gz.env.json")),
                "run_id": src.run_id.iloc[0],
            }
        )
    )
    out = tmp_path / "a.csv"
    done = cli("explain", str(table), "--out", str(out))
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert ",=1+2" not in text and ",'=1+2" in text


def test_a_dollar_in_a_gpu_name_is_drawn_as_text(tmp_path):
    from h2dlab.recording import datasets
    from h2dlab.show import plots

    src = tmp_path / "x.csv.gz"
    src.write_bytes(open("data/h200/sweep/pow2-interleaved.csv.gz", "rb").read())
    env = json.load(open("data/h200/sweep/pow2-interleaved.csv.gz.env.json"))
    env["gpu_name"] = "NVIDIA $H200 x^2"  # an unbalanced "$" was a parse error in every figure
    (tmp_path / "x.csv.gz.env.json").write_text(json.dumps(env))
    df = datasets.load(src)
    for draw in (plots.latency, plots.bandwidth):
        ax = draw(df)
        ax.figure.canvas.draw()
        assert any("$H200" in t.get_text() for t in ax.texts)
        plt.close(ax.figure)


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")
def test_a_hang_up_stops_a_measurement_like_sigterm():
    flag = StopFlag()
    with flag.installed():
        signal.raise_signal(signal.SIGHUP)
        assert flag and flag.signum == signal.SIGHUP  # a stop after the copy in flight, not an exception


def test_a_copy_cut_off_by_an_interrupt_leaves_no_row_and_the_rows_before_it_are_kept(monkeypatch, tmp_path):
    """A second Ctrl-C raises KeyboardInterrupt inside a copy: the rows measured before it are
    in the partial file, each once, and no row without a time or an error is left for
    ``--resume`` to refuse."""
    from h2dlab.measure import harness, strategies
    from h2dlab.measure.spec import SweepSpec

    real = strategies.Pageable.copy
    n = {"copies": 0}

    def copy(self, x):
        n["copies"] += 1
        if n["copies"] == 4:
            raise KeyboardInterrupt
        return real(self, x)

    monkeypatch.setattr(strategies.Pageable, "copy", copy)
    spec = SweepSpec(("pageable",), (1024,), device="cpu", reps=6, warmup=1)
    with pytest.raises(KeyboardInterrupt):
        harness.sweep(spec, out=tmp_path / "t.csv", progress=False)
    kept = pd.read_csv(tmp_path / "t.csv.partial.csv")
    assert len(kept) == 3 and kept["order"].is_unique
    assert kept["wall_ms"].notna().all()
