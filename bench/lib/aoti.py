"""A short greedy run of the LM's frame step with given units (plain or AOTInductor-compiled), for
the AoTI test and bench: the same prompt, the same greedy picks, the codes and per-frame times."""

from __future__ import annotations

import time

import torch

from tts_core.config import SamplingParams
from tts_core.engine.sampler import StreamSampler, batch_for_frame
from tts_core.model import lm_step


@torch.no_grad()
def greedy_run(lm, units: lm_step.StepUnits, frames: int, *, prompt_rows: int = 7,
               seed: int = 5) -> tuple[torch.Tensor, list[float]]:
    """Prefill a random prompt (plain units), then `frames` frames + decodes with `units`:
    returns the codes [frames, n_vq] and each frame's seconds (frame + decode, device synced)."""
    device = lm.device
    generator = torch.Generator().manual_seed(seed)
    n_vq = lm.config.n_vq
    rows = torch.randint(0, min(lm.config.audio_codebook_sizes), (prompt_rows, n_vq + 1), generator=generator)
    rows[:, 0] = torch.randint(10, 100, (prompt_rows,), generator=generator)
    cache = lm.new_cache(1, prompt_rows + frames + 2)
    hidden = lm.prefill(rows.to(device), cache, 0)[None]
    sampler = StreamSampler(SamplingParams.greedy(), seed=1, n_vq=n_vq,
                            codebook_size=max(lm.config.audio_codebook_sizes))
    local = lm.new_local_cache(1)
    codes_out, seconds = [], []
    for _ in range(frames):
        started = time.perf_counter()
        _, codes = lm.generate_frame(hidden, batch_for_frame([sampler], device), local=local, units=units)
        hidden = lm.decode(codes, cache, [0], units=units)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - started)
        sampler.observe(codes[0])
        codes_out.append(codes.cpu())
    return torch.cat(codes_out), seconds
