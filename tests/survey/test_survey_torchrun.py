"""``h2dlab survey`` under torchrun: two agents on this machine, each a 'node' of two
ranks (c10d rendezvous, ``H2DLAB_SURVEY_HOST`` naming the node, ``--device cpu``), make
one fleet table of four ranks; with one rank killed and one hung, the table still holds
every other rank's copies and names the two that gave none."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from h2dlab.recording import datasets
from h2dlab.survey.verdicts import gpu_table, judge

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun_survey(out: Path, deadline_s: float, fault: str = "", wait_s: float = 120.0):
    """Start two torchrun agents of two ranks each; return once fleet.csv.gz is written
    (or ``wait_s`` passed), after ending every process they started."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("H2DLAB_SURVEY_FAULT", None)
    if fault:
        env["H2DLAB_SURVEY_FAULT"] = fault
    common = [
        "--nnodes=2",
        "--nproc-per-node=2",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=survey-test",
        "--max-restarts=0",
        "-m",
        "h2dlab",
        "survey",
        "--out",
        str(out),
        "--device",
        "cpu",
        "--sizes",
        "1KiB,64KiB",
        "--reps",
        "3",
        "--deadline",
        str(deadline_s),
    ]
    agents = []
    out.mkdir(parents=True, exist_ok=True)
    for host, is_host in (("node-a", 1), ("node-b", 0)):
        log = open(out.parent / f"agent-{host}.log", "wb")  # noqa: SIM115 - the agent's, closed by it
        agents.append(
            subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", f"--rdzv-conf=is_host={is_host}", *common],
                env={**env, "H2DLAB_SURVEY_HOST": host},
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    fleet = out / "fleet.csv.gz"
    try:
        until = time.monotonic() + wait_s
        while time.monotonic() < until and not (
            fleet.exists() and fleet.with_name("fleet.csv.gz.env.json").exists()
        ):
            time.sleep(0.5)
    finally:
        # The ranks run in sessions of their own (torchrun starts them so): end each by
        # the pid it wrote, then the agents.
        for f in sorted((out / "ranks").glob("r?????.json")) if (out / "ranks").is_dir() else []:
            try:
                os.kill(int(json.loads(f.read_text())["pid"]), signal.SIGKILL)
            except (OSError, ValueError, KeyError):
                pass
        for a in agents:
            try:
                os.killpg(a.pid, signal.SIGKILL)
            except OSError:
                pass
            a.wait(timeout=30)
    assert fleet.exists(), "no fleet table within the wait"
    return datasets.read(fleet)


def test_two_torchrun_agents_of_two_ranks_make_one_table_of_four_ranks(tmp_path):
    fleet = _torchrun_survey(tmp_path / "s", deadline_s=90)
    gpus = gpu_table(fleet).set_index("rank")
    assert list(gpus.index) == [0, 1, 2, 3]
    assert gpus["host"].to_dict() == {0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b"}
    assert gpus["local_rank"].tolist() == [0, 1, 0, 1]
    assert (gpus["status"] == "ok").all()
    assert gpus["omp_num_threads"].astype(str).tolist() == ["1"] * 4  # torchrun's default
    timed = fleet[~fleet["warmup"]]
    # every rank copied each planned cell 3 times, alone (world 1) and with its node's other rank (world 2)
    per = timed.groupby(["rank", "world", "strategy", "size_bytes"]).size()
    assert len(per) == 4 * 2 * 2 * 2 and (per == 3).all()
    assert fleet["synced"].astype(bool).all()  # every barrier held
    assert fleet.attrs["env"]["survey"]["world_size"] == 4
    assert fleet.attrs["env"]["survey"]["no_result"] == []


def test_a_killed_and_a_hung_rank_cost_their_own_rows_only(tmp_path):
    # 30 s: under a loaded 2-core machine six Python processes took over 10 s to start, so rank 2
    # had not yet written that it started when rank 0 gave up (it hangs for ever after that)
    fleet = _torchrun_survey(tmp_path / "s", deadline_s=30, fault="3:kill,2:hang")
    gpus = judge(gpu_table(fleet)).set_index("rank")
    assert list(gpus.index) == [0, 1, 2, 3]
    assert gpus.loc[[0, 1], "status"].tolist() == ["ok", "ok"]
    assert gpus.loc[[2, 3], "status"].tolist() == ["no result", "no result"]
    for r in (2, 3):
        assert "no_result" in gpus.at[r, "flag"].split(",")
        assert gpus.at[r, "reason"].startswith(f"no result: rank {r} on node-b")
    timed = fleet[~fleet["warmup"] & (fleet["error"] == "")]
    per = timed.groupby(["rank", "world", "strategy", "size_bytes"]).size()
    assert set(per.index.get_level_values("rank")) == {0, 1}  # the two healthy ranks' copies, all of them
    assert len(per) == 2 * 2 * 2 * 2 and (per == 3).all()
    missing = fleet[fleet["rank"].isin([2, 3])]
    assert (missing["status"] == "no result").all() and missing["wall_ms"].isna().all()
    assert fleet.attrs["env"]["survey"]["no_result"] == [2, 3]
