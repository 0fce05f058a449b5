"""Which NVML device is CUDA device N (h2dlab.measure.nvml), with a synthetic (made-up) NVML:
CUDA_VISIBLE_DEVICES hides and reorders CUDA's devices, never NVML's."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from h2dlab.measure import nvml


class _FakeNvml:
    """Synthetic NVML with GPUs 0..3 at bus ids 00000000:0N:00.0 and UUIDs GPU-N."""

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, i):
        if not 0 <= i < 4:
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")
        return f"nvml{i}"

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        if isinstance(bus, bytes) or not bus.startswith("00000000:0") or int(bus[10]) > 3:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return f"nvml{bus[10]}"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in {f"GPU-{i}" for i in range(4)}:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return f"nvml{uuid[4:]}"


@pytest.fixture
def fake(monkeypatch):
    f = _FakeNvml()
    monkeypatch.setattr(
        nvml, "nvml_handle", lambda i: (f, f.nvmlDeviceGetHandleByIndex(i)) if 0 <= i < 4 else None
    )
    return f


@pytest.mark.parametrize(
    ("visible", "index", "bus", "want"),
    [
        (None, 1, None, "nvml1"),  # nothing masked: CUDA's index is NVML's
        ("2,3", 0, None, "nvml2"),  # masked: CUDA's 0 is the list's first entry
        ("3,1", 1, None, "nvml1"),
        (" 3 , 1", 0, None, "nvml3"),
        ("3,,1", 1, None, None),  # CUDA stops at an empty entry: there is no device 1
        ("GPU-2", 0, None, "nvml2"),  # by UUID
        ("GPU-9", 0, None, None),  # an unknown UUID (or a prefix): cannot tell
        ("MIG-abc", 0, None, None),  # a MIG instance: cannot tell
        ("", 0, None, None),  # set but empty: CUDA sees no GPU
        ("1", 3, None, None),  # fewer entries than the index
        ("3", 0, "00000000:01:00.0", "nvml1"),  # the bus id wins over the variable
        ("3", 0, "00000000:07:00.0", None),  # masked and the bus id unknown: cannot tell
        (None, 2, "00000000:07:00.0", "nvml2"),  # unmasked and unknown: NVML's index
    ],
)
def test_nvml_for_cuda(monkeypatch, fake, visible, index, bus, want):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    found = nvml.nvml_for_cuda(index, bus)
    assert (found[1] if found else None) == want


def test_without_nvml_there_is_no_handle(monkeypatch):
    monkeypatch.setattr(nvml, "nvml_handle", lambda i: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1")
    assert nvml.nvml_for_cuda(0) is None
    assert nvml.nvml_for_cuda(0, "00000000:01:00.0") is None


@given(st.lists(st.integers(0, 99), min_size=1, max_size=6), st.integers(0, 7))
def test_visible_entry_is_the_indexth_listed(ids, index):
    value = ",".join(map(str, ids))
    assert nvml.visible_entry(index, value) == (str(ids[index]) if index < len(ids) else None)
    assert nvml.visible_entry(index, None) is None


def test_bus_id_of_spells_it_as_nvml_does():
    from types import SimpleNamespace

    assert (
        nvml.bus_id_of(SimpleNamespace(pci_domain_id=0, pci_bus_id=0x3B, pci_device_id=0))
        == "00000000:3B:00.0"
    )
    assert nvml.bus_id_of(SimpleNamespace(name="no ids")) is None
