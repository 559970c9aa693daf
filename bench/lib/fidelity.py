"""How far a reduced-precision model is from the fp32 one, in terms that mean something.

Teacher-forced: both LMs see the same prompt and the fp32 model's own greedy history, so every
frame compares like with like (no drift after a first disagreement). Reported: the largest
absolute audio-logit difference, top-1 (greedy code) agreement overall and for codebook 0, and the
SNR of the test codec's streaming decode of the fp32 codes against the fp32 codec's.
"""

from __future__ import annotations

import numpy as np
import torch

from tts_core.config import SamplingParams
from tts_core.engine.sampler import StreamSampler, batch_for_frame


@torch.inference_mode()
def _greedy_trace(lm, prompt: np.ndarray, frames: int, forced: np.ndarray | None):
    c = lm.config
    cache = lm.new_cache(1, len(prompt) + frames + 1)
    hidden = lm.prefill(torch.as_tensor(prompt), cache, 0)[None]
    local = lm.new_local_cache(1)
    sampler = StreamSampler(SamplingParams.greedy(), 0, n_vq=c.n_vq, codebook_size=max(c.audio_codebook_sizes))
    codes, logits = [], []
    for i in range(frames):
        trace: list[torch.Tensor] = []
        _, frame = lm.generate_frame(hidden, batch_for_frame([sampler], device=lm.device), local=local, trace=trace)
        codes.append(frame[0].cpu().numpy())
        sampler.observe(codes[-1])
        logits.append(torch.stack([t[0].float().cpu() for t in trace]))  # [K, V]
        step = frame if forced is None else torch.as_tensor(forced[i : i + 1], device=lm.device)
        hidden = lm.decode(step, cache, [0])
    return np.stack(codes), torch.stack(logits)


def snr_db(reference: torch.Tensor, test: torch.Tensor) -> float:
    noise = (reference.double() - test.double()).pow(2).sum().item()
    return float("inf") if noise == 0 else float(10 * np.log10(reference.double().pow(2).sum().item() / noise))


@torch.inference_mode()
def compare_models(reference: tuple, test: tuple, prompt: np.ndarray, frames: int) -> dict:
    """reference / test: (lm, codec) pairs. Returns the figures described in the module doc."""
    ref_codes, ref_logits = _greedy_trace(reference[0], prompt, frames, None)
    test_codes, test_logits = _greedy_trace(test[0], prompt, frames, ref_codes)
    pcm = []
    for codec in (reference[1], test[1]):
        codes = torch.as_tensor(ref_codes.T[None], device=codec.device)  # [1, K, F]
        state = codec.new_decode_state(1)
        pcm.append(torch.cat([codec.decode_step(codes[:, :, f : f + 1], state) for f in range(frames)], dim=-1).cpu())
    return {
        "frames": frames,
        "max_abs_dlogit": float((test_logits - ref_logits).abs().max()),
        "logit_scale": float(ref_logits.abs().max()),
        "top1_agreement": float((test_codes == ref_codes).mean()),
        "codebook0_agreement": float((test_codes[:, 0] == ref_codes[:, 0]).mean()),
        "codec_snr_db": snr_db(pcm[0], pcm[1]),
    }
