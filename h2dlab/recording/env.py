"""The machine fingerprint stored beside every run."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import shlex
import subprocess
import sys
import warnings
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from h2dlab import SCHEMA_VERSION, __version__
from h2dlab.measure.nvml import bus_id_of, nvml_for_cuda

__all__ = [
    "GIT_COMMIT_VAR",
    "OPENMP_VARS",
    "PCIE_X16_GBPS",
    "collect_env",
    "day_span",
    "describe",
    "git_commit",
    "meminfo_bytes",
]

#: OpenMP settings env.json records (GNU libgomp's and Intel's).
OPENMP_VARS = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_PROC_BIND")
#: The environment variable that names the kit's commit. A copy of the tree whose ``.git``
#: is stale or absent (e.g. one shipped to a GPU machine) sets it; it wins over git.
GIT_COMMIT_VAR = "H2DLAB_GIT_COMMIT"


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _cpu_model() -> str | None:
    text = _read("/proc/cpuinfo") or ""
    for line in text.splitlines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or None


def _numa_nodes() -> int | None:
    nodes = Path("/sys/devices/system/node")
    if not nodes.is_dir():
        return None
    return len([p for p in nodes.glob("node[0-9]*")]) or None


def _thp() -> str | None:
    text = _read("/sys/kernel/mm/transparent_hugepage/enabled")
    if text and "[" in text:
        return text.split("[", 1)[1].split("]", 1)[0]
    return text


def meminfo_bytes(field: str) -> int | None:
    """A field of /proc/meminfo in bytes (e.g. ``'MemAvailable'``), or None where unknown."""
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return None


def _memlock_bytes() -> int | None:
    """RLIMIT_MEMLOCK (soft) in bytes; -1 when unlimited, None where unknown."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    except (ImportError, OSError, ValueError):
        return None
    return -1 if soft == resource.RLIM_INFINITY else int(soft)


def _cgroup_memory_max() -> int | None:
    """The container's memory limit (cgroup v2 memory.max, else v1) in bytes; -1 when
    unlimited, None where unknown."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        text = _read(path)
        if text == "max":
            return -1
        if text and text.isdigit():  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1
            return -1 if int(text) >= 2**62 else int(text)
    return None


def _mem_total_gib() -> float | None:
    total = meminfo_bytes("MemTotal")
    return None if total is None else round(total / 2**30, 1)


def _checkout_commit() -> str | None:
    """The commit of the kit's own checkout, or None (an installed wheel, or a package
    that merely sits inside some other repository)."""
    from h2dlab.recording.places import CHECKOUT as root

    pyproject = _read(str(root / "pyproject.toml")) or ""
    if not (root / ".git").exists() or not re.search(r'(?m)^name\s*=\s*"h2dlab"\s*$', pyproject):
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if len(commit) == 40 else None


def git_commit(environ: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """The kit's commit and where it came from: ``(commit, "env")`` from the variable
    :data:`GIT_COMMIT_VAR` when it is set, else ``(commit, "git")`` from the kit's own
    checkout, else ``(None, None)`` (an installed wheel).

    Parameters
    ----------
    environ
        Where to look for the variable (default: ``os.environ``).

    A value that is not a commit (7 to 40 hex digits) is not recorded: a warning says
    so and git is asked instead.
    """
    value = ((os.environ if environ is None else environ).get(GIT_COMMIT_VAR) or "").strip()
    if value:
        if re.fullmatch(r"[0-9a-fA-F]{7,40}", value):
            return value.lower(), "env"
        warnings.warn(
            f"{GIT_COMMIT_VAR}={value!r} is not a commit (7 to 40 hex digits): ignored, asking git",
            stacklevel=2,
        )
    commit = _checkout_commit()
    return commit, ("git" if commit else None)


def _kit_version() -> str | None:
    """The installed distribution's version (package metadata), or None if not installed."""
    try:
        return metadata.version("h2dlab")
    except metadata.PackageNotFoundError:
        return None


def _pcie(index: int, bus: str | None = None) -> dict[str, Any]:
    """PCIe link of CUDA device ``index`` (PCI bus id ``bus`` where known) from
    nvidia-ml-py; empty when unavailable or when NVML's device cannot be told
    (``nvml.nvml_for_cuda``)."""
    found = nvml_for_cuda(index, bus)
    if found is None:
        return {}
    pynvml, h = found
    try:
        info = {
            "pcie_gen_current": pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h),
            "pcie_gen_max": pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h),
            "pcie_width_current": pynvml.nvmlDeviceGetCurrPcieLinkWidth(h),
            "pcie_width_max": pynvml.nvmlDeviceGetMaxPcieLinkWidth(h),
            "driver_version": pynvml.nvmlSystemGetDriverVersion(),
        }
        try:  # the generation the GPU itself supports (the link may idle lower)
            info["pcie_gen_device_max"] = pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(h)
        except Exception:  # noqa: BLE001 - older drivers lack it
            pass
        for k, v in list(info.items()):
            if isinstance(v, bytes):
                info[k] = v.decode()
        return info
    except Exception:  # noqa: BLE001 - NVML missing or refusing: fields stay null
        return {}


def _gpu_without_context(index: int) -> dict[str, Any]:
    """GPU ``index``'s name, memory and link from NVML, without a CUDA context in this
    process; empty without NVML."""
    found = nvml_for_cuda(index)
    if found is None:
        return {}
    pynvml, h = found
    try:
        name = pynvml.nvmlDeviceGetName(h)
        info = {
            "gpu_index": index,
            "gpu_name": name.decode() if isinstance(name, bytes) else str(name),
            "gpu_memory_gib": round(pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**30, 1),
        }
    except Exception:  # noqa: BLE001 - NVML refusing: the fields stay null
        return {}
    try:
        bus = pynvml.nvmlDeviceGetPciInfo(h).busId
        info["gpu_pci_bus_id"] = (bus.decode() if isinstance(bus, bytes) else str(bus)).upper()
    except Exception:  # noqa: BLE001 - NVML refusing: that field stays null
        pass
    return {**info, **_pcie(index)}


def _evidence() -> dict[str, Any]:
    """Where the Timer's evidence columns come from on this machine (see ``timing.Timer``)."""
    try:
        import resource

        faults = (
            "getrusage(RUSAGE_THREAD): the timing thread"
            if hasattr(resource, "RUSAGE_THREAD")
            else ("getrusage(RUSAGE_SELF): the whole process")
        )
    except ImportError:
        faults = None
    try:
        import pynvml  # noqa: F401 - optional: nvidia-ml-py

        nvml = True
    except ImportError:
        nvml = False
    return {
        "page_faults": faults,
        "cpu_ms": "time.thread_time() of the timing thread (a staged copy's workers not counted)",
        "gc_count": "gc.callbacks: collections that started during the copy",
        "nvml": nvml,
    }


# PCIe x16 payload bandwidth on paper, GB/s per direction, by generation.
PCIE_X16_GBPS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}


def collect_env(
    device_index: int | None = None, argv: list[str] | None = None, gpu: bool | str = True
) -> dict[str, Any]:
    """Return the machine fingerprint as a JSON-ready dict.

    Works on a CPU-only machine: the GPU fields are then ``None``.

    Parameters
    ----------
    device_index
        Which CUDA device to describe (default: the current one).
    argv
        The command line to record (default: ``sys.argv``).
    gpu
        Query the GPU. False leaves the GPU fields null and does not start CUDA
        (the forum protocol must start it inside its first timed step). ``"nvml"``
        describes the GPU from NVML without a CUDA context in
        this process (``h2dlab record``, whose children measure: a context here would
        count as another process on their GPU).
    """
    if gpu not in (True, False, "nvml"):
        raise ValueError(f"gpu must be True, False or 'nvml', not {gpu!r}")
    commit, commit_source = git_commit()
    env: dict[str, Any] = {
        "h2dlab_version": __version__,
        "kit_version": _kit_version(),
        "schema_version": SCHEMA_VERSION,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(argv if argv is not None else sys.argv),
        "git_commit": commit,
        "git_commit_source": commit_source,  # "env" (H2DLAB_GIT_COMMIT), "git", or None
        "hostname": platform.node(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "numa_nodes": _numa_nodes(),
        "mem_total_gib": _mem_total_gib(),
        "rlimit_memlock_bytes": _memlock_bytes(),  # pinned memory is a limited resource
        "cgroup_memory_max_bytes": _cgroup_memory_max(),
        "transparent_hugepages": _thp(),
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        # how PyTorch's intra-op (OpenMP) threads wait between parallel regions: spinning
        # threads take CPUs while copies are timed (None: not set, the library's default)
        "openmp": {k: os.environ.get(k) for k in OPENMP_VARS},
        "evidence": _evidence(),
        "torch": None,
        "cuda_runtime": None,
        "cuda_available": False,
        "gpu_name": None,
        "gpu_count": 0,
        "gpu_memory_gib": None,
        "gpu_pci_bus_id": None,
        "driver_version": None,
        "pcie_gen_current": None,
        "pcie_gen_max": None,
        "pcie_gen_device_max": None,
        "pcie_width_current": None,
        "pcie_width_max": None,
    }
    try:
        import torch
    except ImportError:
        return env
    env["torch"] = torch.__version__
    env["cuda_runtime"] = torch.version.cuda
    env["torch_num_threads"] = torch.get_num_threads()
    if gpu == "nvml":  # is_available() and the NVML queries start no CUDA context
        if torch.cuda.is_available():
            # device_count() honours CUDA_VISIBLE_DEVICES (NVML's count would not)
            env.update(cuda_available=True, gpu_count=torch.cuda.device_count())
            env.update(_gpu_without_context(device_index or 0))
        return env
    if gpu and torch.cuda.is_available():
        idx = torch.cuda.current_device() if device_index is None else device_index
        props = torch.cuda.get_device_properties(idx)
        env.update(
            cuda_available=True,
            gpu_index=idx,
            gpu_name=props.name,
            gpu_count=torch.cuda.device_count(),
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            gpu_pci_bus_id=bus_id_of(props),
        )
        env.update(_pcie(idx, env["gpu_pci_bus_id"]))
    return env


def day_span(envs: Any) -> str:
    """The day of these env.jsons' runs, YYYY-MM-DD, or ``first to last`` where they differ;
    "" where none gives a ``date``."""
    days = sorted({str(e.get("date") or "")[:10] for e in envs if isinstance(e, dict)} - {""})
    return "" if not days else days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"


def describe(env: dict[str, Any]) -> str:
    """One line for banners and footnotes: GPU, link, torch, date."""
    gpu = env.get("gpu_name") or "no GPU (CPU only)"
    link = ""
    if env.get("pcie_gen_max"):
        link = f", PCIe Gen{env.get('pcie_gen_max')} x{env.get('pcie_width_max')}"
    parts = [f"{gpu}{link}"]
    if env.get("torch"):
        parts.append(f"torch {env['torch']}")
    if env.get("date"):
        parts.append(str(env["date"])[:10])
    return ", ".join(parts)
