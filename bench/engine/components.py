"""Figures beside the stream timings: per-component times."""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_components(runner, prompt: np.ndarray, device: torch.device, repeats: int = 20) -> dict:
    """Median ms of one prefill, one batch-1 LM frame step, and one 1-frame codec decode."""
    from tts_core.config import SamplingParams

    runner.begin_stream(0, SamplingParams(), 0)
    timings: dict[str, list[float]] = {"prefill_ms": [], "lm_frame_ms": [], "codec_frame_ms": []}
    for _ in range(3):
        _sync(device)
        t0 = time.perf_counter()
        runner.start_segment(0, prompt, None)
        if hasattr(runner, "flush_prefills"):
            runner.flush_prefills()  # the static path defers prefill to the next step
        _sync(device)
        timings["prefill_ms"].append(1000 * (time.perf_counter() - t0))
    for _ in range(repeats):
        t0 = time.perf_counter()
        _, codes = runner.step([0])
        t1 = time.perf_counter()
        runner.decode([0], codes[:, None, :])
        t2 = time.perf_counter()
        timings["lm_frame_ms"].append(1000 * (t1 - t0))
        timings["codec_frame_ms"].append(1000 * (t2 - t1))
    runner.release(0)
    return {name: statistics.median(values) for name, values in timings.items()}
