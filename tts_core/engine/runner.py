"""Device work of the engine: owns the LM, the codec, the KV cache and the codec stream state.

Only the engine thread calls it. Every method works on slots (rows of the static caches), so any
subset of streams can be stepped or decoded together; a slot's state never touches another's.

Two paths behind the same methods: on CUDA the static-shape step of `graphs.StaticStepper`
(CUDA graphs per batch-size bucket, or the same functions eagerly with `enforce_eager`); on CPU the plain eager step over exactly the given slots.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..config import SamplingParams
from .buckets import bucket_sizes, padded_step_input, pick_bucket
from .graphs import StaticStepper, StepLaunch, graphs_enabled
from .host_copy import HostPcm, PendingPcm, ReadyPcm
from .prefill import BatchPrefiller
from .prefix_cache import PrefixCache, prefix_key
from .sampler import StreamSampler, batch_for_frame

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class StepTicket:
    """One launched LM step (`Runner.launch`), until `Runner.collect` reads it."""

    slots: list[int]
    samplers: list[StreamSampler]
    uniforms: np.ndarray | None  # [B, 1 + K] drawn for it (static path)
    has_room: np.ndarray | None  # [B] whether each row may add a KV row (static path)
    launch: StepLaunch | tuple[np.ndarray, np.ndarray]  # the queued step, or the eager path's results


class Runner:
    """Batched LM frame steps and streaming codec decode over `num_slots` stream slots.

    Args:
        lm: `MossTTSNanoLM` (eval mode, on `device`).
        codec: `MossAudioCodec` (eval mode, on `device`).
        num_slots: streams that can run at once.
        max_context_rows: KV length per slot (prompt + generated rows).
        enforce_eager: never capture CUDA graphs.
        static: use the static-shape step (default: on CUDA); on CPU it runs eagerly (tests).
        buckets: batch-size buckets of the static step (default 1, 2, 4, ... >= num_slots).
        batch_invariant: static path with a single bucket (every step runs all rows) and one prefill
            per stream: a stream's codes are then bit-identical whatever else runs beside it, in
            bf16 too, at the cost of full-size steps for small batches.
        compile: how the static LM step's units run (`graphs.compile_mode`): torch.compile'd on CUDA
            by default, plain functions on CPU.
        defer: static path: serve at once on the plain step while the compiled units build in a
            background thread; the engine calls `upgrade` when they are ready (then captures graphs).
    """

    def __init__(self, lm, codec, *, num_slots: int, max_context_rows: int, device: torch.device,
                 enforce_eager: bool = False, static: bool | None = None, buckets: list[int] | None = None,
                 batch_invariant: bool = False, compile: str | None = None, prefix_cache_size: int = 8,
                 defer: bool = False):
        self.lm = lm
        self.codec = codec
        self.num_slots = num_slots
        self.max_context_rows = max_context_rows
        self.device = device = torch.device(device)
        self.n_vq = lm.config.n_vq
        lm_dtype = next(lm.parameters()).dtype
        self.stepper: StaticStepper | None = None
        rows, cache_len = num_slots, max_context_rows
        is_static = device.type == "cuda" if static is None else static
        if is_static:
            self.buckets = sorted(buckets) if buckets else bucket_sizes(num_slots)
            # Spare rows so every bucket fits; one more column (rounded up for aligned attention
            # masks) that rows not advancing in a step write to.
            rows = max(num_slots, pick_bucket(num_slots, self.buckets))
            if batch_invariant:
                self.buckets = [rows]
            rows += 1  # a spare row no stream uses: graphed prefills are captured there
            cache_len = -(-(max_context_rows + 1) // 16) * 16
        self.batch_invariant = batch_invariant
        # Prompt-prefix KV reuse: per prompt on the eager path, per batch of prompts on the static one
        # (not with batch_invariant: its prefills stay whole, one per stream).
        reuse = prefix_cache_size > 0 and not (is_static and batch_invariant)
        self.prefix_cache = PrefixCache(prefix_cache_size) if reuse else None
        self.prefills: BatchPrefiller | None = None  # static path: prompts prefilled before the next step
        # CUDA: codec work runs on its own stream, so a pipelined decode overlaps the next LM step;
        # the event orders it after this thread's last change to codec state (reset, priming).
        # High priority: its work is what a listener waits for (first chunks above all), and it is
        # short beside the LM steps it overlaps.
        self._codec_stream = torch.cuda.Stream(device, priority=-1) if device.type == "cuda" else None
        self._codec_state_event: torch.cuda.Event | None = None
        self._host_pcm = HostPcm()  # the eager path's audio to the host (the static path has its own)
        self._codec_resets: set[int] = set()  # static path: rows to clear in one batch before the next step
        self.lengths = [0] * num_slots  # rows in each slot's KV cache (host mirror)
        self._launched: deque[StepTicket] = deque()  # static path: launched steps not yet collected
        self.samplers: list[StreamSampler | None] = [None] * num_slots
        self.codec_state = codec.new_decode_state(rows, device=device)
        # What the LM step's units read is made as inference tensors, like everything the steps
        # produce (compiled units then see one kind of input and compile one variant).
        with torch.inference_mode():
            self.cache = lm.new_cache(rows, cache_len, device=device, dtype=lm_dtype)
            self.hidden = torch.zeros(rows, lm.config.hidden_size, device=device, dtype=lm_dtype)
            if is_static:
                self.stepper = StaticStepper(lm, codec, self.cache, self.codec_state, self.hidden,
                                             buckets=self.buckets, use_graphs=graphs_enabled(device, enforce_eager),
                                             compile=compile, defer=defer, spare_row=rows - 1)
                if not batch_invariant:
                    self.prefills = BatchPrefiller(lm, self.cache, self.hidden, self.stepper, self.prefix_cache,
                                                   spare_row=rows - 1)
            else:
                self.local = lm.new_local_cache(rows, device)

    @property
    def uses_graphs(self) -> bool:
        return self.stepper is not None and self.stepper.use_graphs

    def start_background_compile(self, before_each=None) -> None:
        """Deferred static path: build the compiled step in a background thread (see graphs.py)."""
        if self.stepper is not None:
            self.stepper.compile_in_background(before_each)

    def upgrade_ready(self) -> bool:
        """A deferred static path has its compiled units ready to switch to."""
        return self.stepper is not None and self.stepper.upgrade_ready()

    def upgrade(self) -> None:
        self.stepper.upgrade()

    @property
    def step_kind(self) -> str:
        """What the LM step runs as: "eager" (CPU path), "plain", "compiled" or "compiled+graphs"."""
        if self.stepper is None:
            return "eager"
        kind = "plain" if self.stepper.compile_mode == "off" else "compiled"
        return f"{kind}+graphs" if self.stepper.use_graphs else kind

    # ---- stream lifecycle ----------------------------------------------------------------------

    def begin_stream(self, slot: int, sampling: SamplingParams, seed: int) -> None:
        self.samplers[slot] = StreamSampler(sampling, seed, n_vq=self.n_vq)
        if self.stepper is not None:
            self.stepper.set_sampling(slot, sampling)

    @torch.inference_mode()
    def start_segment(self, slot: int, rows: np.ndarray, prime_codes: np.ndarray | None,
                      prefix_rows: int = 0) -> None:
        """Prefill a prompt into the slot and reset (or prime) its codec stream.

        `prefix_rows` leading rows are shared by every prompt of the same voice; their KV comes from
        the prefix cache when it was computed before (on the static path when the prompt is
        prefilled together with others, see `prefill.BatchPrefiller`).
        """
        sampler = self.samplers[slot]
        assert sampler is not None, f"slot {slot} has no stream"
        # Each text chunk is an independent prompt: repetition history restarts, the RNG goes on.
        sampler.seen.zero_()
        if self.stepper is not None and rows.shape[0] > self.max_context_rows:
            raise ValueError(f"a prompt of {rows.shape[0]} rows exceeds max_context_rows={self.max_context_rows}")
        self.cache.reset(slot)
        if self.prefills is not None:
            # Deferred: the next step prefills every new prompt in one batched pass.
            self.prefills.add(slot, rows, prefix_rows)
        else:
            rows_t = torch.as_tensor(rows, dtype=torch.long, device=self.device)  # [T, 17]
            self.hidden[slot] = self._prefill_with_prefix(rows, rows_t, slot, prefix_rows)
        self.lengths[slot] = int(rows.shape[0])
        if self.stepper is not None:
            self.stepper.reset_slot(slot, int(rows.shape[0]))
            self._codec_resets.add(slot)  # with the other admitted slots', before the next step
        else:
            self.codec_state.reset_row(slot)  # no device sync, unlike reset([slot])
        if prime_codes is not None and len(prime_codes):
            self._apply_slot_resets()
            # Continuation: the decoder must continue the reference audio; its output is dropped.
            # (Many frames at once: the plain eager pass, not the graphs.)
            self._decode_eager([slot], prime_codes[None])
        self._mark_codec_state()

    def _mark_codec_state(self) -> None:
        if self._codec_stream is not None:
            event = torch.cuda.Event()
            event.record()
            self._codec_state_event = event

    def _apply_slot_resets(self) -> None:
        """Static path: write what admitting streams staged (sampling rows, lengths, codec rows)."""
        if self.stepper is None:
            return
        self.stepper.apply_staged()
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

    def _prefill_with_prefix(self, rows: np.ndarray, rows_t: torch.Tensor, slot: int,
                             prefix_rows: int) -> torch.Tensor:
        if self.prefix_cache is None or not 0 < prefix_rows < rows.shape[0]:
            return self.lm.prefill(rows_t, self.cache, slot)
        key = prefix_key(rows, prefix_rows)
        if not self.prefix_cache.restore(key, self.cache, slot):
            self.lm.prefill(rows_t[:prefix_rows], self.cache, slot)
            self.prefix_cache.store(key, self.cache, slot, prefix_rows)
        return self.lm.prefill(rows_t[prefix_rows:], self.cache, slot, reset=False)

    def replace_models(self, lm, codec) -> None:
        """Eager (CPU) path, no stream running: serve with other weights of the same model (a CPU
        precision mode settled after start). The prompt-prefix cache is emptied: its KV came from
        the old weights. Slot state (KV cache, codec rings) is reset when a stream starts."""
        if self.stepper is not None:
            raise ValueError("only the eager path swaps its models (the static one holds compiled units)")
        if any(sampler is not None for sampler in self.samplers):
            raise RuntimeError("streams are running: models are replaced between requests")
        self.lm, self.codec = lm, codec
        if self.prefix_cache is not None:
            self.prefix_cache = PrefixCache(self.prefix_cache.capacity)

    def flush_prefills(self) -> None:
        """Static path: prefill the prompts admitted since the last step (`prefill.BatchPrefiller`)."""
        if self.prefills is not None:
            self.prefills.flush()

    @torch.inference_mode()
    def warm_prefix(self, rows: np.ndarray) -> bool:
        """Compute and keep the KV of a prompt prefix (all of `rows`) for later requests of the same
        voice; False when there is no prefix cache or it already holds it."""
        if self.prefills is not None:
            return self.prefills.warm(rows)
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
        if self.prefills is not None:
            self.prefills.discard(slot)
        self.samplers[slot] = None
        self.lengths[slot] = 0
        self.cache.reset(slot)
        self._codec_resets.discard(slot)
        self.codec_state.reset_row(slot)  # no device sync, unlike reset([slot])
        self._mark_codec_state()
        if self.stepper is not None:
            self.stepper.reset_slot(slot, 0)

    def context_left(self, slot: int) -> int:
        return self.max_context_rows - self.lengths[slot]

    # ---- batched work --------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self, slots: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """One frame for each slot: stop decision + 16 codes, then the global step for those that go on.

        Returns (is_continue bool [B], codes int64 [B, 16]) on the host.
        """
        return self.collect(self.launch(slots))

    @property
    def can_step_ahead(self) -> bool:
        """`launch` returns before the step has run (static path), so the engine may launch the
        next step before it collects this one."""
        return self.stepper is not None

    @torch.inference_mode()
    def launch(self, slots: Sequence[int]) -> StepTicket:
        """Start one frame for each slot (`step`'s work); on the static path it is queued on the
        device and `collect` waits for it. One more launch may follow before this one is collected:
        it counts this one's frames as made (room and attention length)."""
        slots = list(slots)
        samplers = [self.samplers[s] for s in slots]
        if self.stepper is None:
            return StepTicket(slots, samplers, None, None, self._step_eager(slots, samplers))
        self._apply_slot_resets()
        self.flush_prefills()
        bucket = pick_bucket(max(slots) + 1, self.buckets)
        uniforms = np.stack([sampler.draw_uniforms() for sampler in samplers])  # [B, 1 + K]
        # The stepper's host buffers alternate: at most two launches may be uncollected at once.
        assert len(self._launched) < 2, "collect a launched step before launching a third"
        ahead: dict[int, int] = {}
        for ticket in self._launched:  # a launched step not yet collected may add a row to these slots
            for slot, room in zip(ticket.slots, ticket.has_room):
                ahead[slot] = ahead.get(slot, 0) + int(room)
        has_room = np.array([self.context_left(s) - ahead.get(s, 0) > 0 for s in slots], np.float32)
        needed = max(self.lengths[s] + ahead.get(s, 0) for s in slots) + 1  # columns the global decode must see
        launch = self.stepper.launch(bucket, padded_step_input(slots, uniforms, has_room, bucket), needed)
        ticket = StepTicket(slots, samplers, uniforms, has_room, launch)
        self._launched.append(ticket)
        return ticket

    def collect(self, ticket: StepTicket, keep: Sequence[bool] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The results of a launched step (launches are collected in order): is_continue bool [B] and
        codes int64 [B, 16]. `keep[i]` False drops row i's frame: nothing of it is booked, and its
        uniforms go back to its stream, whose next launched step draws them again (the engine drops
        the step a stream was launched into after its segment had ended, see `stepping.py`)."""
        if self.stepper is None:
            return ticket.launch
        assert self._launched and self._launched[0] is ticket, "launched steps are collected in order"
        out = self.stepper.collect(ticket.launch)[ticket.slots]
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

    def _step_eager(self, slots: list[int], samplers: list[StreamSampler]) -> tuple[np.ndarray, np.ndarray]:
        batch = batch_for_frame(samplers, device=self.device)
        slot_index = torch.as_tensor(slots, dtype=torch.long, device=self.device)
        is_continue, codes = self.lm.generate_frame(self.hidden[slot_index], batch, local=self.local)
        is_continue_host = is_continue.cpu().numpy()
        codes_host = codes.cpu().numpy().astype(np.int64)
        going = [i for i, flag in enumerate(is_continue_host) if flag and self.context_left(slots[i]) > 0]
        if going:
            go_index = torch.as_tensor(going, dtype=torch.long, device=self.device)
            go_slots = slot_index[go_index]
            self.hidden[go_slots] = self.lm.decode(codes[go_index], self.cache, go_slots)
            for i in going:
                samplers[i].observe(codes_host[i])
                self.lengths[slots[i]] += 1
        return is_continue_host.astype(bool), codes_host

    @torch.inference_mode()
    def decode(self, slots: Sequence[int], codes: np.ndarray) -> list[np.ndarray]:
        """Streaming codec decode of n new frames per slot: codes [B, n, 16] -> one pcm float32 array
        [2, 3840n] per slot (on CUDA each its own memory, see `host_copy.HostPcm`).

        Static path: passes of 4/2/1 frames over the bucket's rows (one graph replay each), slots not
        decoding masked. Eager path: the smallest contiguous band of slots that holds them (a view of the state, so no
        copy); slots inside the band that are not decoding are masked and keep their state.
        """
        return self.decode_async(slots, codes).result()

    @torch.inference_mode()
    def decode_async(self, slots: Sequence[int], codes: np.ndarray) -> PendingPcm | ReadyPcm:
        """`decode`, returned before the audio is on the host where the path allows (static path on
        CUDA): `.result()` waits for it. The next decode may be launched first; the results must be
        read in launch order, each exactly once (`host_copy.PinnedRing`)."""
        with self._codec_context():
            if self.stepper is not None:
                slots = list(slots)
                bucket = pick_bucket(max(slots) + 1, self.buckets)
                return self.stepper.decode_async(bucket, slots, np.asarray(codes, dtype=np.int64))
            return ReadyPcm(self._decode_eager(slots, codes))

    @torch.inference_mode()
    def _decode_eager(self, slots: Sequence[int], codes: np.ndarray) -> list[np.ndarray]:
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
        full = (low, high) == (0, self.codec_state.batch_size)
        band = self.codec_state if full else self.codec_state.narrow(low, high)
        pcm = self.codec.decode_step(band_codes, band, active)  # [band, 2, 3840n]
        return self._host_pcm.fetch(pcm[index])

