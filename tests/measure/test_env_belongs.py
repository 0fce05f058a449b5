"""An env.json is used only for the table whose run it names (issue 35, silent wrong answer).

Before, only an old-style ``<stem>.env.json`` was checked against the table's ``run_id``:
an H200 run's env.json copied beside a CPU table labelled it "NVIDIA H200, PCIe Gen5 x16"
in explain, compare and the reports. Now an env.json whose ``run_id`` is none of the
table's runs is not used (a warning says so) and the table reads as one without env.json.
The CPU tables here are measured on this machine (host copies only); the foreign env.json
is data/h200's real one.
"""

import json
import shutil
import warnings

import pandas as pd
import pytest

from h2dlab.cli import main as cli
from h2dlab.measure.harness import sweep
from h2dlab.measure.spec import SweepSpec
from h2dlab.recording import datasets, session

H200_ENV = datasets.DATA_DIR / "h200" / "sweep" / "forum-sizes.csv.gz.env.json"
SPEC = SweepSpec(("pageable",), (1024, 4096), device="cpu", reps=3, warmup=0, seed=0)


@pytest.fixture
def cpu_table(tmp_path):
    """A CPU run, with data/h200's env.json (another run, an H200) put beside it."""
    out = tmp_path / "cpu.csv"
    sweep(SPEC, out=out, progress=False)
    shutil.copy(H200_ENV, datasets.env_path(out))
    return out


def test_read_does_not_take_another_runs_env_json(cpu_table):
    foreign = json.loads(H200_ENV.read_text())["run_id"]  # the bundled H200 run's own id
    with pytest.warns(UserWarning, match=f"env.json of run '{foreign}', not of cpu.csv"):
        df = datasets.read(cpu_table)
    assert df.attrs["env"] is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = datasets.load(cpu_table)
    assert list(loaded.attrs["envs"].values()) == [None]


def test_the_runs_own_env_json_is_still_read(tmp_path):
    out = tmp_path / "cpu.csv"
    sweep(SPEC, out=out, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = datasets.read(out)
    assert df.attrs["env"]["run_id"] == df["run_id"].iloc[0] and df.attrs["env"]["gpu_name"] is None


def test_explain_and_compare_never_label_a_cpu_run_as_the_h200(cpu_table, tmp_path, capsys):
    other = tmp_path / "other.csv"
    sweep(SPEC, out=other, progress=False)
    shutil.copy(H200_ENV, datasets.env_path(other))
    assert cli.main(["explain", str(cpu_table)]) == 0
    out, err = capsys.readouterr()
    assert "H200" not in out and "PCIe" not in out
    assert "no env.json" in out and "is not used" in err
    assert cli.main(["compare", str(cpu_table), str(other)]) == 0
    out, err = capsys.readouterr()
    assert "H200" not in out and "PCIe" not in out and "no env.json" in out


def test_a_recordings_machine_is_not_taken_from_another_runs_env_json(tmp_path):
    """The reports' banner and workbook read ``Recorded.machine()`` and ``Recorded.env``."""
    rec = tmp_path / "rec"
    (rec / "sweep").mkdir(parents=True)
    out = rec / "sweep" / "pow2.csv.gz"
    sweep(SPEC, out=out, progress=False)
    shutil.copy(H200_ENV, datasets.env_path(out))
    r = session.Recorded(rec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert r.env("sweep", "pow2") == {}
        assert "H200" not in str(r.machine().get("gpu_name"))


def test_a_file_of_several_runs_gives_its_env_json_to_its_own_run_only(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    sweep(SPEC, out=a, progress=False)
    sweep(SPEC, out=b, progress=False)
    two = pd.concat([datasets.read(a), datasets.read(b)], ignore_index=True)
    merged = tmp_path / "m.csv"
    datasets.save(two, merged, env=datasets.read_env(a))
    df = datasets.load(merged)
    envs = df.attrs["envs"]
    ra, rb = datasets.read(a)["run_id"].iloc[0], datasets.read(b)["run_id"].iloc[0]
    assert envs[ra]["run_id"] == ra and envs[rb] is None
