"""Device, dtype and thread choices (done once, at Synthesizer construction, never at import)."""

from __future__ import annotations

import logging
import os

import torch

logger = logging.getLogger(__name__)


def resolve_device(device: str | torch.device = "auto") -> torch.device:
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


_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}


def resolve_lm_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """LM precision: bf16 on CUDA (fp16 where bf16 is missing), fp32 on CPU, as the official runtime."""
    if isinstance(dtype, torch.dtype):
        return dtype
    name = (dtype or "auto").strip().lower()
    if name == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if name not in _DTYPES:
        raise ValueError(f"dtype {dtype!r} unknown; use auto, float32, bfloat16 or float16")
    return _DTYPES[name]


def available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def configure_cpu_threads(device: torch.device) -> None:
    """Use the cores this process may run on (a 2-vCPU Space reports more cores than it has)."""
    if device.type != "cpu":
        return
    threads = int(os.environ.get("MOSS_TTS_NUM_THREADS", "0")) or available_cpus()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    logger.info("CPU inference with %d threads", threads)
