"""The CPU's runner: plain eager steps, each stream computed on its own.

A stream's PCM is a function of its request alone: each slot's LM step runs with one row, and its
codec decodes one frame per call, so no computation's shape depends on which streams run beside it
or on how many frames the pacing (a wall-clock decision) hands to one decode. Float kernels round
differently for different shapes (a CPU GEMM picks its path by the row count), which would otherwise
change a stream's audio, or in rare cases a sampled code (docs/ARCHITECTURE.md, "Two runners").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from .host_copy import ReadyPcm
from .prefix_cache import prefix_key
from .runner_base import SlotRunner
from .sampler import batch_for_frame


class EagerRunner(SlotRunner):
    """Exact per-slot LM steps and streaming codec decodes over `num_slots` stream slots.

    Args:
        lm: `MossTTSNanoLM` (eval mode, on `device`).
        codec: `MossAudioCodec` (eval mode, on `device`).
        num_slots: streams that can run at once.
        max_context_rows: KV length per slot (prompt + generated rows).
        prefix_cache_size: voice prefixes whose KV is kept for the next prompts of the voice.
    """

    can_step_ahead = False  # each step has run when `step` returns
    step_kind = "eager"
    uses_graphs = False
    compile_mode = "off"

    def __init__(self, lm, codec, *, num_slots: int, max_context_rows: int, device: torch.device | str,
                 prefix_cache_size: int = 8):
        super().__init__(lm, codec, num_slots=num_slots, max_context_rows=max_context_rows, device=device,
                         state_rows=num_slots, cache_len=max_context_rows, prefix_cache_size=prefix_cache_size)
        with torch.inference_mode():  # like the state the base made
            self.local = lm.new_local_cache(1, self.device)  # the local transformer's scratch: one stream at a time

    def start_background_compile(self, before_each: Callable[[], None] | None = None) -> None:
        """Nothing to build: the eager step is the only one."""

    def upgrade_ready(self) -> bool:
        return False

    def upgrade(self) -> None:
        raise RuntimeError("the eager runner has no other step to switch to")

    # ---- stream lifecycle ----------------------------------------------------------------------

    @torch.inference_mode()
    def start_segment(self, slot: int, rows: np.ndarray, prime_codes: np.ndarray | None,
                      prefix_rows: int = 0) -> None:
        """Prefill a prompt into the slot and reset (or prime) its codec stream; `prefix_rows`
        leading rows are the voice's, whose KV is reused when it was computed before."""
        self._new_segment(slot)
        self.cache.reset(slot)
        self._prefill_slot(slot, rows, prefix_rows)
        self.lengths[slot] = int(rows.shape[0])
        self.codec_state.reset_row(slot)  # no device sync, unlike reset([slot])
        if prime_codes is not None and len(prime_codes):
            # Continuation: the decoder must continue the reference audio; its output is dropped.
            self._decode_band([slot], prime_codes[None])

    @torch.inference_mode()
    def warm_prefix(self, rows: np.ndarray) -> bool:
        """Compute and keep the KV of a prompt prefix (all of `rows`) for later requests of the same
        voice; False when there is no prefix cache or it already holds it."""
        if self.prefix_cache is None:
            return False
        key = prefix_key(rows, len(rows))
        if key in self.prefix_cache:
            return False
        scratch = self.lm.new_cache(1, len(rows))  # no slot is taken from the streams
        self.lm.prefill(torch.as_tensor(rows, dtype=torch.long), scratch, 0)
        self.prefix_cache.store(key, scratch, 0, len(rows))
        return True

    @torch.inference_mode()  # the caches are made of inference tensors
    def release(self, slot: int) -> None:
        self.samplers[slot] = None
        self.lengths[slot] = 0
        self.cache.reset(slot)
        self.codec_state.reset_row(slot)

    # ---- the work --------------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self, slots: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """One frame for each slot: stop decision + 16 codes, then the global step if it goes on.

        Returns (is_continue bool [B], codes int64 [B, 16]) on the host.
        """
        frames = [self._step_slot(slot) for slot in slots]
        return np.array([go for go, _ in frames], dtype=bool), np.stack([codes for _, codes in frames])

    def _step_slot(self, slot: int) -> tuple[bool, np.ndarray]:
        sampler = self.samplers[slot]
        row = self.hidden[slot : slot + 1]
        is_continue, codes = self.lm.generate_frame(row, batch_for_frame([sampler], device=self.device),
                                                    local=self.local)
        go = bool(is_continue[0])
        codes_host = codes[0].cpu().numpy().astype(np.int64)
        if go and self.context_left(slot) > 0:
            self.hidden[slot : slot + 1] = self.lm.decode(codes, self.cache, [slot])
            sampler.observe(codes_host)
            self.lengths[slot] += 1
        return go, codes_host

    @torch.inference_mode()
    def decode_async(self, slots: Sequence[int], codes: np.ndarray) -> ReadyPcm:
        """Decode codes [B, n, 16]: each slot's frames one at a time through its own row of the codec
        state (see the module doc). The audio is on the host when this returns."""
        codes = np.asarray(codes, dtype=np.int64)
        pcm = []
        for i, slot in enumerate(slots):
            state = self.codec_state.narrow(slot, slot + 1)
            frames = [self.codec.decode_step(torch.as_tensor(frame, device=self.device).view(1, -1, 1), state)
                      for frame in codes[i]]  # each [1, 2, 3840]
            pcm.append(torch.cat(frames, dim=-1))
        return ReadyPcm(self._host_pcm.fetch(torch.cat(pcm)))
