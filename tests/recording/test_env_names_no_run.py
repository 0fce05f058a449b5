"""An env.json that names no run is not used for a table that has run ids (issue 35, a
silent wrong answer, second hostile pass).

A foreign env.json whose ``run_id`` differs was already refused; one with the ``run_id``
deleted was still trusted, and labelled a CPU run "NVIDIA H200" in explain, compare and the
reports. Now it is not used and one warning line says so. Two kinds of env.json without a
``run_id`` stay trusted, as the bundled data holds them: a legacy table's whose rows have no
run id, and a survey's (``survey.survey_id`` begins each rank's run id). The CPU tables are
measured on this machine (host copies only); the H200 env.json is data/h200's real one.
"""

import json
import shutil
import warnings

import pytest

from h2dlab.cli import main as cli
from h2dlab.measure.harness import sweep
from h2dlab.measure.spec import SweepSpec
from h2dlab.recording import datasets, session

H200_ENV = datasets.DATA_DIR / "h200" / "sweep" / "forum-sizes.csv.gz.env.json"
SPEC = SweepSpec(("pageable",), (1024, 4096), device="cpu", reps=3, warmup=0, seed=0)


def _without_run_id(path):
    env = json.loads(H200_ENV.read_text())
    del env["run_id"]
    datasets.write_env(env, datasets.env_path(path))


@pytest.fixture
def cpu_table(tmp_path):
    """A CPU run with data/h200's env.json, its run_id deleted, put beside it."""
    out = tmp_path / "cpu.csv"
    sweep(SPEC, out=out, progress=False)
    _without_run_id(out)
    return out


def test_an_env_json_without_run_id_is_not_used_for_a_table_with_run_ids(cpu_table):
    with pytest.warns(UserWarning, match="cpu.csv.env.json names no run .* not used for cpu.csv"):
        df = datasets.read(cpu_table)
    assert df.attrs["env"] is None


def test_explain_and_compare_say_it_in_one_warning_and_never_say_h200(cpu_table, tmp_path, capsys):
    assert cli.main(["explain", str(cpu_table)]) == 0
    out, err = capsys.readouterr()
    assert "H200" not in out and "PCIe" not in out and "no env.json" in out
    warned = [line for line in err.splitlines() if "names no run" in line]
    assert len(warned) == 1 and warned[0].startswith("h2dlab: warning: cpu.csv.env.json names no run")
    other = tmp_path / "other.csv"
    sweep(SPEC, out=other, progress=False)
    assert cli.main(["compare", str(cpu_table), str(other)]) == 0
    out, _ = capsys.readouterr()
    assert "H200" not in out and "PCIe" not in out


def test_a_recordings_reports_do_not_take_an_env_json_without_run_id(tmp_path):
    rec = tmp_path / "rec"
    (rec / "sweep").mkdir(parents=True)
    out = rec / "sweep" / "pow2.csv.gz"
    sweep(SPEC, out=out, progress=False)
    _without_run_id(out)
    r = session.Recorded(rec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert r.env("sweep", "pow2") == {}
        assert "H200" not in str(r.machine().get("gpu_name"))


def test_a_legacy_table_without_run_ids_keeps_its_env_json(tmp_path):
    out = tmp_path / "old.csv"
    sweep(SPEC, out=out, progress=False)
    df = datasets.read(out)
    df["run_id"] = ""  # a table from before run ids: every cell empty
    df.to_csv(out, index=False)
    _without_run_id(out)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert datasets.read(out).attrs["env"]["gpu_name"] == "NVIDIA H200"


def test_the_bundled_survey_keeps_its_env_json_and_a_stranger_survey_does_not(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fleet = datasets.load(datasets.DATA_DIR / "h200_survey")
    assert [e["gpu_name"] for e in fleet.attrs["envs"].values()] == ["NVIDIA H200"]
    out = tmp_path / "cpu.csv"
    sweep(SPEC, out=out, progress=False)
    shutil.copy(datasets.DATA_DIR / "h200_survey" / "fleet.csv.gz.env.json", datasets.env_path(out))
    with pytest.warns(UserWarning, match="names no run"):
        assert datasets.read(out).attrs["env"] is None


def test_every_bundled_dataset_reads_its_env_jsons_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in datasets.names():
            if name in datasets.TIMELINES:
                assert datasets.timeline(name).attrs["env"]
                continue
            envs = datasets.load(name).attrs["envs"]
            assert envs and all(envs.values()), name
