"""NVML (nvidia-ml-py, optional): start it, and find the NVML device that is CUDA device N.

CUDA and NVML number GPUs differently: ``CUDA_VISIBLE_DEVICES`` hides and reorders
CUDA's devices but not NVML's, and CUDA's default order (fastest first) need not be
NVML's (PCI bus order). :func:`nvml_for_cuda` matches them by PCI bus id once CUDA has
started, and before that through ``CUDA_VISIBLE_DEVICES``; where neither can tell, it
answers None rather than another GPU's handle.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["bus_id_of", "nvml_for_cuda", "nvml_handle", "visible_entry"]


def nvml_handle(index: int) -> tuple[Any, Any] | None:
    """``(pynvml, handle)`` for NVML's GPU ``index``, NVML started; None without
    nvidia-ml-py or NVML."""
    try:
        import pynvml  # optional: nvidia-ml-py

        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - NVML missing or refusing: the caller goes without
        return None


def visible_entry(index: int, value: str | None) -> str | None:
    """The entry of a ``CUDA_VISIBLE_DEVICES`` value that CUDA device ``index`` is, or
    None when the variable is unset (``value`` None) or lists fewer devices. CUDA reads
    the comma-separated list up to its first empty entry."""
    if value is None:
        return None
    entries = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            break
        entries.append(part)
    return entries[index] if 0 <= index < len(entries) else None


def bus_id_of(props: Any) -> str | None:
    """NVML's spelling of a device's PCI bus id (``"00000000:3B:00.0"``) from torch's
    device properties (``torch.cuda.get_device_properties``), or None where they lack it."""
    try:
        return f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
    except (AttributeError, TypeError, ValueError):
        return None


def _by_bus(pynvml: Any, bus: str) -> Any:
    for arg in (bus, bus.encode()):  # str, or bytes for older bindings
        try:
            return pynvml.nvmlDeviceGetHandleByPciBusId(arg)
        except Exception:  # noqa: BLE001 - not this spelling, or not found
            continue
    return None


def nvml_for_cuda(index: int, pci_bus_id: str | None = None) -> tuple[Any, Any] | None:
    """``(pynvml, handle)`` of the GPU that CUDA numbers ``index``, or None (no NVML, or
    no way to tell which GPU it is).

    Parameters
    ----------
    index
        The CUDA device index, as this process sees it.
    pci_bus_id
        Its PCI bus id (``"00000000:3B:00.0"``, from torch's device properties, which
        start CUDA) when the caller has it: then the match is by bus id, whatever the
        masking and ordering. Without it: ``CUDA_VISIBLE_DEVICES``' entry for ``index``
        when the variable is set (an integer is an NVML index; a ``GPU-`` UUID is looked
        up; anything else, e.g. a MIG instance, cannot be told: None), else NVML's own
        ``index`` (CUDA's and NVML's orders agree unless ``CUDA_DEVICE_ORDER`` is
        ``FASTEST_FIRST`` on a machine with unlike GPUs).
    """
    masked = "CUDA_VISIBLE_DEVICES" in os.environ
    if pci_bus_id is not None:
        found = nvml_handle(0)  # starts NVML
        if found is None:
            return None
        handle = _by_bus(found[0], pci_bus_id)
        if handle is not None:
            return found[0], handle
        return None if masked else nvml_handle(index)
    if not masked:
        return nvml_handle(index)
    entry = visible_entry(index, os.environ["CUDA_VISIBLE_DEVICES"])
    if entry is None:
        return None
    if entry.isascii() and entry.isdigit():
        return nvml_handle(int(entry))
    if entry.startswith("GPU-"):
        found = nvml_handle(0)
        if found is None:
            return None
        try:
            return found[0], found[0].nvmlDeviceGetHandleByUUID(entry)
        except Exception:  # noqa: BLE001 - a UUID prefix or unknown: cannot tell
            return None
    return None
