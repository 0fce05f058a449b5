"""On a CUDA machine: with CUDA_VISIBLE_DEVICES naming the last GPU, the child process's
env.json fields and CPU affinity describe that GPU, not NVML's GPU 0 (which differ only
on a machine with two GPUs or more; on one GPU the test still checks both paths agree)."""

import json
import os
import subprocess
import sys

import pytest
import torch

from h2dlab.measure.concurrent import nearest_cpus
from h2dlab.measure.nvml import bus_id_of, visible_entry

pytestmark = pytest.mark.cuda

CHILD = (
    "import json; from h2dlab.recording.env import collect_env; from h2dlab.measure.concurrent import nearest_cpus; "
    "a = collect_env(gpu='nvml', device_index=0); b = collect_env(gpu=True, device_index=0); "
    "print(json.dumps([a['gpu_pci_bus_id'], b['gpu_pci_bus_id'], b['pcie_width_max'], nearest_cpus(0)]))"
)


def test_a_masked_gpu_is_described_as_itself():
    last = torch.cuda.device_count() - 1
    want_bus = bus_id_of(torch.cuda.get_device_properties(last))
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")  # this process's may be masked already
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": visible_entry(last, mask) if mask is not None else str(last)}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    nvml_bus, torch_bus, width, cpus = json.loads(out.stdout.strip().splitlines()[-1])
    assert nvml_bus == torch_bus == want_bus, (nvml_bus, torch_bus, want_bus)
    assert width is not None  # the link was read from the right NVML device
    assert cpus == nearest_cpus(last)
