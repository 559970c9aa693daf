"""The LM step over static tensors: what a CUDA graph captures, as a plain function.

`StaticTensors` holds every tensor one step reads or writes at a fixed address. `step_static` runs the
model's own frame step (`model/lm_step.py`) for rows 0..B-1 of it, updating the repetition history,
with the global decode over the first `length` cache columns. It reads no host value, so it can be
captured once per (batch bucket, length bucket) and replayed, or simply run eagerly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields

import numpy as np
import torch

from ...config import SamplingParams
from ...model import lm_step
from ...model.kv_cache import KVCache, LocalKVCache, StaticDecodeAttender
from ..sampler import packed_batch, param_row
from .codec_passes import RING_KERNEL_ROWS, codec_attention

COMPILE_MODES = ("inductor", "off")


def compile_mode(device: torch.device, requested: str | None = None) -> str:
    """How the LM step's units run: "inductor" (torch.compile; the default on CUDA) or "off" (plain
    functions; the default elsewhere: the CPU path never compiles)."""
    if requested is not None:
        if requested not in COMPILE_MODES:
            raise ValueError(f"compile mode must be one of {', '.join(COMPILE_MODES)}, got {requested!r}")
        return requested
    return "inductor" if device.type == "cuda" else "off"


@dataclass(slots=True)
class Launched:
    """A launched LM step until it is collected: where its output lands on the host, the event that
    says it has, and what the runner drew for its rows."""

    out: torch.Tensor  # pinned [bucket, 1 + K] long
    done: torch.cuda.Event | None  # None off CUDA (the step ran synchronously)
    slots: list[int] = field(default_factory=list)
    samplers: list = field(default_factory=list)  # the rows' `sampler.StreamSampler`s
    uniforms: np.ndarray | None = None  # [B, 1 + K] drawn for it
    has_room: np.ndarray | None = None  # [B] whether each row may add a KV row


def graphs_enabled(device: torch.device, enforce_eager: bool) -> bool:
    """CUDA graphs are used on CUDA unless `enforce_eager` (the one eager switch)."""
    return device.type == "cuda" and not enforce_eager


@dataclass(eq=False)
class StaticTensors:
    """Static tensors of the LM step for `rows` stream rows (see the module doc)."""

    cache: KVCache  # its last column is scratch: rows that do not advance write there
    hidden: torch.Tensor  # [R, H] post-ln_f state of each row's last KV row
    local: LocalKVCache
    params: torch.Tensor  # [R, 8] sampling parameters, `sampler.param_row` layout
    seen: torch.Tensor  # [R, K, V] bool repetition history
    lengths: torch.Tensor  # [R] long: device mirror of the KV lengths
    step_in: torch.Tensor  # [R, 1 + K + 1] float: uniforms | step flag
    step_out: torch.Tensor  # [R, 1 + K] long: continue flag | codes
    key_pos: torch.Tensor  # [L] column index
    vocab: int

    @classmethod
    def allocate(cls, lm, cache: KVCache, hidden: torch.Tensor) -> StaticTensors:
        c, rows, device = lm.config, cache.num_slots, hidden.device
        vocab = max(c.audio_codebook_sizes)
        return cls(
            cache=cache, hidden=hidden, local=lm.new_local_cache(rows, device),
            params=torch.tensor([param_row(SamplingParams.greedy(), vocab)] * rows, device=device),
            seen=torch.zeros(rows, c.n_vq, vocab, dtype=torch.bool, device=device),
            lengths=torch.zeros(rows, dtype=torch.long, device=device),
            step_in=torch.zeros(rows, 1 + c.n_vq + 1, device=device),
            step_out=torch.zeros(rows, 1 + c.n_vq, dtype=torch.long, device=device),
            key_pos=torch.arange(cache.max_len, device=device), vocab=vocab,
        )

    @property
    def rows(self) -> int:
        return self.hidden.shape[0]

    @property
    def scratch_col(self) -> int:
        return self.cache.max_len - 1


def _book(is_stepped: torch.Tensor, is_continue: torch.Tensor, lengths: torch.Tensor, key_pos: torch.Tensor,
          scratch_col: int, mask_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """go [B], write columns [B] and the additive key mask [B, 1, 1, L] of the global step: rows that
    go on write at their length, the others at the scratch column; keys past a row's length are hidden."""
    go = is_stepped & is_continue
    write_pos = torch.where(go, lengths, torch.full_like(lengths, scratch_col))
    visible = key_pos[None, :] <= lengths[:, None]  # [B, L]
    key_mask = torch.zeros(visible.shape, dtype=mask_dtype, device=lengths.device)
    return go, write_pos, key_mask.masked_fill(~visible, float("-inf"))[:, None, None, :]


def step_static(lm, state: StaticTensors, bucket: int, length: int, units: lm_step.StepUnits) -> None:
    """One frame for rows 0..bucket-1 (rows whose step flag is 0 keep their state); the global
    decode attends over cache columns [0, length), so every stepped row must have length < `length`."""
    b, s = bucket, state
    step_in = s.step_in[:b]
    sampling = packed_batch(s.params[:b], step_in[:, :-1], s.seen[:b], s.vocab)
    hidden, seen, lengths = s.hidden[:b], s.seen[:b], s.lengths[:b]
    is_continue, codes = lm_step.frame(lm, hidden, sampling, s.local, units)  # [B], [B, K]
    go, write_pos, key_mask = _book(step_in[:, -1] > 0.5, is_continue, lengths, s.key_pos[:length],
                                    s.scratch_col, s.cache.dtype)
    # Repetition history: seen[b, k, codes[b, k]] |= go[b].
    index = codes[:, :, None]  # [B, K, 1]
    seen.scatter_(2, index, seen.gather(2, index) | go[:, None, None])
    attender = StaticDecodeAttender(s.cache, write_pos, key_mask, length)
    new_hidden = lm_step.global_step(lm, codes, lengths, attender, s.cache.max_len, units)
    hidden.copy_(torch.where(go[:, None], new_hidden, hidden))
    lengths.add_(go.long())
    out = s.step_out[:b]
    out[:, 0] = is_continue.long()
    out[:, 1:] = codes


class CompileCancelled(Exception):
    """Raised by a background compile's gate when the engine is shutting down."""


def _gated(units: lm_step.StepUnits, before_each: Callable[[], None]) -> lm_step.StepUnits:
    """`units` with `before_each()` called ahead of every unit call (each call may compile)."""

    def wrap(unit):
        def call(*args):
            before_each()
            return unit(*args)

        return call

    return lm_step.StepUnits(**{f.name: wrap(getattr(units, f.name)) for f in fields(units)})


@torch.inference_mode()
def compile_on_scratch(lm, units: lm_step.StepUnits, buckets: list[int], rope_len: int,
                       device: torch.device, before_each: Callable[[], None] | None = None) -> None:
    """Run `units` once per batch bucket on throw-away tensors, so torch.compile builds every
    variant without touching a live state (safe in a background thread while the engine serves).
    `before_each` runs ahead of every unit call: a background compile waits there for the engine to
    be idle, because tracing holds the GIL and would starve a stream being served."""
    if before_each is not None:
        units = _gated(units, before_each)
    c = lm.config
    rows = max(buckets)
    cache = lm.new_cache(rows, 16, device=device)
    state = StaticTensors.allocate(lm, cache, torch.zeros(rows, c.hidden_size, device=device, dtype=lm.dtype))
    lm.rope.get(rope_len, device)  # the embed unit reads the full table: same shape as the live one
    for bucket in sorted(buckets, reverse=True):
        b = bucket
        sampling = packed_batch(state.params[:b], state.step_in[:b, :-1], state.seen[:b], state.vocab)
        _, codes = lm_step.frame(lm, state.hidden[:b], sampling, state.local, units)
        attender = StaticDecodeAttender(cache, torch.full((b,), cache.max_len - 1, device=device),
                                        torch.zeros(b, 1, 1, cache.max_len, dtype=cache.dtype, device=device))
        lm_step.global_step(lm, codes, state.lengths[:b], attender, rope_len, units)
    # The prefill units: one graph for a single prompt, one for several (any length, any cache size),
    # and the same for prompts after a cached prefix.
    for count in sorted({1, min(2, rows)}):
        prompts = torch.zeros(count, 8, c.row_width, dtype=torch.long)
        lm.prefill_many(prompts, [8] * count, cache, list(range(count)), units)
        lm.prefill_many(prompts[:, :4], [4] * count, cache, list(range(count)), units, start=8)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_on_scratch(lm, codec, buckets: list[int], rope_len: int, pass_frames: list[int],
                     device: torch.device, before_each: Callable[[], None] | None = None) -> None:
    """Run the plain step of every batch bucket and a codec pass of each size on throw-away tensors,
    so Triton builds the fused kernels' variants without touching a live state (a deferred start's
    background thread does this while the engine serves on the plain ops)."""
    compile_on_scratch(lm, lm_step.EAGER, buckets, rope_len, device, before_each)
    rows = min(buckets[-1], RING_KERNEL_ROWS)  # the ring kernel serves from RING_KERNEL_ROWS rows on
    state = codec.new_decode_state(rows, device=device)
    inactive = torch.zeros(rows, dtype=torch.bool, device=device)
    for frames in pass_frames:
        if before_each is not None:
            before_each()
        codes = torch.zeros(rows, lm.config.n_vq, frames, dtype=torch.long, device=device)
        codec.decode_frames_static(codes, state, inactive, codec_attention(rows, frames, codec.compute_dtype == torch.float32))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
