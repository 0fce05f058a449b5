"""hostile7: ``measure --reference --resume`` of a finished table takes the missing check where
its own env.json names this host (``platform.node()``) and, on CUDA, this GPU's name and PCI bus
(c64b2ec, ``cli.loop._measured_elsewhere``). A host name is not a machine: containers and
Kubernetes pods keep theirs when moved to another node (``trainer-0``), and identical servers
put the same GPU model on the same bus. With ``--device cpu`` only the host name is compared: a
table whose env.json names this host but another CPU and another kernel (``cpu_model``,
``platform``: the kit's own ``machines.MACHINE_KEYS`` counts ``platform`` as the machine) got a
reference timed here stored as its check, exit 0, nothing said: this machine's copies set
against another machine's."""

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
