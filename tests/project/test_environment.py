"""The conda environment (issue 35, "What users touch"): environment.yml installs the kit from
conda-forge, pip only h2dlab itself; the test tools live in environment-dev.yml; Python is not
capped; the README's conda lines and the kernel they register match the files.

Nothing here runs conda: the files are read with yaml and compared with pyproject.toml.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from h2dlab.show.report import KERNELSPEC

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11 (CI's); 3.10 skips these


ROOT = Path(__file__).resolve().parents[2]
#: PyPI distribution -> its conda-forge package, where the names differ (the lean builds:
#: matplotlib without Qt, seaborn without statsmodels, nbconvert without pandoc).
CONDA_NAME = {
    "torch": "pytorch",
    "matplotlib": "matplotlib-base",
    "seaborn": "seaborn-base",
    "nbconvert": "nbconvert-core",
    "jupyter-client": "jupyter_client",
    "playwright": "playwright-python",
}
#: What conda-forge lacks and pip may install (name -> why); empty: conda-forge has all of it.
PIP_ONLY: dict[str, str] = {}
TEST_TOOLS = {"pytest", "pytest-xdist", "hypothesis", "mutmut", "ruff", "playwright", "ruptures"}
#: The extras a user's environment needs (the report, the lab, progress bars).
RUNTIME_EXTRAS = ("notebooks", "progress")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _split(spec: str) -> tuple[str, str]:
    """``'numpy>=1.24'`` -> ``('numpy', '>=1.24')``."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)$", spec)
    assert m, spec
    return _norm(m.group(1)), m.group(2).replace(" ", "")


def _conda_name(dist: str) -> str:
    return _norm(CONDA_NAME.get(_norm(dist), _norm(dist)))


def _env(name: str) -> tuple[dict[str, str], list[str], dict]:
    """(conda package -> version spec, pip lines, the parsed file)."""
    doc = yaml.safe_load((ROOT / name).read_text())
    conda, pip = {}, []
    for dep in doc["dependencies"]:
        if isinstance(dep, dict):
            pip += [str(x) for x in dep.get("pip", [])]
        else:
            n, v = _split(str(dep))
            conda[n] = v
    return conda, pip, doc


@pytest.fixture(scope="module")
def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _runtime(project: dict) -> dict[str, str]:
    specs = list(project["dependencies"])
    for extra in RUNTIME_EXTRAS:
        specs += project["optional-dependencies"][extra]
    return dict(_split(s) for s in specs)


def test_environment_installs_every_runtime_dependency_from_conda_forge_at_pyprojects_bound(project):
    conda, _, doc = _env("environment.yml")
    assert doc["channels"] == ["conda-forge"]
    missing = {
        d: v for d, v in _runtime(project).items() if _conda_name(d) not in conda and d not in PIP_ONLY
    }
    assert not missing, f"environment.yml lacks {missing}: pip would fetch them from PyPI"
    drift = {
        d: (v, conda[_conda_name(d)])
        for d, v in _runtime(project).items()
        if _conda_name(d) in conda and conda[_conda_name(d)] != v
    }
    assert not drift, f"version bounds differ between pyproject.toml and environment.yml: {drift}"


def test_pip_installs_only_the_kit_itself_and_what_conda_forge_lacks():
    conda, pip, _ = _env("environment.yml")
    assert "-e ." in pip, "the checkout itself, editable"
    others = [p for p in pip if p != "-e ."]
    named = {_split(p)[0]: p for p in others if not p.startswith("-")}
    assert not [p for p in others if p.startswith("-")], f"pip options besides -e .: {others}"
    twice = [p for n, p in named.items() if _conda_name(n) in conda or n in conda]
    assert not twice, f"pip entries for packages the conda list has: {twice}"
    assert set(named) <= set(PIP_ONLY), f"pip entries conda-forge has: {sorted(set(named) - set(PIP_ONLY))}"


def test_the_users_environment_carries_no_test_tools_and_the_dev_one_carries_them(project):
    conda, pip, _ = _env("environment.yml")
    names = set(conda) | {_split(p)[0] for p in pip if not p.startswith("-")}
    assert not names & {_conda_name(t) for t in TEST_TOOLS} | TEST_TOOLS & names
    assert all("[" not in p for p in pip), f"no extras through pip (they pull PyPI packages): {pip}"
    dev, dev_pip, _ = _env("environment-dev.yml")
    assert not dev_pip
    wanted = {_conda_name(_split(s)[0]): _split(s)[1] for s in project["optional-dependencies"]["test"]}
    assert dev == wanted, "environment-dev.yml is the `test` extra, from conda-forge"


def test_python_is_not_capped_and_starts_where_pyproject_does(project):
    conda, _, _ = _env("environment.yml")
    assert conda["python"] == project["requires-python"], conda["python"]
    assert "<" not in conda["python"]


def test_the_kernel_the_notebooks_name_is_the_one_installed_and_registered():
    spec = json.loads((ROOT / "share/jupyter/kernels" / KERNELSPEC["name"] / "kernel.json").read_text())
    assert spec["display_name"] == KERNELSPEC["display_name"] and spec["language"] == KERNELSPEC["language"]
    # "python": Jupyter runs the interpreter it runs in (jupyter_client's KernelManager)
    assert spec["argv"][:3] == ["python", "-m", "ipykernel_launcher"]
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool["data-files"] == {
        f"share/jupyter/kernels/{KERNELSPEC['name']}": [
            f"share/jupyter/kernels/{KERNELSPEC['name']}/kernel.json"
        ]
    }
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        meta = json.loads(nb.read_text())["metadata"].get("kernelspec", {})
        assert meta.get("name") == KERNELSPEC["name"], nb.name


def _kernel_install(line: str) -> dict:
    """The options of an ``ipykernel install`` command line."""
    words = shlex.split(line[line.index("ipykernel install") :].split("&&")[0].split(">")[0])
    opts = {}
    for i, w in enumerate(words):
        if w in ("--name", "--display-name"):
            opts[w] = words[i + 1]
        elif w in ("--sys-prefix", "--user"):
            opts[w] = True
    return opts


def test_readme_conda_lines_match_the_environment_file_and_register_the_kernel():
    readme = (ROOT / "README.md").read_text()
    _, _, doc = _env("environment.yml")
    assert "conda env create -f environment.yml" in readme
    assert f"conda activate {doc['name']}" in readme
    assert "conda env update -n {} -f environment-dev.yml".format(doc["name"]) in readme
    lines = [ln for ln in readme.splitlines() if "ipykernel install" in ln]
    assert lines, "the README registers the h2dlab kernel"
    want = {"--name": KERNELSPEC["name"], "--display-name": KERNELSPEC["display_name"], "--sys-prefix": True}
    assert all(_kernel_install(ln) == want for ln in lines), [_kernel_install(ln) for ln in lines]
    header = (ROOT / "environment.yml").read_text().split("\nname:")[0]
    assert all(ln.split("  #")[0].strip() in header for ln in lines), "the README and the file's header agree"
    make = [ln for ln in (ROOT / "Makefile").read_text().splitlines() if "ipykernel install" in ln]
    assert make and all(_kernel_install(ln) == want for ln in make), "make install registers the same kernel"
