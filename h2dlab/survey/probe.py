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

from h2dlab.measure.nvml import bus_id_of, nvml_for_cuda

__all__ = [
    "cpu_numa_nodes",
    "gpu_facts",
    "link_from_sysfs",
    "link_under_load",
    "numa_node_of",
    "replay_count",
]

#: PCIe generation by the kernel's link speed (``current_link_speed``: ``'32.0 GT/s PCIe'``).
GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}

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


def _pci_dir(pci_bus_id: str, sys_root: Path) -> Path:
    dom, _, rest = pci_bus_id.strip().lower().partition(":")
    return sys_root / "bus/pci/devices" / f"{dom[-4:]:0>4}:{rest}"


def numa_node_of(pci_bus_id: str | None, sys_root: Path = SYS) -> int | None:
    """The NUMA node of the PCI device ``pci_bus_id`` (NVML's ``00000000:3B:00.0`` or the
    kernel's ``0000:3b:00.0``); None where unknown or where the kernel says -1 (one node)."""
    if not pci_bus_id:
        return None
    try:
        node = int((_pci_dir(pci_bus_id, sys_root) / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def _link_files(d: Path) -> tuple[int | None, int | None, int | None, int | None]:
    """(current gen, current width, max gen, max width) of the PCI device folder ``d``."""

    def gen(name: str) -> int | None:
        try:
            return GEN_BY_GTS.get(float((d / name).read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            return None

    def width(name: str) -> int | None:
        try:
            return int((d / name).read_text().strip())
        except (OSError, ValueError):
            return None

    return (
        gen("current_link_speed"),
        width("current_link_width"),
        gen("max_link_speed"),
        width("max_link_width"),
    )


def link_from_sysfs(pci_bus_id: str | None, sys_root: Path = SYS) -> dict[str, Any]:
    """The GPU's PCIe link from the kernel (no NVML needed): ``link_gen_now``,
    ``link_width_now``, and ``link_gen_max``/``link_width_max``, the lower of the GPU's
    and the port above it (a Gen5 GPU in a Gen4 slot can reach Gen4); None where unknown."""
    out: dict[str, Any] = dict.fromkeys(("link_gen_now", "link_width_now", "link_gen_max", "link_width_max"))
    if not pci_bus_id:
        return out
    d = _pci_dir(pci_bus_id, sys_root)
    gen, width, gmax, wmax = _link_files(d)
    try:
        _, _, up_gmax, up_wmax = _link_files(d.resolve().parent)
    except OSError:
        up_gmax = up_wmax = None
    out.update(
        link_gen_now=gen,
        link_width_now=width,
        link_gen_max=min((v for v in (gmax, up_gmax) if v), default=None),
        link_width_max=min((v for v in (wmax, up_wmax) if v), default=None),
    )
    return out


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
    facts["link_source"] = "nvml" if facts["link_gen_max"] is not None else None
    if facts["link_gen_max"] is None:  # no NVML: the kernel's view of the same link
        sysfs = link_from_sysfs(facts["gpu_pci_bus_id"])
        if sysfs["link_gen_max"] is not None:
            facts.update(link_gen_max=sysfs["link_gen_max"], link_width_max=sysfs["link_width_max"])
            facts["link_source"] = "sysfs"
    return facts


def link_under_load(dev: torch.device, size_bytes: int = 256 * 2**20, copies: int = 8) -> dict[str, Any]:
    """The PCIe generation and width of ``dev``'s link while pinned copies to it run (a
    link idles at a lower generation to save power, so a reading at rest says nothing):
    the highest seen over a few reads, from NVML, else from the kernel's sysfs. None for
    both on the CPU or where neither can tell."""
    out: dict[str, Any] = {"link_gen_load": None, "link_width_load": None}
    if dev.type != "cuda":
        return out
    found = _nvml(dev)
    bus = bus_id_of(torch.cuda.get_device_properties(dev.index or 0))

    def read() -> tuple[int | None, int | None]:
        if found is not None:
            try:
                return (
                    int(found[0].nvmlDeviceGetCurrPcieLinkGeneration(found[1])),
                    int(found[0].nvmlDeviceGetCurrPcieLinkWidth(found[1])),
                )
            except Exception:  # noqa: BLE001 - NVML refusing: try the kernel
                pass
        now = link_from_sysfs(bus)
        return now["link_gen_now"], now["link_width_now"]

    src = torch.empty(size_bytes, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(size_bytes, dtype=torch.uint8, device=dev)
    gens, widths = [], []
    try:
        for _ in range(copies):  # queued: the link is busy for copies x ~5 ms on Gen5 x16
            dst.copy_(src, non_blocking=True)
        for _ in range(5):
            gen, width = read()
            if gen is not None:
                gens.append(gen)
            if width is not None:
                widths.append(width)
            time.sleep(0.002)
    finally:
        torch.cuda.synchronize(dev)
    out.update(link_gen_load=max(gens, default=None), link_width_load=max(widths, default=None))
    return out
