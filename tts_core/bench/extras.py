"""Figures beside the stream timings: per-component times and int8 fidelity."""

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
    from ..config import SamplingParams

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



@torch.inference_mode()
def measure_fidelity(reference, quantized, prompt: np.ndarray, frames: int) -> dict:
    """Greedy agreement of a quantised LM with the fp32 one, teacher-forced on the fp32 codes
    (every frame sees the same history), and the SNR of the quantised codec's decode of those codes."""
    from ..config import SamplingParams
    from ..sampling import SamplingBatch, StreamSampler

    def greedy_frames(lm, forced: np.ndarray | None) -> np.ndarray:
        cache = lm.new_cache(1, len(prompt) + frames + 1)
        hidden = lm.prefill(torch.as_tensor(prompt), cache, 0)[None]
        sampler = StreamSampler(SamplingParams.greedy(), 0)
        out = []
        for i in range(frames):
            _, codes = lm.generate_frame(hidden, SamplingBatch.for_frame([sampler]))
            out.append(codes[0].numpy())
            step = codes if forced is None else torch.as_tensor(forced[i : i + 1])
            hidden = lm.decode(lm.frame_rows(step), cache, [0])
        return np.stack(out)

    ref_codes = greedy_frames(reference[0], None)
    q_codes = greedy_frames(quantized[0], ref_codes)
    codes_t = torch.as_tensor(ref_codes.T[None])  # [1, 16, F]
    ref_pcm = reference[1].decode(codes_t)
    q_pcm = quantized[1].decode(codes_t)
    noise = (ref_pcm - q_pcm).pow(2).sum().item()
    snr = 10 * np.log10(ref_pcm.pow(2).sum().item() / noise) if noise > 0 else float("inf")
    return {"greedy_code_agreement": float((q_codes == ref_codes).mean()),
            "first_codebook_agreement": float((q_codes[:, 0] == ref_codes[:, 0]).mean()),
            "codec_snr_db": float(snr), "frames": frames}

