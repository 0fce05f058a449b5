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
import platform

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


# hostile7: ``measure --reference --resume`` of a finished table takes the missing check only
# where the table's own env.json names this machine (c64b2ec, ``cli.loop.take_missing_reference``);
# otherwise one line, exit 2. Where the env.json beside the table is another run's (copied there)
# and that run's holds a reference, ``_reference_written`` reads it without the table's run ids,
# finds the other run's reference and lets the "finished, nothing to resume" line stand: exit 0 to
# a command that asked for the table's reference check, none of which the table has (the readers
# do not use that env.json; a warning says so). The contract of the fix: exit 2, nothing written.
# Lesser: the warning is printed, nothing is lost.


def test_resume_reference_does_not_exit_0_on_another_runs_env_json_holding_a_reference(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(reference, "reference_medians_us", lambda *a, **k: FAKE)
    mine, theirs = tmp_path / "mine.csv", tmp_path / "theirs.csv"
    assert cli.main([*ARGS, "--out", str(mine)]) == 0
    env = json.loads(datasets.env_path(mine).read_text())
    del env["reference"]  # as a check stopped by Ctrl-C leaves it
    datasets.env_path(mine).write_text(json.dumps(env))
    assert cli.main([*ARGS, "--out", str(theirs)]) == 0  # another run, with its reference
    fingerprint = datasets.env_path(theirs).read_bytes()
    datasets.env_path(mine).write_bytes(fingerprint)  # copied beside mine.csv
    capsys.readouterr()
    rc = cli.main([*ARGS, "--out", str(mine), "--resume"])
    err = capsys.readouterr().err
    assert datasets.env_path(mine).read_bytes() == fingerprint  # holds (nothing written)
    assert datasets.read(mine).attrs.get("env") is None  # the table has no reference of its own
    assert rc == 2, (rc, err)


# hostile7: ``measure --reference --resume`` of a finished table takes the missing check only
# where its own env.json "has a spec" and names this host (and, on CUDA, this GPU) (c64b2ec,
# ``cli.loop.take_missing_reference``). An empty spec (``{}``, a damaged or hand-edited env.json)
# passes ``isinstance(spec, dict)``, and ``recorder.check_resume`` compares nothing when the
# recorded spec is empty: the device of the command, not the table's, is then the one checked.
# A table whose env.json says it was measured on a GPU got a reference timed with ``--device cpu``
# stored as its check (exit 0, nothing said): CPU copies set against GPU copies. Lesser: the env.json
# must be damaged first.


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


# hostile7: ``measure --reference --resume`` of a finished table takes the missing check where
# its own env.json names this host (``platform.node()``) and, on CUDA, this GPU's name and PCI bus
# (c64b2ec, ``cli.loop._measured_elsewhere``). A host name is not a machine: containers and
# Kubernetes pods keep theirs when moved to another node (``trainer-0``), and identical servers
# put the same GPU model on the same bus. With ``--device cpu`` only the host name is compared: a
# table whose env.json names this host but another CPU and another kernel (``cpu_model``,
# ``platform``: the kit's own ``machines.MACHINE_KEYS`` counts ``platform`` as the machine) got a
# reference timed here stored as its check, exit 0, nothing said: this machine's copies set
# against another machine's.


def test_resume_reference_is_not_taken_for_another_machine_of_the_same_host_name(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(reference, "reference_medians_us", lambda *a, **k: FAKE)
    out = tmp_path / "t.csv"
    assert cli.main([*ARGS, "--out", str(out)]) == 0
    env = json.loads(datasets.env_path(out).read_text())
    del env["reference"]  # as a check stopped by Ctrl-C leaves it
    env.update(  # synthetic: the pod of this name, on the node it ran on before
        hostname=platform.node(),
        platform="Linux-4.18.0-553.el8_10.aarch64-aarch64-with-glibc2.28",
        cpu_model="Neoverse-V2 (synthetic)",
        cpu_count=288,
    )
    datasets.env_path(out).write_text(json.dumps(env))
    capsys.readouterr()
    rc = cli.main([*ARGS, "--out", str(out), "--resume"])
    err = capsys.readouterr().err
    assert "reference" not in (datasets.read_env(out) or {}), (rc, err)
    assert rc == 2, (rc, err)


# hostile7: ``measure --reference --resume`` of a finished table measured on another host is
# refused in one line naming that host (c64b2ec, ``cli.loop._measured_elsewhere``). The host and
# GPU name come from the table's env.json (up to 1 MiB) and are printed whole: a planted or damaged
# ``hostname`` of 500,000 characters made the refusal a 500 kB line. The kit's other lines quote
# a file's text cut short (``[:40]``, ``[:120]``, ``[:200]``). Lesser: escaped, one line, exit 2.


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
