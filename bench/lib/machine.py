"""What a benchmark ran on, for its JSON record: CPU, cores, memory, GPUs, library versions."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import torch

from tts_core.devices import available_cpus


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


def machine_info_without_cuda() -> dict:
    """`machine_info` for a process that must not initialise CUDA (the GPUs run in other processes):
    the GPU names come from nvidia-smi instead of torch."""
    machine = machine_info([])
    machine["gpus"] = _nvidia_smi_names()
    machine["cuda"] = torch.version.cuda if machine["gpus"] else None
    return machine


def _nvidia_smi_names() -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]
