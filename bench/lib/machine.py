"""What a benchmark ran on, for its JSON record: CPU, cores, memory, GPUs, library versions, the
load average (other work on a shared machine) and the checkout's commit."""

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


def load_average_1m() -> float | None:
    """The 1-minute load average now (None where the OS has none): read it before and after a run."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def git_commit(root: Path) -> str:
    """`<short hash> <subject>` of the checkout at `root`, "(uncommitted changes)" added when tracked
    files differ from it."""
    out = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h %s"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return out.stdout.strip() + (" (uncommitted changes)" if dirty else "")
