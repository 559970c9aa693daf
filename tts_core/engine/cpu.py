"""The CPU's runner: plain eager steps, the streams batched, each stream's arithmetic its own.

A stream's PCM is a function of its request alone: nothing it computes depends on which streams run
beside it, in which slot, or on how many frames the pacing (a wall-clock decision) hands to one
decode. Float kernels round differently for different shapes (a CPU matrix product picks its
kernel by the row count and splits rows over threads), so a batched step keeps every row's
arithmetic that of a lone row: its linears compute each row alike for any row count
(`model/row_linear.py`: oneDNN on packed weights, or MKL on rows padded to a multiple of 4;
checked on this machine at start-up), each
row attends alone over its own slot (`lm.decode_rows`, `lm_step.ROWS`), and the codec decodes the
slots and frames of a call together, each row and frame attending alone over its own ring as if
decoded one frame at a time (`model/codec_rows.py`).
Where the check fails (another BLAS, a model dtype oneDNN does not take), each slot steps with one
row and decodes one frame per call on its own: exact too, without the batching
(docs/ARCHITECTURE.md, "Two runners").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ..model import lm_step
from ..model.codec_rows import RowDecoder
from ..model.row_linear import make_rows_independent, rows_independent
from .host_copy import ReadyPcm
from .prefix_cache import prefix_key
from .runner_base import SlotRunner
from .sampler import batch_for_frame

logger = logging.getLogger(__name__)


class EagerRunner(SlotRunner):
    """LM steps and streaming codec decodes over `num_slots` stream slots, each stream's result its
    own (see the module doc).

    Args:
        lm: `MossTTSNanoLM` (eval mode, on `device`); its step's linears are swapped in place
            for row-independent ones (`row_linear.make_rows_independent`).
        codec: `MossAudioCodec` (eval mode, on `device`); its decoder's linears likewise.
        num_slots: streams that can run at once.
        max_context_rows: KV length per slot (prompt + generated rows).
        prefix_cache_size: voice prefixes whose KV is kept for the next prompts of the voice.

    The attribute `batched` says whether the streams are batched: where this machine computes rows
    independently (`_prepare_batching`); otherwise each slot steps and decodes on its own.
    """

    can_step_ahead = False  # each step has run when `step` returns
    step_kind = "eager"
    uses_graphs = False
    compile_mode = "off"

    def __init__(self, lm, codec, *, num_slots: int, max_context_rows: int, device: torch.device | str,
                 prefix_cache_size: int = 8):
        super().__init__(lm, codec, num_slots=num_slots, max_context_rows=max_context_rows, device=device,
                         state_rows=num_slots, cache_len=max_context_rows, prefix_cache_size=prefix_cache_size)
        self.batched = self._prepare_batching()
        with torch.inference_mode():  # like the state the base made
            # The local transformer's scratch: all slots at once, or one stream at a time.
            self.local = self.lm.new_local_cache(self.num_slots if self.batched else 1, self.device)

    def _prepare_batching(self) -> bool:
        """Swap the step's and the decoder's linears and check that rows come out independent here."""
        if self.device.type != "cpu":
            return False
        make_rows_independent(self.lm, lm_step.ROW_LINEARS)
        self.row_decoder = RowDecoder(self.codec)
        ok = rows_independent(self.lm, lm_step.ROW_LINEARS) and self.row_decoder.rows_independent()
        if not ok:
            logger.warning("CPU matrix products here round a row differently with other rows beside it: "
                           "each stream steps on its own (exact, slower with several streams)")
        return ok

    def start(self, wait_quiet: Callable[[], None], when_idle: Callable[..., None]) -> None:
        """Nothing to build: the eager step is the only one."""

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

    def release(self, slot: int) -> None:
        self.samplers[slot] = None
        self.lengths[slot] = 0
        self.cache.reset(slot)
        self.codec_state.reset_row(slot)

    # ---- the work --------------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self, slots: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """One frame for each slot: stop decision + 16 codes, then the global step for those that go on.

        Returns (is_continue bool [B], codes int64 [B, 16]) on the host.
        """
        if self.batched:
            return self._step_rows(list(slots))
        frames = [self._step_slot(slot) for slot in slots]
        return np.array([go for go, _ in frames], dtype=bool), np.stack([codes for _, codes in frames])

    def _step_rows(self, slots: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """All slots in one step, each row's arithmetic its own (`lm_step.ROWS`, `lm.decode_rows`)."""
        samplers = [self.samplers[s] for s in slots]
        hidden = self.hidden[torch.as_tensor(slots, dtype=torch.long, device=self.device)]
        is_continue, codes = self.lm.generate_frame(hidden, batch_for_frame(samplers, device=self.device),
                                                    local=self.local, units=lm_step.ROWS)
        is_continue_host = is_continue.cpu().numpy().astype(bool)
        codes_host = codes.cpu().numpy().astype(np.int64)
        going = [i for i, flag in enumerate(is_continue_host) if flag and self.context_left(slots[i]) > 0]
        if going:
            go_slots = [slots[i] for i in going]
            self.hidden[go_slots] = self.lm.decode_rows(codes[going], self.cache, go_slots)
            for i in going:
                samplers[i].observe(codes_host[i])
                self.lengths[slots[i]] += 1
        return is_continue_host, codes_host

    def _step_slot(self, slot: int) -> tuple[bool, np.ndarray]:
        """One slot alone, one row (the fallback)."""
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
        """Decode codes [B, n, 16]: the slots and frames together, each row's frames attending as if
        decoded one by one (`RowDecoder`), or each slot's frames one per codec call through its own
        row of the codec state (see the module doc). The audio is on the host when this returns."""
        codes = np.asarray(codes, dtype=np.int64)
        if self.batched:
            size = self.codec.config.quantizer.codebook_size
            if codes.size and (codes.min() < 0 or codes.max() >= size):
                raise ValueError(f"codes must be in [0, {size})")
            return ReadyPcm(self._host_pcm.fetch(self.row_decoder.decode(torch.from_numpy(codes), self.codec_state,
                                                                         slots)))
        pcm = []
        for i, slot in enumerate(slots):
            state = self.codec_state.narrow(slot, slot + 1)
            frames = [self.codec.decode_step(torch.as_tensor(frame, device=self.device).view(1, -1, 1), state)
                      for frame in codes[i]]  # each [1, 2, 3840]
            pcm.append(torch.cat(frames, dim=-1))
        return ReadyPcm(self._host_pcm.fetch(torch.cat(pcm)))
