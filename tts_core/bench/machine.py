"""What a benchmark ran on, for its JSON record: CPU, cores, memory, GPUs, library versions."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

from ..devices import available_cpus


def _first_line_value(path: str, key: str) -> str | None:
    try:
        for line in Path(path).read_text(errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.strip() == key:
                return value.strip()
    except OSError:
        return None
    return None


def machine_info(devices: list[torch.device]) -> dict:
    """CPU model, logical / usable CPUs, RAM, torch threads and versions, and each CUDA device's name."""
    mem_kib = _first_line_value("/proc/meminfo", "MemTotal")
    cuda = [d for d in devices if d.type == "cuda"]
    return {
        "cpu_model": _first_line_value("/proc/cpuinfo", "model name") or platform.processor() or "unknown",
        "logical_cpus": os.cpu_count(),
        "usable_cpus": available_cpus(),
        "ram_gib": round(int(mem_kib.split()[0]) / 2**20, 1) if mem_kib else None,
        "torch_threads": torch.get_num_threads(),
        "gpus": [torch.cuda.get_device_name(d) for d in cuda],
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "python": platform.python_version(),
        "os": platform.platform(terse=True),
    }
