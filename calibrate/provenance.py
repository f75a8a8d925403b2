"""Facts about the measured machine: device name, memory, software versions.

Imported by the measuring run only (it reads torch's version fields).
"""

from __future__ import annotations

import datetime
import platform
from pathlib import Path

import torch


def cpu_model() -> str:
    """The CPU model string from /proc/cpuinfo (Linux), else the platform's processor name."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def host_cpu() -> str | None:
    """The host CPU as NCCL tells vendors apart: 'intel' or 'amd' (x86 vendor_id in
    /proc/cpuinfo), 'arm' (an aarch64 machine such as Grace), else None."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                vendor = line.split(":", 1)[1].strip()
                return {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(vendor)
    except OSError:
        pass
    return "arm" if platform.machine().lower() in ("aarch64", "arm64") else None


def device_compute_capability(device: torch.device) -> float | None:
    """CUDA compute capability of an NVIDIA GPU (9.0 for H100); None on a CPU or under ROCm,
    whose capability numbers are not NVIDIA's generations."""
    if device.type == "cuda" and not torch.version.hip:
        major, minor = torch.cuda.get_device_capability(device)
        return major + minor / 10
    return None


def host_memory_bytes() -> int | None:
    """MemTotal from /proc/meminfo in bytes, or None where there is no such file."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024  # the file's unit is kB = KiB
    except (OSError, ValueError, IndexError):
        pass
    return None


def device_name(device: torch.device) -> str:
    """Marketing name of the GPU, or the CPU model."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model()


def device_sm_count(device: torch.device) -> int | None:
    """Streaming multiprocessors of the GPU (None on a CPU, which has none)."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return None


def device_memory_bytes(device: torch.device, ranks_per_node: int) -> int | None:
    """Memory per device; CPU ranks of one node share host memory equally."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    total = host_memory_bytes()
    return None if total is None else total // ranks_per_node


def _driver_version() -> str | None:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    for word in text.split():
        if word.count(".") >= 1 and word.replace(".", "").isdigit():
            return word
    return None


def provenance(
    device: torch.device,
    device_count: int,
    nodes: int,
    hostnames: list[str],
    backend: str,
    quick: bool,
) -> dict[str, object]:
    """The ``provenance:`` map of a calibrated profile."""
    cuda = device.type == "cuda"
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if cuda else None
    return {
        "device": device_name(device),
        "device_count": device_count,
        "nodes": nodes,
        "hostnames": len(set(hostnames)),
        "driver": _driver_version() if cuda else None,
        "cuda": str(torch.version.cuda) if cuda else None,
        "nccl": nccl,
        "torch": str(torch.__version__),
        "backend": backend,
        "date": datetime.date.today().isoformat(),
        "quick": quick,
    }
