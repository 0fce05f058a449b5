import os
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    # This hook sees every collected item: mark only the ones in tests/gpu.
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.cuda)


@pytest.fixture(autouse=True)
def _need_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


# Each CUDA run ends with a stall census (h2dlab.measure.census): keep it short in the GPU tests,
# except where a test asks for its own length (tests/gpu/test_census_gpu.py).
os.environ.setdefault("H2DLAB_CENSUS_S", "0.05")
