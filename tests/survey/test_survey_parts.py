"""The survey's parts on one process: reading the launcher's environment, the NUMA
facts from sysfs, the command's outputs and refusals, and the page and figure."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import matplotlib
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from h2dlab.cli import survey as command
from h2dlab.cli.main import main
from h2dlab.errors import UsageError
from h2dlab.recording import datasets
from h2dlab.survey import fleet, rank
from h2dlab.survey.launch import place_from_env
from h2dlab.survey.probe import cpu_numa_nodes, link_from_sysfs, numa_node_of
from h2dlab.survey.show import plot_metric, report_html
from h2dlab.survey.verdicts import gpu_table, judge

TORCHRUN = {
    "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1",
    "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "job7",
    "H2DLAB_SURVEY_HOST": "gpu-node-2",
}  # fmt: skip


def test_torchrun_slurm_and_open_mpi_environments_give_each_rank_its_place():
    p = place_from_env(TORCHRUN)
    assert (p.rank, p.local_rank, p.world_size, p.local_world_size, p.node_rank) == (5, 1, 8, 4, 1)
    assert (p.launcher, p.job_id, p.host, p.rendezvous) == ("torchrun", "job7", "gpu-node-2", True)
    slurm = {"SLURM_PROCID": "6", "SLURM_LOCALID": "2", "SLURM_NTASKS": "7", "SLURM_NODEID": "1",
             "SLURM_TASKS_PER_NODE": "4,3", "SLURM_JOB_ID": "991"}  # fmt: skip
    s = place_from_env(slurm)
    assert (s.rank, s.local_rank, s.world_size, s.local_world_size, s.node_rank) == (6, 2, 7, 3, 1)
    assert (s.launcher, s.job_id, s.rendezvous) == ("slurm", "991", False)
    assert place_from_env({**slurm, "SLURM_STEP_ID": "2"}).job_id == "991.2"  # each srun step its own store
    mpi = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}  # fmt: skip
    m = place_from_env(mpi)
    assert (m.rank, m.local_rank, m.world_size, m.local_world_size, m.node_rank) == (3, 1, 4, 2, 1)
    none = place_from_env({})
    assert (none.rank, none.world_size, none.launcher) == (0, 1, "none")
    both = place_from_env({**slurm, **TORCHRUN})  # torchrun inside a Slurm allocation: torchrun's ranks
    assert (both.rank, both.launcher) == (5, "torchrun")


@given(counts=st.lists(st.integers(1, 8), min_size=1, max_size=12), pick=st.integers(0, 1000))
def test_slurm_tasks_per_node_in_its_compressed_form_gives_this_nodes_count(counts, pick):
    groups = []  # '2(x3),1' as Slurm writes runs of equal counts
    for c in counts:
        if groups and groups[-1][0] == c:
            groups[-1][1] += 1
        else:
            groups.append([c, 1])
    text = ",".join(f"{c}(x{k})" if k > 1 else str(c) for c, k in groups)
    node = pick % len(counts)
    env = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "999", "SLURM_NODEID": str(node),
           "SLURM_STEP_TASKS_PER_NODE": text}  # fmt: skip
    assert place_from_env(env).local_world_size == counts[node]


@pytest.mark.parametrize(
    "bad",
    [{**TORCHRUN, "RANK": "8"}, {**TORCHRUN, "RANK": "-1"}, {**TORCHRUN, "WORLD_SIZE": "eight"},
     {**TORCHRUN, "LOCAL_RANK": "4"}, {**TORCHRUN, "RANK": "٣"}],
)  # fmt: skip
def test_contradictory_or_unreadable_launcher_variables_are_refused(bad):
    with pytest.raises(UsageError):
        place_from_env(bad)


def test_numa_nodes_are_read_from_sysfs_in_either_spelling_of_the_bus_id(tmp_path):
    for node, cpus in ((0, "0-3,8"), (1, "4-7")):
        d = tmp_path / f"devices/system/node/node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
    dev = tmp_path / "bus/pci/devices/0000:3b:00.0"
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text("1\n")
    assert numa_node_of("00000000:3B:00.0", tmp_path) == 1
    assert numa_node_of("0000:3b:00.0", tmp_path) == 1
    assert numa_node_of("00000000:5E:00.0", tmp_path) is None  # no such device
    (dev / "numa_node").write_text("-1\n")
    assert numa_node_of("0000:3b:00.0", tmp_path) is None  # the kernel's "one node"
    assert cpu_numa_nodes({8}, tmp_path) == [0]
    assert cpu_numa_nodes({2, 5}, tmp_path) == [0, 1]


def _cpu_survey(out: Path, *extra: str) -> int:
    env = {
        k: os.environ.pop(k) for k in list(os.environ) if k in TORCHRUN or k.startswith(("SLURM_", "OMPI_"))
    }
    try:
        return main(
            ["survey", "--out", str(out), "--device", "cpu", "--sizes", "1KiB,16KiB", "--reps", "3", *extra]
        )
    finally:
        os.environ.update(env)


def test_one_process_writes_a_fleet_table_that_the_kit_reads_and_a_page(tmp_path, capsys):
    code = _cpu_survey(tmp_path / "s", "--report")
    assert code in (0, command.EXIT_FLAGGED)
    table = datasets.read(tmp_path / "s" / "fleet.csv.gz")
    assert set(fleet.RANK_COLUMNS) <= set(table.columns)
    assert table["rank"].unique().tolist() == [0] and (table["status"] == "ok").all()
    timed = table[~table["warmup"]]
    assert timed.groupby(["strategy", "size_bytes"]).size().to_dict() == {
        ("d2h_pageable", 1024): 3, ("d2h_pageable", 16384): 3, ("pageable", 1024): 3, ("pageable", 16384): 3,
    }  # fmt: skip
    assert table["gpu_uuid"].isna().all() and table["link_gen_load"].isna().all()  # the CPU has none
    flagged = bool(judge(gpu_table(table))["flag"].ne("").any())
    assert code == (command.EXIT_FLAGGED if flagged else 0)
    assert (tmp_path / "s" / "fleet.html").read_text().startswith("<!doctype html>")
    out = capsys.readouterr().out
    assert out.startswith("survey: 1 rank on 1 host:")


def test_a_rank_that_fails_still_has_its_rows_with_status_error(tmp_path):
    place = place_from_env({"H2DLAB_SURVEY_HOST": "sick"})
    folder = tmp_path / "s"
    info = rank.survey_rank(place, folder, device="cuda:7", sizes=(1024,), reps=2)  # no such GPU here
    assert info["status"] == "error" and info["error"]
    specs = rank.plan("cpu", (1024,), 2)
    table = fleet.assemble(folder, {0: fleet.read_rank(folder, 0), 1: None}, specs, "t", 30)
    mine = table[table["rank"] == 0]
    assert (mine["status"] == "error").all() and (mine["error"] == info["error"]).all()
    assert set(mine["strategy"]) == {"pageable", "d2h_pageable"}
    other = table[table["rank"] == 1]
    assert (other["status"] == "no result").all()
    assert other["error"].str.startswith("no result: rank 1 wrote nothing within 30 s").all()
    gpus = judge(gpu_table(table))
    assert gpus["flag"].tolist() == ["error", "no_result"]


@pytest.mark.parametrize(
    ("extra", "words"),
    [(["--deadline", "0"], "--deadline"), (["--device", "tpu"], "--device"), (["--reps", "1"], "--reps")],
)
def test_bad_options_exit_2_in_one_line(tmp_path, capsys, extra, words):
    with pytest.raises(SystemExit) if "--reps" in extra else contextlib.nullcontext():
        code = _cpu_survey(tmp_path / "s", *extra)
        assert code == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "s" / "fleet.csv.gz").exists()


def test_a_baseline_that_is_not_a_survey_is_refused_before_measuring(tmp_path, capsys):
    plain = tmp_path / "plain.csv"
    datasets.read(Path(datasets.DATA_DIR) / "h200" / "d2h" / "d2h.csv.gz").head(5).to_csv(plain, index=False)
    assert _cpu_survey(tmp_path / "s", "--baseline", str(plain)) == 2
    assert "not a survey's" in capsys.readouterr().err
    assert not (tmp_path / "s" / "ranks").exists()


def test_the_page_escapes_what_it_read_and_the_figure_marks_the_flagged(tmp_path):
    matplotlib.use("Agg")
    gpus = pd.DataFrame(
        {
            "rank": [0, 1, 2, 3],
            "host": ["<script>alert(1)</script>", "a", "a", "b"],
            "local_rank": [0, 1, 2, 0],
            "gpu_uuid": ["GPU-<b>x</b>", "GPU-1", "GPU-2", "GPU-3"],
            "gpu_name": "NVIDIA H200",
            "status": "ok",
            "error": "",
            "h2d_pinned_alone_gbps": [20.0, 55.0, 55.2, 54.9],
        }
    )
    judged = judge(gpus)
    page = report_html(judged, {"hostname": "<i>h</i>", "date": "2026-12-03", "survey": {"world_size": 4}})
    assert "<script>" not in page and "&lt;script&gt;" in page and "GPU-&lt;b&gt;x" in page
    assert "<i>h</i>" not in page
    ax = plot_metric(judged, "h2d_pinned_alone_gbps")
    crosses = [c for c in ax.collections if c.get_label() == "flagged"][0]
    assert crosses.get_offsets()[:, 1].tolist() == [20.0]
    assert [t.get_text() for t in ax.texts if t.get_text().startswith("rank")] == ["rank 0"]


def test_the_env_json_beside_the_table_names_every_rank(tmp_path):
    assert _cpu_survey(tmp_path / "s") in (0, command.EXIT_FLAGGED)
    env = json.loads((tmp_path / "s" / "fleet.csv.gz.env.json").read_text())
    assert env["survey"]["world_size"] == 1 and env["survey"]["no_result"] == []
    assert env["survey"]["ranks"]["0"]["status"] == "ok"


def test_the_link_from_sysfs_takes_the_lower_maximum_of_the_gpu_and_its_slot(tmp_path):
    port = tmp_path / "devices/pci0000:00/0000:00:01.0"
    gpu = port / "0000:3b:00.0"
    gpu.mkdir(parents=True)
    for d, (cur, width, top, wtop) in {gpu: ("16.0 GT/s PCIe", "16", "32.0 GT/s PCIe", "16"),
                                       port: ("16.0 GT/s PCIe", "16", "16.0 GT/s PCIe", "16")}.items():  # fmt: skip
        (d / "current_link_speed").write_text(cur + "\n")
        (d / "current_link_width").write_text(width + "\n")
        (d / "max_link_speed").write_text(top + "\n")
        (d / "max_link_width").write_text(wtop + "\n")
    (tmp_path / "bus/pci/devices").mkdir(parents=True)
    (tmp_path / "bus/pci/devices/0000:3b:00.0").symlink_to(gpu)
    got = link_from_sysfs("00000000:3B:00.0", tmp_path)
    # a Gen5 GPU behind a Gen4 port: Gen4 is its maximum here, so Gen4 is no fallback
    assert got == {"link_gen_now": 4, "link_width_now": 16, "link_gen_max": 4, "link_width_max": 16}
    (gpu / "current_link_width").write_text("8\n")
    (port / "max_link_speed").write_text("32.0 GT/s PCIe\n")
    got = link_from_sysfs("0000:3b:00.0", tmp_path)
    assert (got["link_gen_now"], got["link_width_now"], got["link_gen_max"]) == (4, 8, 5)
    assert link_from_sysfs("0000:5e:00.0", tmp_path)["link_gen_max"] is None


def test_a_baseline_survey_20_times_as_fast_flags_every_bandwidth_as_regressed(tmp_path, capsys):
    assert _cpu_survey(tmp_path / "a") in (0, command.EXIT_FLAGGED)
    before = datasets.read(tmp_path / "a" / "fleet.csv.gz")
    faster = before.assign(wall_ms=before["wall_ms"] / 20)  # a made-up earlier survey: every copy 20x faster
    faster.to_csv(tmp_path / "before.csv.gz", index=False)
    capsys.readouterr()
    assert _cpu_survey(tmp_path / "b", "--baseline", str(tmp_path / "before.csv.gz")) == command.EXIT_FLAGGED
    now = datasets.read(tmp_path / "b" / "fleet.csv.gz").iloc[0]  # the verdict as the table stores it
    assert "regressed" in now["flag"].split(",")
    assert (
        now["reason"].count("in the baseline survey") == 2
    )  # h2d and d2h pageable, alone (1 rank: no together)
    assert "regressed" in capsys.readouterr().out


def test_against_the_recording_holds_pinned_copies_of_256_mib_and_more_to_3_percent():
    from h2dlab.survey.against import against_recording

    ref = datasets.read(Path(datasets.DATA_DIR) / "h200" / "d2h" / "d2h.csv.gz")
    same = ref.assign(phase="alone", event_ms=ref["event_ms"] * 1.02)  # a made-up survey, 2 % slower
    table = against_recording(same, ref)
    assert (table["ratio"].round(6) == 1.02).all()
    checked = table[table["checked"]]
    assert set(checked["strategy"]) == {"pinned_reuse", "d2h_pinned_reuse"}
    assert checked["size_bytes"].min() == 256 * 2**20
    together = same.assign(
        phase="together", event_ms=same["event_ms"] * 9
    )  # other GPUs copying: not compared
    assert (against_recording(pd.concat([same, together]), ref)["ratio"].round(6) == 1.02).all()


@pytest.mark.parametrize(
    "damage",
    [
        {"local_world_size": "abc"},
        {"local_world_size": [1]},
        {"local_world_size": 10**30},
        {"synced": [1]},
        {"host": ["a"]},
        {"cpu_numa_nodes": [{"a": 1}]},
    ],
)
def test_a_rank_file_with_facts_of_the_wrong_type_loses_only_those_facts(tmp_path, damage):
    import shutil

    folder = tmp_path / "s"
    rank.survey_rank(
        place_from_env({"H2DLAB_SURVEY_HOST": "node-a"}), folder, device="cpu", sizes=(1024,), reps=2
    )
    shutil.copy(rank.rank_file(folder, 0), rank.rank_file(folder, 1))
    for phase_file in (folder / "ranks").glob("r00000-*.csv.gz"):
        shutil.copy(phase_file, phase_file.with_name(phase_file.name.replace("r00000", "r00001")))
    info = json.loads(rank.rank_file(folder, 1).read_text())
    rank.rank_file(folder, 1).write_text(json.dumps({**info, "rank": 1, **damage}))
    infos = fleet.wait_for_ranks(folder, 2, 0.0)
    assert infos[1]["damaged_fields"] == list(damage)
    table, gpus = command.finish(folder, infos, rank.plan("cpu", (1024,), 2), "t", 30)
    assert (table["status"] == "ok").all() and sorted(gpus["rank"]) == [0, 1]
    timed = table[~table["warmup"]]
    assert timed.groupby("rank").size().to_dict() == {0: 4, 1: 4}  # two strategies, 2 copies each
    assert datasets.read(folder / "fleet.csv.gz")["rank"].nunique() == 2


def test_a_host_name_with_dollar_signs_is_drawn_as_text_not_math(tmp_path):
    matplotlib.use("Agg")
    gpus = pd.DataFrame(
        {"rank": [0, 1], "host": ["$\\foo{$", "b"], "local_rank": 0, "gpu_uuid": "", "gpu_name": "",
         "status": "ok", "error": "", "h2d_pinned_alone_gbps": [20.0, 55.0]}
    )  # fmt: skip
    page = report_html(judge(gpus), {"hostname": "h", "date": "2026-12-03", "survey": {"world_size": 2}})
    assert page.count("data:image/png;base64,") == 1
    ax = plot_metric(judge(gpus), "h2d_pinned_alone_gbps")
    ax.figure.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["\\$\\foo{\\$", "b"]


@pytest.mark.parametrize("job", ["../../outside", "/etc/x", "a/../../b"])
def test_a_job_id_with_slashes_keeps_the_store_inside_the_survey_folder(tmp_path, monkeypatch, job):
    import torch.distributed as dist

    seen = []
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: seen.append(k["init_method"]))
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": job, "H2DLAB_SURVEY_HOST": "n"}
    rank.Sync(place_from_env(env), tmp_path / "s", 1.0)
    store = Path(seen[0].removeprefix("file://"))
    assert store.parent == (tmp_path / "s").resolve() and store.name.startswith(".store-")
    assert not (tmp_path / "outside").exists()


@pytest.mark.parametrize(("col", "value"), [("local_rank", "x"), ("rank", "abc"), ("rank", 1.5)])
def test_a_baseline_whose_ranks_are_not_whole_numbers_is_refused_before_measuring(
    tmp_path, capsys, col, value
):
    assert _cpu_survey(tmp_path / "a") in (0, command.EXIT_FLAGGED)
    before = datasets.read(tmp_path / "a" / "fleet.csv.gz").assign(**{col: value})
    before.to_csv(tmp_path / "before.csv.gz", index=False)
    capsys.readouterr()
    assert _cpu_survey(tmp_path / "b", "--baseline", str(tmp_path / "before.csv.gz")) == 2
    err = capsys.readouterr().err
    assert col in err and str(value) in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "b" / "ranks").exists()


def test_control_characters_in_a_rank_file_never_reach_the_terminal_or_the_table(tmp_path):
    folder = tmp_path / "s"
    rank.survey_rank(
        place_from_env({"H2DLAB_SURVEY_HOST": "node-a"}), folder, device="cpu", sizes=(1024,), reps=2
    )
    info = json.loads(rank.rank_file(folder, 0).read_text())
    evil = {"host": "n\x1b]0;owned\x07\u202e", "status": "error", "error": "bad\nline\x9b2J"}
    rank.rank_file(folder, 0).write_text(json.dumps({**info, **evil}))
    got = fleet.read_rank(folder, 0)
    assert got["host"] == "n\ufffd]0;owned\ufffd\ufffd" and got["error"] == "bad line\ufffd2J"
    table, _ = command.finish(folder, {0: got}, rank.plan("cpu", (1024,), 2), "t", 30)
    assert set(table["host"]) == {"n\ufffd]0;owned\ufffd\ufffd"}


def test_a_rank_file_that_is_a_device_a_pipe_or_huge_is_no_result_not_a_hang(tmp_path):
    folder = tmp_path / "s"
    (folder / "ranks").mkdir(parents=True)
    rank.rank_file(folder, 0).symlink_to("/dev/zero")  # read whole, it never ends
    os.mkfifo(rank.rank_file(folder, 1))  # read, it blocks until a writer comes
    rank.rank_file(folder, 2).write_text('{"status": "ok", "host": "' + "x" * (2 << 20) + '"}')
    assert fleet.wait_for_ranks(folder, 3, 0.0) == {0: None, 1: None, 2: None}


@pytest.mark.parametrize("world", ["99999999999", str(2**20 + 1)])
def test_a_world_too_large_for_rank_0_to_track_is_refused(world):
    with pytest.raises(UsageError, match="a world of"):
        place_from_env({**TORCHRUN, "WORLD_SIZE": world, "RANK": "0", "LOCAL_RANK": "0"})
    assert (
        place_from_env({**TORCHRUN, "WORLD_SIZE": str(2**20), "RANK": "0", "LOCAL_RANK": "0"}).world_size
        == 2**20
    )


def test_more_ranks_on_a_node_than_in_the_world_is_refused():
    with pytest.raises(UsageError, match="more than the world"):
        place_from_env({**TORCHRUN, "LOCAL_WORLD_SIZE": "1000000000"})


def test_a_slurm_jobs_tasks_per_node_above_the_steps_tasks_is_capped_not_refused():
    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1", "SLURM_NODEID": "0",
           "SLURM_TASKS_PER_NODE": "4(x2)"}  # fmt: skip
    assert place_from_env(env).local_world_size == 2
