"""hostile7: ``measure --reference --resume`` of a finished table takes the missing check only
where its own env.json "has a spec" and names this host (and, on CUDA, this GPU) (c64b2ec,
``cli.loop.take_missing_reference``). An empty spec (``{}``, a damaged or hand-edited env.json)
passes ``isinstance(spec, dict)``, and ``recorder.check_resume`` compares nothing when the
recorded spec is empty: the device of the command, not the table's, is then the one checked.
A table whose env.json says it was measured on a GPU got a reference timed with ``--device cpu``
stored as its check (exit 0, nothing said): CPU copies set against GPU copies. Lesser: the env.json
must be damaged first."""

from __future__ import annotations

import json
import platform

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


def test_resume_reference_is_not_taken_for_a_table_whose_spec_is_empty(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reference, "reference_medians_us", lambda *a, **k: FAKE)
    out = tmp_path / "t.csv"
    assert cli.main([*ARGS, "--out", str(out)]) == 0
    env = json.loads(datasets.env_path(out).read_text())
    del env["reference"]  # as a check stopped by Ctrl-C leaves it
    env.update(spec={}, hostname=platform.node(), cuda_available=True, gpu_name="NVIDIA H200")  # synthetic
    datasets.env_path(out).write_text(json.dumps(env))
    capsys.readouterr()
    rc = cli.main([*ARGS, "--out", str(out), "--resume"])
    err = capsys.readouterr().err
    assert "reference" not in (datasets.read_env(out) or {}), (rc, err)  # no CPU check for a GPU table
    assert rc == 2, (rc, err)
