"""Device work of the engine: owns the LM, the codec, the KV cache and the codec stream state.

Only the engine thread calls it. Every method works on slots (rows of the static caches), so any
subset of streams can be stepped or decoded together; a slot's state never touches another's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch

from ..config import SamplingParams
from ..sampling import SamplingBatch, StreamSampler

logger = logging.getLogger(__name__)


class Runner:
    """Batched LM frame steps and streaming codec decode over `num_slots` stream slots.

    Args:
        lm: `MossTTSNanoLM` (eval mode, on `device`).
        codec: `MossAudioCodec` (eval mode, on `device`).
        num_slots: streams that can run at once.
        max_context_rows: KV length per slot (prompt + generated rows).
    """

    def __init__(self, lm, codec, *, num_slots: int, max_context_rows: int, device: torch.device):
        self.lm = lm
        self.codec = codec
        self.num_slots = num_slots
        self.max_context_rows = max_context_rows
        self.device = device
        self.n_vq = lm.config.n_vq
        self.assistant_slot_id = lm.config.audio_assistant_slot_id
        lm_dtype = next(lm.parameters()).dtype
        self.cache = lm.new_cache(num_slots, max_context_rows, device=device, dtype=lm_dtype)
        self.codec_state = codec.new_decode_state(num_slots, device=device)
        self.hidden = torch.zeros(num_slots, lm.config.hidden_size, device=device, dtype=lm_dtype)
        self.lengths = [0] * num_slots  # rows in each slot's KV cache (host mirror)
        self.samplers: list[StreamSampler | None] = [None] * num_slots

    # ---- stream lifecycle ----------------------------------------------------------------------

    def begin_stream(self, slot: int, sampling: SamplingParams, seed: int) -> None:
        self.samplers[slot] = StreamSampler(sampling, seed, n_vq=self.n_vq)

    @torch.inference_mode()
    def start_segment(self, slot: int, rows: np.ndarray, prime_codes: np.ndarray | None) -> None:
        """Prefill a prompt into the slot and reset (or prime) its codec stream."""
        sampler = self.samplers[slot]
        assert sampler is not None, f"slot {slot} has no stream"
        # Each text chunk is an independent prompt: repetition history restarts, the RNG goes on.
        sampler.seen.zero_()
        self.cache.reset(slot)
        rows_t = torch.as_tensor(rows, dtype=torch.long, device=self.device)  # [T, 17]
        self.hidden[slot] = self.lm.prefill(rows_t, self.cache, slot)
        self.lengths[slot] = int(rows.shape[0])
        self.codec_state.reset([slot])
        if prime_codes is not None and len(prime_codes):
            # Continuation: the decoder must continue the reference audio; its output is dropped.
            self.decode([slot], prime_codes[None])

    def release(self, slot: int) -> None:
        self.samplers[slot] = None
        self.lengths[slot] = 0
        self.cache.reset(slot)
        self.codec_state.reset([slot])

    def context_left(self, slot: int) -> int:
        return self.max_context_rows - self.lengths[slot]

    # ---- batched work --------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self, slots: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """One frame for each slot: stop decision + 16 codes, then the global step for those that go on.

        Returns (is_continue bool [B], codes int64 [B, 16]) on the host.
        """
        samplers = [self.samplers[s] for s in slots]
        batch = SamplingBatch.for_frame(samplers, device=self.device)
        slot_index = torch.as_tensor(list(slots), dtype=torch.long, device=self.device)
        is_continue, codes = self.lm.generate_frame(self.hidden[slot_index], batch)
        is_continue_host = is_continue.cpu().numpy()
        codes_host = codes.cpu().numpy().astype(np.int64)
        going = [i for i, flag in enumerate(is_continue_host) if flag and self.context_left(slots[i]) > 0]
        if going:
            go_index = torch.as_tensor(going, dtype=torch.long, device=self.device)
            rows = torch.empty(len(going), self.n_vq + 1, dtype=torch.long, device=self.device)
            rows[:, 0] = self.assistant_slot_id
            rows[:, 1:] = codes[go_index]
            go_slots = slot_index[go_index]
            self.hidden[go_slots] = self.lm.decode(rows, self.cache, go_slots)
            for i in going:
                self.samplers[slots[i]].observe(codes_host[i])
                self.lengths[slots[i]] += 1
        return is_continue_host.astype(bool), codes_host

    @torch.inference_mode()
    def decode(self, slots: Sequence[int], codes: np.ndarray) -> np.ndarray:
        """Streaming codec decode of n new frames per slot: codes [B, n, 16] -> pcm float32 [B, 2, 3840n].

        Runs on the smallest contiguous band of slots that holds them (a view of the state, so no
        copy); slots inside the band that are not decoding are masked and keep their state.
        """
        order = sorted(slots)
        low, high = order[0], order[-1] + 1
        num_frames = codes.shape[1]
        band_codes = torch.zeros(high - low, self.n_vq, num_frames, dtype=torch.long, device=self.device)
        index = torch.as_tensor([s - low for s in slots], dtype=torch.long, device=self.device)
        band_codes[index] = torch.as_tensor(np.array(codes, dtype=np.int64), device=self.device).transpose(1, 2)
        active = None
        if len(order) != high - low:
            active = torch.zeros(high - low, dtype=torch.bool, device=self.device)
            active[index] = True
        band = self.codec_state if (low, high) == (0, self.num_slots) else self.codec_state.narrow(low, high)
        pcm = self.codec.decode_step(band_codes, band, active)  # [band, 2, 3840n]
        return pcm[index].float().cpu().numpy()

