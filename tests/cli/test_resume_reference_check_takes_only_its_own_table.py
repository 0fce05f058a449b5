"""hostile6: ``measure --reference --resume`` of a finished table without a reference
(hostile5's fix, ``cli.loop.take_missing_reference``) takes the check now, in a new process,
on whatever machine runs it. The spec compared on resume names ``cuda``, not which GPU nor
which host: a table copied from another node (its env.json names that host and GPU), or a
table whose env.json is gone, got a reference timed here and stored as its own check, the
ratio set against another machine's copies; exit 0, nothing said. The check belongs to the
sweep's own machine (``measure --reference`` times it in the sweep's process): where the
env.json does not show this machine, the check should not be written (say so, non-zero)."""

from __future__ import annotations

import json

import pytest

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


@pytest.fixture
def whole_table_without_reference(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reference, "reference_medians_us", lambda *a, **k: FAKE)
    out = tmp_path / "t.csv"
    assert cli.main([*ARGS, "--out", str(out)]) == 0
    env_file = datasets.env_path(out)
    env = json.loads(env_file.read_text())
    del env["reference"]  # as a check stopped by Ctrl-C leaves it
    env_file.write_text(json.dumps(env))
    capsys.readouterr()
    return out


def test_resume_does_not_take_the_reference_check_for_another_hosts_table(
    whole_table_without_reference, capsys
):
    out = whole_table_without_reference
    env_file = datasets.env_path(out)
    env = json.loads(env_file.read_text())
    env.update(hostname="gpu-node-17", gpu_name="NVIDIA H100 80GB HBM3", gpu_pci_bus_id="00000000:1B:00.0")
    env_file.write_text(json.dumps(env))  # the table was copied here from the node that measured it
    rc = cli.main([*ARGS, "--out", str(out), "--resume"])
    err = capsys.readouterr().err
    assert "reference" not in (datasets.read_env(out) or {}), err  # no check of this host stored as its own
    assert rc != 0 and "gpu-node-17" in err, (rc, err)


def test_resume_does_not_take_the_reference_check_for_a_table_without_its_env_json(
    whole_table_without_reference, capsys
):
    out = whole_table_without_reference
    datasets.env_path(out).unlink()  # a table shared without its env.json: where it was measured is unknown
    rc = cli.main([*ARGS, "--out", str(out), "--resume"])
    err = capsys.readouterr().err
    assert not datasets.env_path(out).exists(), datasets.env_path(out).read_text()[:300]
    assert rc != 0, (rc, err)


def test_resume_keeps_another_runs_env_json_beside_the_table(tmp_path, monkeypatch, capsys):
    """The env.json beside the table is another run's (copied there): the readers say so and
    do not use it ("it is not used, so this table has no env.json"); the check was then
    written over it as a file holding only the reference: that run's fingerprint was lost."""
    monkeypatch.setattr(reference, "reference_medians_us", lambda *a, **k: FAKE)
    plain = [a for a in ARGS if a != "--reference"]
    mine, theirs = tmp_path / "mine.csv", tmp_path / "theirs.csv"
    assert cli.main([*plain, "--out", str(mine)]) == 0
    assert cli.main([*plain, "--out", str(theirs)]) == 0
    fingerprint = datasets.env_path(theirs).read_bytes()
    datasets.env_path(mine).write_bytes(fingerprint)  # another run's env.json, copied beside mine.csv
    capsys.readouterr()
    rc = cli.main([*ARGS, "--out", str(mine), "--resume"])
    err = capsys.readouterr().err
    assert datasets.env_path(mine).read_bytes() == fingerprint, (rc, err)
