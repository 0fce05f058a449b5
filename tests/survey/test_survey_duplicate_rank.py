"""Two processes given one RANK are named, never merged (issue 35, silent wrong answer).

Before, a second process with the same ``RANK`` wrote the same ``ranks/rNNNNN*`` files
(its sweep with ``force``): one rank's rows silently replaced the other's and the fleet
table showed one healthy GPU. Now each process leaves a claim of its own; one that finds
another live claim of its rank measures nothing and says so; rank 0 marks every row of a
rank claimed twice ``error``, naming both processes. The "nodes" here are this machine's
CPU (``--device cpu``, host copies), named by ``H2DLAB_SURVEY_HOST``.
"""

import os
import time

import pytest

from h2dlab.cli import survey as command
from h2dlab.cli.main import main
from h2dlab.recording import datasets
from h2dlab.survey import fleet, rank
from h2dlab.survey.verdicts import gpu_table, judge

LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                 "MASTER_PORT", "TORCHELASTIC_RUN_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID",
                 "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "H2DLAB_SURVEY_HOST")  # fmt: skip


@pytest.fixture
def as_rank(monkeypatch):
    for v in LAUNCHER_VARS:
        monkeypatch.delenv(v, raising=False)

    def run(out, r, host):
        monkeypatch.setenv("RANK", str(r))
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("H2DLAB_SURVEY_HOST", host)
        argv = ["survey", "--out", str(out), "--device", "cpu", "--sizes", "1KiB", "--reps", "2"]
        return main([*argv, "--deadline", "30"])

    return run


def _files(folder, r):
    return {p.name: p.read_bytes() for p in (folder / "ranks").glob(f"r{r:05d}*") if ".claim-" not in p.name}


def test_a_second_process_given_one_rank_measures_nothing_and_rank_0_names_both(tmp_path, as_rank, capsys):
    out = tmp_path / "s"
    assert as_rank(out, 1, "node-a") == 0
    first = _files(out, 1)
    assert fleet.read_rank(out, 1)["status"] == "ok" and len(first) > 1
    capsys.readouterr()
    assert as_rank(out, 1, "node-b") == 0  # a rank's failure is a row of rank 0's table
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rank 1 was given to another process of this survey too (node-a pid" in err[0]
    assert _files(out, 1) == first  # the first claimant's rows are untouched
    assert as_rank(out, 0, "node-a") == command.EXIT_FLAGGED
    table = datasets.read(out / "fleet.csv.gz")
    one = table[table["rank"] == 1]
    assert len(one) and (one["status"] == "error").all()
    assert one["error"].str.contains("rank 1 was claimed by 2 processes (node-a pid", regex=False).all()
    assert one["error"].str.contains("node-b pid", regex=False).all()
    assert (table.loc[table["rank"] == 0, "status"] == "ok").all()
    gpus = judge(gpu_table(table)).set_index("rank")
    assert gpus.loc[1, "flag"] == "error" and "claimed by 2 processes" in gpus.loc[1, "reason"]
    env = datasets.read_env(out / "fleet.csv.gz")
    assert [c["host"] for c in env["survey"]["duplicate_ranks"]["1"]] == ["node-a", "node-b"]


def test_an_earlier_surveys_claim_in_the_folder_is_no_duplicate(tmp_path, as_rank):
    out = tmp_path / "s"
    (out / "ranks").mkdir(parents=True)
    old = rank.claim_file(out, 1, "synthetic0ld")
    old.write_text('{"host": "gone", "pid": 1, "job_id": ""}')
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    assert as_rank(out, 1, "node-a") == 0  # 30 s deadline: an hour-old claim is stale
    assert fleet.read_rank(out, 1)["status"] == "ok"
    specs = rank.plan("cpu", (1024,), 2)
    infos = {0: None, 1: fleet.read_rank(out, 1)}
    table = fleet.assemble(out, infos, specs, "t", 30, since=time.time() - 30)
    assert (table.loc[table["rank"] == 1, "status"] == "ok").all() and table.attrs["duplicates"] == {}
    every = fleet.assemble(out, infos, specs, "t", 30)  # no window: the old claim counts
    assert set(every.attrs["duplicates"]) == {1}


def test_another_jobs_claim_is_no_duplicate(tmp_path):
    (tmp_path / "ranks").mkdir()
    rank.claim_file(tmp_path, 2, "aaaa").write_text('{"host": "x", "pid": 5, "job_id": "job-1"}')
    rank.claim_file(tmp_path, 2, "bbbb").write_text('{"host": "y", "pid": 6, "job_id": "job-2"}')
    assert [c["host"] for c in rank.claims(tmp_path, 2, job_id="job-2")] == ["y"]
    assert len(rank.claims(tmp_path, 2)) == 2


def test_a_restarted_ranks_dead_predecessor_on_its_host_is_no_duplicate(tmp_path, as_rank):
    """torchrun's restarts start a rank again on its node: the claim of the process that
    died there gives way (a pid that is not running), and rank 0 sees one claim."""
    import subprocess
    import sys

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    out = tmp_path / "s"
    (out / "ranks").mkdir(parents=True)
    old = rank.claim_file(out, 1, "deadbeef0000")
    old.write_text(f'{{"host": "node-a", "pid": {int(dead.stdout)}, "job_id": ""}}')
    assert as_rank(out, 1, "node-a") == 0
    assert fleet.read_rank(out, 1)["status"] == "ok" and not old.exists()
    assert len(rank.claims(out, 1)) == 1
