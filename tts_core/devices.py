"""The machine's resources and their defaults: usable CPUs, torch devices, the LM dtype, CPU threads,
and how many streams an engine runs together on a device.

torch is imported inside the functions that need it: the web server and the encoder pool ask for
the CPU count before the engine (and torch with it) is imported. Nothing is chosen at import time.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from .env import env_int

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

# Streams one GPU engine runs together by default: the most the H200 held with every stream ahead of
# real time (docs/PERFORMANCE.md). A smaller GPU is measured the same way and set explicitly.
GPU_ACTIVE_STREAMS = 256


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity, not the host's core count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def default_active_streams(device_type: str, cpus: int | None = None) -> int:
    """The default slot count of an engine on a device of `device_type` ("cuda", "cpu", ...): a slot
    costs the same until the device is saturated. CUDA: `GPU_ACTIVE_STREAMS`. CPU: one stream per
    usable core (batched frames are memory-bound: beyond a stream per core each slows the others).
    Beyond the slots requests wait in the engine's queue, then get refused."""
    if device_type == "cuda":
        return GPU_ACTIVE_STREAMS
    return max(1, available_cpus() if cpus is None else int(cpus))


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    import torch

    if isinstance(device, torch.device):
        return device
    name = (device or "auto").strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(name)
    except RuntimeError as exc:
        raise ValueError(f"device {device!r} is not a torch device; use 'auto', 'cpu' or 'cuda[:N]'") from exc
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for CUDA but torch sees no GPU; use --device cpu")
    return resolved


_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float16": "float16", "fp16": "float16"}


def auto_cuda_dtype(capability: tuple[int, int]) -> torch.dtype:
    """LM dtype for a GPU of compute `capability`: bf16 where it is native (Ampere, sm 8.0, and
    newer); older GPUs (a T4 is sm 7.5) get fp16. `torch.cuda.is_bf16_supported()` is not used: it
    says yes on a T4, where bf16 is emulated and slow."""
    import torch

    return torch.bfloat16 if capability >= (8, 0) else torch.float16


def resolve_lm_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """LM precision: `auto` = bf16 or fp16 on CUDA by capability (`auto_cuda_dtype`), fp32 on CPU."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    name = (dtype or "auto").strip().lower()
    if name == "auto":
        if device.type == "cuda":
            return auto_cuda_dtype(torch.cuda.get_device_capability(device))
        return torch.float32
    if name not in _DTYPES:
        raise ValueError(f"dtype {dtype!r} unknown; use auto, float32, bfloat16 or float16")
    return getattr(torch, _DTYPES[name])


def default_cpu_threads(cpus: int | None = None) -> int:
    """Half the CPUs this process may use, at least 1, at most 8.

    The frame loop is batch-1 matrix-vector work bound by memory bandwidth: on the 2-vCPU machine
    this project targets (a free HF Space's size), 1 thread runs it faster than 2 (`bench`), and
    the other vCPU serves HTTP and audio encoding.
    """
    cpus = available_cpus() if cpus is None else cpus
    return max(1, min(8, cpus // 2))


def configure_cpu_threads(device: torch.device, threads: int | None = None) -> int | None:
    """Set torch's CPU threads (CPU only): `threads`, else MOSS_TTS_NUM_THREADS, else
    `default_cpu_threads`; returns the count set (None off the CPU)."""
    import torch

    if device.type != "cpu":
        return None
    threads = threads or env_int("MOSS_TTS_NUM_THREADS") or default_cpu_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    logger.info("CPU inference with %d threads", threads)
    return threads
