"""The recipes a reader pastes, loaded from their files in ``examples/``.

Each recipe is one complete script in ``examples/recipe_<name>.py`` that needs only torch.
This package loads those very files, so the tests, the ``workload`` experiment and the
notebooks run exactly the code a reader sees. In a source checkout they are read from
``examples/``; an installed wheel carries them as ``h2dlab/examples`` (pyproject.toml).
"""

from __future__ import annotations

import importlib.util
from functools import cache
from importlib import resources
from pathlib import Path
from types import ModuleType

__all__ = ["RECIPES", "folder", "load", "path", "source"]

#: Recipe name -> the situation it answers, in the order a reader meets them.
RECIPES: dict[str, str] = {
    "one_tensor": "one large tensor, copied once",
    "pinned_buffer": "a batch of the same shape every step",
    "dataloader": "batches from a torch DataLoader",
    "prefetch": "copy the next batch while this step computes",
    "many_tensors": "many small tensors every step",
    "results_to_host": "results back to the host",
}


def folder() -> Path:
    """The folder holding the recipe files (the wheel's copy, else the checkout's ``examples/``)."""
    inside = Path(str(resources.files("h2dlab") / "examples"))
    if (inside / "recipe_one_tensor.py").is_file():
        return inside
    return Path(__file__).resolve().parents[2] / "examples"


def path(name: str) -> Path:
    """The file of recipe ``name``; ``KeyError`` names the recipes."""
    if name not in RECIPES:
        raise KeyError(f"unknown recipe {name!r}; choose from {', '.join(RECIPES)}")
    return folder() / f"recipe_{name}.py"


def source(name: str) -> str:
    """The text of recipe ``name``, as a notebook shows it."""
    return path(name).read_text(encoding="utf-8")


@cache
def load(name: str) -> ModuleType:
    """Recipe ``name`` as a module (loaded once; its ``main()`` is not run)."""
    p = path(name)
    spec = importlib.util.spec_from_file_location(f"h2dlab.recipes.{name}", p)
    if spec is None or spec.loader is None or not p.is_file():
        raise FileNotFoundError(f"recipe file {p} is missing: the examples folder did not come along")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
