"""The wheel carries its data (issue 13, part 5): build it, install it into a clean
virtual environment outside the checkout, and load every bundled dataset from there.

The build-and-install test is marked ``wheel`` (left out of a plain ``pytest``; ``.ci/run``
runs it: ``pytest -m wheel tests/project/test_wheel.py``, about 20 s). The installed venv gets
numpy and pandas from the running interpreter's site-packages through a ``.pth`` file
(no network); it never sees the checkout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from h2dlab.recording import datasets

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = (".csv", ".csv.gz", ".env.json", ".json", ".md")

PROBE = """
import json, sys, h2dlab
from h2dlab import datasets
sys.modules["torch"] = None  # the fingerprint without torch: fast, and enough here
from h2dlab.recording.env import collect_env
fingerprint = collect_env(gpu=False)
rows = {n: len(datasets.timeline(n) if n in datasets.TIMELINES else datasets.load(n)) for n in datasets.names()}
envs = {n: sorted(k for k, v in datasets.load(n).attrs["envs"].items() if v) for n in datasets.DATASETS}
print(json.dumps({
    "module": h2dlab.__file__, "data_dir": str(datasets.DATA_DIR), "packaged": datasets.PACKAGED,
    "rows": rows, "envs": envs, "bench": sorted(datasets.load_benchmark("h200")),
    "runs_dir": str(datasets.runs_dir()),
    "git_commit": fingerprint["git_commit"], "kit_version": fingerprint["kit_version"],
}))
"""


def _bundled_files() -> set[str]:
    """The files of the checkout's data/ (and benchmark results) a wheel must carry."""
    found = {
        "h2dlab/data/" + p.relative_to(ROOT / "data").as_posix()
        for p in (ROOT / "data").rglob("*")
        if p.is_file() and p.name.endswith(BUNDLED) and "runs" not in p.relative_to(ROOT / "data").parts
    }
    found |= {f"h2dlab/data/benchmarks/{p.name}" for p in (ROOT / "benchmarks" / "results").glob("*.json")}
    return found


def test_pyproject_lists_every_dataset_folder():
    text = (ROOT / "pyproject.toml").read_text()
    folders = {p.name for p in (ROOT / "data").iterdir() if p.is_dir() and p.name != "runs"}
    assert {f.split("/")[0] for f, _ in {**datasets.DATASETS, **datasets.TIMELINES}.values()} <= folders
    nested = {
        ".".join(p.relative_to(ROOT / "data").parts)
        for p in (ROOT / "data").rglob("*")
        if p.is_dir() and p.relative_to(ROOT / "data").parts[0] != "runs"
    }
    missing = [f for f in sorted(folders | nested) if f'"h2dlab.data.{f}"' not in text]
    assert not missing, f"add these to [tool.setuptools] packages in pyproject.toml: {missing}"


def test_pyproject_lists_every_code_folder():
    """Each folder of the package goes into the wheel (doctor/ and survey/ were once left out)."""
    text = (ROOT / "pyproject.toml").read_text()
    folders = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "h2dlab").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    missing = [f for f in sorted(folders) if f'"{f}"' not in text]
    assert not missing, f"add these to [tool.setuptools] packages in pyproject.toml: {missing}"


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def _can_build_offline() -> bool:
    try:
        return int(metadata.version("setuptools").split(".")[0]) >= 77
    except metadata.PackageNotFoundError:
        return False


@pytest.mark.wheel
def test_installed_wheel_loads_every_bundled_dataset(tmp_path):
    # Build from a copy, so the checkout gets no build/ or egg-info.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "runs", "*.pyc", "*.partial.csv", ".tmp-*")
    shutil.copytree(ROOT / "h2dlab", src / "h2dlab", ignore=skip)
    shutil.copytree(ROOT / "data", src / "data", ignore=skip)
    shutil.copytree(ROOT / "benchmarks" / "results", src / "benchmarks" / "results", ignore=skip)
    shutil.copytree(ROOT / "examples", src / "examples", ignore=skip)  # the recipes (h2dlab.examples)
    shutil.copytree(ROOT / "share", src / "share", ignore=skip)  # the h2dlab Jupyter kernel (data-files)
    (src / "data" / "runs").mkdir()  # a checkout's own recordings must stay out of the wheel
    (src / "data" / "runs" / "mine.csv.gz").write_bytes(b"not bundled")

    build = [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w", str(tmp_path / "dist")]
    _run(build + (["--no-build-isolation"] if _can_build_offline() else []))
    (wheel,) = (tmp_path / "dist").glob("h2dlab-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    assert _bundled_files() <= names, sorted(_bundled_files() - names)
    assert not [n for n in names if "/runs/" in n or n.endswith(".sh")]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    # the kernel the notebooks name, installed with the kit
    assert any(n.endswith(".data/data/share/jupyter/kernels/h2dlab/kernel.json") for n in names)

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    py = venv / "bin" / "python"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ]
    )
    purelib = _run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    ).stdout.strip()
    # numpy and pandas from this interpreter, after the venv's own site-packages
    Path(purelib, "zz_h2dlab_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    home = tmp_path / "elsewhere"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "H2DLAB_RUNS", "H2DLAB_GIT_COMMIT")}
    got = json.loads(_run([str(py), "-I", "-c", PROBE], cwd=home, env=env).stdout)

    assert Path(got["module"]).is_relative_to(venv), got["module"]
    assert got["packaged"] and Path(got["data_dir"]) == Path(got["module"]).parent / "data"
    assert not Path(got["runs_dir"]).is_relative_to(venv)  # recordings never go into site-packages
    want = {
        n: len(datasets.timeline(n) if n in datasets.TIMELINES else datasets.load(n))
        for n in datasets.names()
    }
    assert set(want) == set(datasets.DATASETS) | set(datasets.TIMELINES)
    assert got["rows"] == want
    for n in datasets.DATASETS:  # every run found its fingerprint inside the wheel too
        assert got["envs"][n] == sorted(datasets.load(n)["run_id"].unique()), n
    assert got["bench"] == sorted(datasets.load_benchmark("h200"))
    assert got["git_commit"] is None  # an installed wheel is no checkout
    # installing the wheel registered the h2dlab kernel in the venv, where Jupyter looks
    assert (
        json.loads((venv / "share/jupyter/kernels/h2dlab/kernel.json").read_text())["display_name"]
        == "h2dlab (Python)"
    )
    version = re.search(r'(?m)^version = "(.+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert got["kit_version"] == version  # from the installed wheel's metadata


# --- the fingerprint's version fields (issue 19) --------------------------------------------

FINGERPRINT = (
    "import sys; sys.modules['torch'] = None; sys.path.insert(0, sys.argv[1]); "
    "from h2dlab.recording.env import collect_env; e = collect_env(gpu=False); "
    "print(e['git_commit'], e['kit_version'] is None or isinstance(e['kit_version'], str))"
)


#: Without H2DLAB_GIT_COMMIT (which wins over git: tests/recording/test_env.py), as ``-I`` does not drop it.
NO_COMMIT_VAR = {k: v for k, v in os.environ.items() if k != "H2DLAB_GIT_COMMIT"}


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return _run(cmd).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.parametrize("project", ["h2dlab", "someone-elses-project"])
def test_git_commit_only_for_the_kits_own_checkout(tmp_path, project):
    """A copy of the package inside another repository records no commit of that repository."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "h2dlab", repo / "h2dlab", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "pyproject.toml").write_text(f'[project]\nname = "{project}"\nversion = "1"\n')
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "synthetic")
    head = _git(repo, "rev-parse", "HEAD")
    cmd = [sys.executable, "-I", "-c", FINGERPRINT, str(repo)]
    out = _run(cmd, cwd=tmp_path, env=NO_COMMIT_VAR).stdout.split()
    assert out == [head if project == "h2dlab" else "None", "True"]


def test_fingerprint_names_the_kit_version():
    out = _run(
        [
            sys.executable,
            "-I",
            "-c",
            FINGERPRINT.replace("print(e['git_commit'], ", "print(e['kit_version'], "),
            str(ROOT),
        ]
    )
    try:
        want = metadata.version("h2dlab")
    except metadata.PackageNotFoundError:
        want = "None"
    assert out.stdout.split() == [want, "True"]
