"""What both runners share: the per-slot state, a prompt's prefill with voice-prefix reuse, and the
eager codec decode of a band of slots (how a continuation primes its slot's codec).

A slot is a row of the state tensors (the global `KVCache`, the last hidden states, the codec's
`CodecDecodeState` rings) plus its host mirror (`lengths`, its stream's `StreamSampler`). Every
method touches only the slots it is given, so streams never see each other's state.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..config import SamplingParams
from .host_copy import HostPcm
from .prefix_cache import PrefixCache, prefix_key
from .sampler import StreamSampler


class SlotRunner:
    """The state both runners keep for `num_slots` streams of at most `max_context_rows` KV rows each,
    with `lm` and `codec` in eval mode on `device`: `state_rows` (>= num_slots: spare rows allowed)
    rows of `cache_len` (>= max_context_rows) columns, and `prefix_cache_size` voice prefixes."""

    def __init__(self, lm, codec, *, num_slots: int, max_context_rows: int, device: torch.device | str,
                 state_rows: int, cache_len: int, prefix_cache_size: int):
        self.lm = lm
        self.codec = codec
        self.num_slots = num_slots
        self.max_context_rows = max_context_rows
        self.device = device = torch.device(device)
        self.n_vq = lm.config.n_vq
        self.prefix_cache = PrefixCache(prefix_cache_size) if prefix_cache_size > 0 else None
        self.lengths = [0] * num_slots  # rows in each slot's KV cache (host mirror)
        self.samplers: list[StreamSampler | None] = [None] * num_slots
        self.codec_state = codec.new_decode_state(state_rows, device=device)
        self._host_pcm = HostPcm()
        # What the LM step's units read is made as inference tensors, like everything the steps
        # produce (compiled units then see one kind of input and compile one variant).
        dtype = next(lm.parameters()).dtype
        with torch.inference_mode():
            self.cache = lm.new_cache(state_rows, cache_len, device=device, dtype=dtype)
            self.hidden = torch.zeros(state_rows, lm.config.hidden_size, device=device, dtype=dtype)

    def begin_stream(self, slot: int, sampling: SamplingParams, seed: int) -> None:
        self.samplers[slot] = StreamSampler(sampling, seed, n_vq=self.n_vq)

    def context_left(self, slot: int) -> int:
        return self.max_context_rows - self.lengths[slot]

    def decode(self, slots: Sequence[int], codes: np.ndarray) -> list[np.ndarray]:
        """Streaming decode of codes [B, n, 16]: one pcm float32 array [2, 3840 n] per slot."""
        return self.decode_async(slots, codes).result()

    def _new_segment(self, slot: int) -> StreamSampler:
        """The slot's sampler for a new text chunk: each chunk is an independent prompt, so the
        repetition history restarts; the random draws go on."""
        sampler = self.samplers[slot]
        assert sampler is not None, f"slot {slot} has no stream"
        sampler.seen.zero_()
        return sampler

    def _prefill_slot(self, slot: int, rows: np.ndarray, prefix_rows: int) -> None:
        """Prefill a prompt [T, 17] into the slot's (reset) KV cache and set its hidden state. The first
        `prefix_rows` rows (the voice's, the same for every request of it) are prefilled on their own
        and kept: a later prompt of the voice copies them instead, which gives the same keys/values."""
        rows_t = torch.as_tensor(rows, dtype=torch.long, device=self.device)  # [T, 17]
        if self.prefix_cache is None or not 0 < prefix_rows < rows.shape[0]:
            self.hidden[slot] = self.lm.prefill(rows_t, self.cache, slot)
            return
        key = prefix_key(rows, prefix_rows)
        if not self.prefix_cache.restore(key, self.cache, slot):
            self.lm.prefill(rows_t[:prefix_rows], self.cache, slot)
            self.prefix_cache.store(key, self.cache, slot, prefix_rows)
        self.hidden[slot] = self.lm.prefill(rows_t[prefix_rows:], self.cache, slot, reset=False)

    def _decode_band(self, slots: Sequence[int], codes: np.ndarray) -> list[np.ndarray]:
        """Decode codes [B, n, 16] of `slots` in one eager `decode_step` over the smallest contiguous
        band of rows holding them (a view of the state: no copy); rows of the band that are not in
        `slots` are masked and keep their state. Returns one host array [2, 3840 n] per slot."""
        order = sorted(slots)
        low, high = order[0], order[-1] + 1
        band_codes = torch.zeros(high - low, self.n_vq, codes.shape[1], dtype=torch.long, device=self.device)
        index = torch.as_tensor([s - low for s in slots], dtype=torch.long, device=self.device)
        band_codes[index] = torch.as_tensor(np.array(codes, dtype=np.int64), device=self.device).transpose(1, 2)
        active = None
        if len(order) != high - low:
            active = torch.zeros(high - low, dtype=torch.bool, device=self.device)
            active[index] = True
        full = (low, high) == (0, self.codec_state.batch_size)
        band = self.codec_state if full else self.codec_state.narrow(low, high)
        pcm = self.codec.decode_step(band_codes, band, active)  # [band, 2, 3840 n]
        return self._host_pcm.fetch(pcm[index])
