"""Reference frame-generation loop over the LM (docs/spec/LM.md §5.1), batched over N prompts.

Each prompt gets its own cache slot and `StreamSampler`; every frame runs one batched local pass
for the active streams and one batched global decode step for those that continue. A stream that
chooses stop leaves the batch. The engine has its own scheduler; this loop is the simple,
synchronous reference it is checked against (used by the LM parity and sampling tests only).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence

import numpy as np
import torch

from tts_core.config import SamplingParams
from tts_core.engine.sampler import StreamSampler, batch_for_frame
from tts_core.model.lm import MossTTSNanoLM

logger = logging.getLogger(__name__)


def observe_frames(samplers: Sequence[StreamSampler], codes: torch.Tensor, emitted: Sequence[bool]) -> None:
    """Update B streams' seen masks from one frame's codes [B, n_vq], skipping rows that stopped."""
    codes_cpu = codes.detach().to(device="cpu", dtype=torch.long)  # one transfer for the batch
    for sampler, row, is_emitted in zip(samplers, codes_cpu, emitted):
        if is_emitted:
            sampler.observe(row)


def _per_stream(value, count: int, name: str) -> list:
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ValueError(f"{name} has {len(value)} entries for {count} prompts")
        return list(value)
    return [value] * count


@torch.no_grad()
def generate_codes(
    lm: MossTTSNanoLM,
    rows_list: Sequence[np.ndarray | torch.Tensor],
    sampling: SamplingParams | Sequence[SamplingParams] | None = None,
    seeds: int | Sequence[int] | None = None,
    max_frames: int = 375,
) -> list[np.ndarray]:
    """Generate codes for N prompts together.

    Args:
        lm: the model (CPU fp32, or CUDA bf16/fp32).
        rows_list: N prompts, rows [T_i, n_vq + 1] from `prompt.build_prompt_rows`.
        sampling: one `SamplingParams` for all, one per prompt, or None for greedy.
        seeds: per-stream seeds (one int is used for every stream); None draws fresh ones.
        max_frames: cap on generated frames per stream.
    Returns:
        N int64 arrays [F_i, n_vq]; F_i < max_frames when the stream chose stop.
    """
    count = len(rows_list)
    if count < 1:
        raise ValueError("generate_codes needs at least one prompt")
    if max_frames < 1:
        raise ValueError(f"max_frames must be >= 1, got {max_frames}")
    config = lm.config
    params = _per_stream(sampling if sampling is not None else SamplingParams.greedy(), count, "sampling")
    if seeds is None:
        seeds = [secrets.randbits(63) for _ in range(count)]
        logger.debug("generate_codes drew seeds %s", seeds)
    seed_list = _per_stream(seeds, count, "seeds")
    samplers = [
        StreamSampler(p, s, config.n_vq, max(config.audio_codebook_sizes)) for p, s in zip(params, seed_list)
    ]
    prompts = [torch.as_tensor(np.asarray(rows), dtype=torch.long) for rows in rows_list]
    cache = lm.new_cache(count, max(p.shape[0] for p in prompts) + max_frames)
    hidden = torch.stack([lm.prefill(p, cache, slot) for slot, p in enumerate(prompts)])  # [N, H]

    active = list(range(count))  # stream index == cache slot
    frames: list[list[torch.Tensor]] = [[] for _ in range(count)]
    for step in range(max_frames):
        batch = batch_for_frame([samplers[i] for i in active], device=lm.device)
        is_continue, codes = lm.generate_frame(hidden, batch)
        emitted = is_continue.tolist()
        keep = [j for j, flag in enumerate(emitted) if flag]
        codes_cpu = codes.cpu()
        observe_frames([samplers[i] for i in active], codes_cpu, emitted)
        for j in keep:
            frames[active[j]].append(codes_cpu[j])
        if not keep or step + 1 == max_frames:
            break
        keep_index = torch.tensor(keep, dtype=torch.long, device=codes.device)
        active = [active[j] for j in keep]
        hidden = lm.decode(codes.index_select(0, keep_index), cache, active)  # [B', H]

    empty = np.zeros((0, config.n_vq), dtype=np.int64)
    return [torch.stack(f).numpy().astype(np.int64) if f else empty for f in frames]
