"""The GPU's runner: static shapes, so every step and decode can be a CUDA graph replay.

Batches pad to a batch bucket, steps attend over a length bucket (`graphs.CudaGraphs`). Nothing
reads a host value back: admitted prompts are prefilled together before the next step
(`prefill.BatchPrefiller`), admission writes are staged and applied at once, a step is launched and
collected later (`launch` / `collect`), and codec work runs on a CUDA stream of its own. Off CUDA
(the tests' CPU runs, `bench/lib/runners.py`) the same functions run eagerly.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ...config import SamplingParams
from ..host_copy import PendingPcm, ReadyPcm
from ..idle import MAX_DEFER_S
from ..runner_base import SlotRunner
from .buckets import bucket_sizes, kv_columns, padded_step_input, pick_bucket
from .graphs import CudaGraphs
from .prefill import BatchPrefiller
from .static_step import Launched, graphs_enabled

logger = logging.getLogger(__name__)


class StaticRunner(SlotRunner):
    """Static-shape LM steps and codec decodes over `num_slots` stream slots (`SlotRunner`'s args),
    batch `buckets` 1, 2, 4, ... by default; `enforce_eager`: no graphs; `compile`:
    `static_step.compile_mode`; `defer`: serve on the plain step until `upgrade` (then capture)."""

    can_step_ahead = True

    def __init__(self, lm, codec, *, num_slots: int, max_context_rows: int, device: torch.device | str,
                 enforce_eager: bool = False, buckets: list[int] | None = None, compile: str | None = None,
                 prefix_cache_size: int = 8, defer: bool = False):
        self.buckets = sorted(buckets) if buckets else bucket_sizes(num_slots)
        # Spare rows so every bucket fits, plus one no stream uses (graphed prefills are captured
        # there); one more column, rounded up for aligned attention masks, that rows not advancing
        # in a step write to.
        rows = max(num_slots, pick_bucket(num_slots, self.buckets))
        spare_row = rows
        super().__init__(lm, codec, num_slots=num_slots, max_context_rows=max_context_rows, device=device,
                         state_rows=rows + 1, cache_len=kv_columns(max_context_rows),
                         prefix_cache_size=prefix_cache_size)
        device = self.device
        # Codec work runs on its own high-priority CUDA stream (a listener waits on it), overlapping
        # the next LM step; the event orders it after this thread's last codec-state change.
        self._codec_stream = torch.cuda.Stream(device, priority=-1) if device.type == "cuda" else None
        self._codec_state_event: torch.cuda.Event | None = None
        self._codec_resets: set[int] = set()  # rows to clear in one batch before the next step
        self._launched: deque[Launched] = deque()  # launched steps not yet collected
        with torch.inference_mode():
            self.graphs = CudaGraphs(lm, codec, self.cache, self.codec_state, self.hidden,
                                         buckets=self.buckets, use_graphs=graphs_enabled(device, enforce_eager),
                                         compile=compile, defer=defer, spare_row=spare_row)
        # Prompts prefilled together before the next step.
        self.prefills = BatchPrefiller(lm, self.cache, self.hidden, self.graphs, self.prefix_cache,
                                       spare_row=spare_row)

    @property
    def uses_graphs(self) -> bool:
        return self.graphs.use_graphs

    @property
    def compile_mode(self) -> str:
        return self.graphs.compile_mode

    @property
    def step_kind(self) -> str:
        """What the LM step runs as: "plain", "compiled", "plain+graphs" or "compiled+graphs"."""
        kind = "plain" if self.graphs.compile_mode == "off" else "compiled"
        return f"{kind}+graphs" if self.graphs.use_graphs else kind

    def start(self, wait_quiet: Callable[[], None], when_idle: Callable[..., None]) -> None:
        """Deferred start: the compiled step is built in a background thread (`graphs.py`), each unit
        once the engine is quiet; the switch to it (and the graphs' capture) runs between two steps at
        an idle moment, or after MAX_DEFER_S on a server that is never idle."""
        self.graphs.compile_in_background(
            wait_quiet, on_ready=lambda: when_idle(self.upgrade, within_s=MAX_DEFER_S))

    def upgrade(self) -> None:
        """Switch to the compiled step and capture its graphs (engine thread, between steps); a
        failure keeps the plain step."""
        try:
            self.graphs.upgrade()
            logger.info("engine now runs the %s step", self.step_kind)
        except Exception:
            logger.exception("switching to the compiled step failed: keeping the plain step")

    # ---- stream lifecycle ----------------------------------------------------------------------

    def begin_stream(self, slot: int, sampling: SamplingParams, seed: int) -> None:
        super().begin_stream(slot, sampling, seed)
        self.graphs.set_sampling(slot, sampling)  # staged until the next step

    @torch.inference_mode()
    def start_segment(self, slot: int, rows: np.ndarray, prime_codes: np.ndarray | None,
                      prefix_rows: int = 0) -> None:
        """Queue a prompt's prefill for the next step and stage the reset (or prime) of the slot's
        codec stream. `prefix_rows` leading rows are the voice's, whose KV is reused when it was
        computed before (see `prefill.BatchPrefiller`)."""
        self._new_segment(slot)
        if rows.shape[0] > self.max_context_rows:
            raise ValueError(f"a prompt of {rows.shape[0]} rows exceeds max_context_rows={self.max_context_rows}")
        self.cache.reset(slot)
        self.prefills.add(slot, rows, prefix_rows)
        self.lengths[slot] = int(rows.shape[0])
        self.graphs.reset_slot(slot, int(rows.shape[0]))
        self._codec_resets.add(slot)  # with the other admitted slots', before the next step
        if prime_codes is not None and len(prime_codes):
            self._apply_slot_resets()
            # Continuation: the decoder must continue the reference audio; its output is dropped.
            # (Many frames at once: the plain eager pass, not the graphs.)
            self._decode_band([slot], prime_codes[None])
        self._mark_codec_state()

    def _mark_codec_state(self) -> None:
        if self._codec_stream is not None:
            event = torch.cuda.Event()
            event.record()
            self._codec_state_event = event

    def _apply_slot_resets(self) -> None:
        """Write what admitting streams staged (sampling rows, lengths, codec rows)."""
        self.graphs.apply_staged()
        if self._codec_resets:
            rows = torch.tensor(sorted(self._codec_resets)).to(self.device, non_blocking=True)
            self._codec_resets.clear()
            self.codec_state.reset_rows(rows)
            self._mark_codec_state()

    def _codec_context(self):
        """Run codec work on the codec stream (CUDA), after the last codec-state change."""
        if self._codec_stream is None:
            return contextlib.nullcontext()
        if self._codec_state_event is not None:
            self._codec_stream.wait_event(self._codec_state_event)
        return torch.cuda.stream(self._codec_stream)

    def flush_prefills(self) -> None:
        """Prefill the prompts admitted since the last step (`prefill.BatchPrefiller`)."""
        self.prefills.flush()

    @torch.inference_mode()
    def warm_prefix(self, rows: np.ndarray) -> bool:
        """Compute and keep the KV of a prompt prefix (all of `rows`) in the spare row; False when
        prefixes are not kept or it is kept already."""
        return self.prefills.warm(rows)

    @torch.inference_mode()  # the caches are made of inference tensors
    def release(self, slot: int) -> None:
        self.prefills.discard(slot)
        self.samplers[slot] = None
        self.lengths[slot] = 0
        self.cache.reset(slot)
        self._codec_resets.discard(slot)
        self.codec_state.reset_row(slot)  # no device sync, unlike reset([slot])
        self._mark_codec_state()
        self.graphs.reset_slot(slot, 0)

    # ---- the LM step ---------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self, slots: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """One frame for each slot, waited for: `collect(launch(slots))` -> (is_continue bool [B],
        codes int64 [B, 16]) on the host."""
        ticket = self.launch(slots)
        try:
            return self.collect(ticket)
        except BaseException:
            self.drop_launched()
            raise

    @torch.inference_mode()
    def launch(self, slots: Sequence[int]) -> Launched:
        """Queue one frame for each slot on the device; `collect` waits for it. One more launch may
        follow before this one is collected: it counts this one's frames as made (room and
        attention length)."""
        slots = list(slots)
        samplers = [self.samplers[s] for s in slots]
        self._apply_slot_resets()
        self.flush_prefills()
        bucket = pick_bucket(max(slots) + 1, self.buckets)
        uniforms = np.stack([sampler.draw_uniforms() for sampler in samplers])  # [B, 1 + K]
        # The graphs' host buffers alternate: at most two launches may be uncollected at once.
        assert len(self._launched) < 2, "collect a launched step before launching a third"
        ahead: dict[int, int] = {}
        for ticket in self._launched:  # a launched step not yet collected may add a row to these slots
            for slot, room in zip(ticket.slots, ticket.has_room):
                ahead[slot] = ahead.get(slot, 0) + int(room)
        has_room = np.array([self.context_left(s) - ahead.get(s, 0) > 0 for s in slots], np.float32)
        needed = max(self.lengths[s] + ahead.get(s, 0) for s in slots) + 1  # columns the global decode must see
        ticket = self.graphs.launch(bucket, padded_step_input(slots, uniforms, has_room, bucket), needed)
        ticket.slots, ticket.samplers, ticket.uniforms, ticket.has_room = slots, samplers, uniforms, has_room
        self._launched.append(ticket)
        return ticket

    def collect(self, ticket: Launched, keep: Sequence[bool] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The results of a launched step (launches are collected in order): is_continue bool [B] and
        codes int64 [B, 16]. `keep[i]` False drops row i's frame: nothing of it is booked, and its
        uniforms go back to its stream, whose next launched step draws them again (the engine drops
        the step a stream was launched into after its segment had ended, see `lookahead.py`)."""
        assert self._launched and self._launched[0] is ticket, "launched steps are collected in order"
        out = self.graphs.collect(ticket)[ticket.slots]
        self._launched.popleft()
        is_continue = out[:, 0].astype(bool)
        for i, slot in enumerate(ticket.slots):
            if keep is not None and not keep[i]:
                ticket.samplers[i].put_back(ticket.uniforms[i])
            elif is_continue[i] and ticket.has_room[i]:
                self.lengths[slot] += 1
                self.cache.advance([slot], 1)
                ticket.samplers[i].num_frames += 1  # its repetition history lives on the device
        return is_continue, out[:, 1:].astype(np.int64)

    def drop_launched(self) -> None:
        """Forget launched steps after a failure (their results will never be read)."""
        self._launched.clear()

    # ---- the codec -----------------------------------------------------------------------------

    @torch.inference_mode()
    def decode_async(self, slots: Sequence[int], codes: np.ndarray) -> PendingPcm | ReadyPcm:
        """Queue the streaming decode of codes [B, n, 16]: passes of 4/2/1 frames over the bucket's
        rows (one graph replay each), slots not decoding masked. `.result()` waits for the audio,
        one pcm float32 array [2, 3840 n] per slot (each its own memory, see `host_copy.py`). The
        next decode may be queued first; results are read in launch order, each exactly once."""
        with self._codec_context():
            slots = list(slots)
            bucket = pick_bucket(max(slots) + 1, self.buckets)
            return self.graphs.decode_async(bucket, slots, np.asarray(codes, dtype=np.int64))
