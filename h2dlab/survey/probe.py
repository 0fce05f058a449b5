"""What one rank reads about its GPU and its CPUs besides copy times: identity (UUID, PCI
address), the PCIe link under load against its maximum, the replay counter, and the NUMA
node of the GPU against the process's CPUs. NVML (nvidia-ml-py) is optional: without it,
or on the CPU, these fields are missing (None), never guessed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

from h2dlab.nvml import bus_id_of, nvml_for_cuda

__all__ = ["cpu_numa_nodes", "gpu_facts", "link_under_load", "numa_node_of", "replay_count"]

SYS = Path("/sys")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cpulist(text: str) -> set[int]:
    """``'0-3,8'`` -> {0, 1, 2, 3, 8} (the kernel's cpulist format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def cpu_numa_nodes(cpus: set[int] | None = None, sys_root: Path = SYS) -> list[int]:
    """The NUMA nodes the CPUs ``cpus`` (default: this process's affinity) belong to,
    sorted; empty where the kernel names none."""
    if cpus is None:
        cpus = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
    nodes = []
    for d in sorted((sys_root / "devices/system/node").glob("node[0-9]*")):
        try:
            if _cpulist((d / "cpulist").read_text()) & cpus:
                nodes.append(int(d.name[4:]))
        except (OSError, ValueError):
            continue
    return nodes


def numa_node_of(pci_bus_id: str | None, sys_root: Path = SYS) -> int | None:
    """The NUMA node of the PCI device ``pci_bus_id`` (NVML's ``00000000:3B:00.0`` or the
    kernel's ``0000:3b:00.0``); None where unknown or where the kernel says -1 (one node)."""
    if not pci_bus_id:
        return None
    dom, _, rest = pci_bus_id.strip().lower().partition(":")
    name = f"{dom[-4:]:0>4}:{rest}"
    try:
        node = int((sys_root / "bus/pci/devices" / name / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def _nvml(dev: torch.device) -> tuple[Any, Any] | None:
    if dev.type != "cuda":
        return None
    idx = dev.index if dev.index is not None else torch.cuda.current_device()
    return nvml_for_cuda(idx, bus_id_of(torch.cuda.get_device_properties(idx)))


def replay_count(dev: torch.device) -> int | None:
    """NVML's PCIe replay counter of ``dev`` (link-level retransmissions), or None."""
    found = _nvml(dev)
    if found is None:
        return None
    try:
        return int(found[0].nvmlDeviceGetPcieReplayCounter(found[1]))
    except Exception:  # noqa: BLE001 - NVML refusing: unknown
        return None


def gpu_facts(dev: torch.device) -> dict[str, Any]:
    """``gpu_name``, ``gpu_uuid``, ``gpu_pci_bus_id``, ``gpu_numa_node``, ``link_gen_max``,
    ``link_width_max`` (the most the GPU and its slot can train to, NVML's
    ``MaxPcieLink*``) and ``link_gen_device_max`` (the GPU's own); None where unknown
    (on the CPU, all of them)."""
    facts: dict[str, Any] = dict.fromkeys(
        ("gpu_name", "gpu_uuid", "gpu_pci_bus_id", "gpu_numa_node", "link_gen_max", "link_width_max"), None
    )
    facts["link_gen_device_max"] = None
    if dev.type != "cuda":
        return facts
    idx = dev.index if dev.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    facts["gpu_name"] = props.name
    facts["gpu_pci_bus_id"] = bus_id_of(props)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        facts["gpu_uuid"] = f"GPU-{uuid}" if not str(uuid).startswith("GPU-") else str(uuid)
    found = _nvml(dev)
    if found is not None:
        pynvml, h = found
        for key, call in (
            ("gpu_uuid", "nvmlDeviceGetUUID"),
            ("link_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
            ("link_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
            ("link_gen_device_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration"),
        ):
            try:
                value = getattr(pynvml, call)(h)
                facts[key] = _text(value) if key == "gpu_uuid" else int(value)
            except Exception:  # noqa: BLE001 - older drivers lack some: unknown
                continue
    facts["gpu_numa_node"] = numa_node_of(facts["gpu_pci_bus_id"])
    return facts


def link_under_load(dev: torch.device, size_bytes: int = 256 * 2**20, copies: int = 8) -> dict[str, Any]:
    """The PCIe generation and width NVML reports while pinned copies to ``dev`` run
    (a link idles at a lower generation to save power, so a reading at rest says
    nothing); the highest seen over a few reads. None for both without NVML or CUDA."""
    out: dict[str, Any] = {"link_gen_load": None, "link_width_load": None}
    found = _nvml(dev)
    if found is None:
        return out
    pynvml, h = found
    src = torch.empty(size_bytes, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(size_bytes, dtype=torch.uint8, device=dev)
    gens, widths = [], []
    try:
        for _ in range(copies):  # queued: the link is busy for copies x ~5 ms on Gen5 x16
            dst.copy_(src, non_blocking=True)
        for _ in range(5):
            try:
                gens.append(int(pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h)))
                widths.append(int(pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)))
            except Exception:  # noqa: BLE001 - NVML refusing: unknown
                break
            time.sleep(0.002)
    finally:
        torch.cuda.synchronize(dev)
    if gens:
        out.update(link_gen_load=max(gens), link_width_load=max(widths))
    return out
