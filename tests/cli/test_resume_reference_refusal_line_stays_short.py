"""hostile7: ``measure --reference --resume`` of a finished table measured on another host is
refused in one line naming that host (c64b2ec, ``cli.loop._measured_elsewhere``). The host and
GPU name come from the table's env.json (up to 1 MiB) and are printed whole: a planted or damaged
``hostname`` of 500,000 characters made the refusal a 500 kB line. The kit's other lines quote
a file's text cut short (``[:40]``, ``[:120]``, ``[:200]``). Lesser: escaped, one line, exit 2."""

from __future__ import annotations

import json

from h2dlab.cli import main as cli
from h2dlab.measure import reference
from h2dlab.recording import datasets

ARGS = ["measure", "--device", "cpu", "--strategies", "pageable", "--sizes", "1KiB", "--reps", "2"]
ARGS += ["--warmup", "0", "--no-progress", "--order", "ascending", "--reference"]
FAKE = {
    ("pageable", 1024): {
        "reference_median_us": 1.0,
        "reference_iqr_us": 0.1,
        "reference_blocks": 3.0,
        "reference_calls_per_block": 10.0,
    }
}  # fmt: skip  (synthetic reference timings)


def test_another_hosts_refusal_is_a_short_line_whatever_its_env_json_names(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reference, "reference_medians_us", lambda *a, **k: FAKE)
    out = tmp_path / "t.csv"
    assert cli.main([*ARGS, "--out", str(out)]) == 0
    env = json.loads(datasets.env_path(out).read_text())
    del env["reference"]  # as a check stopped by Ctrl-C leaves it
    env["hostname"] = "node-" + "x" * 500_000  # synthetic: planted or damaged
    datasets.env_path(out).write_text(json.dumps(env))
    capsys.readouterr()
    rc = cli.main([*ARGS, "--out", str(out), "--resume"])
    err = capsys.readouterr().err
    assert rc == 2 and "reference" not in (datasets.read_env(out) or {})  # holds
    assert len(err) < 2000, len(err)
