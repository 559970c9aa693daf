"""The graphs the browser engine runs, as thin wrappers around the model's own modules.

No model math is defined here: each wrapper picks tensors and calls what the torch engine calls
(`DecoderStack.forward` with an `Attender`, `lm_step.frame` with a `SamplingBatch` read from
tensors, `MossAudioCodec.decode_pass`). What a wrapper adds is the plumbing ONNX needs: a cache
comes in as inputs, and only what a call adds to it goes out, for the caller to write into the
cache it keeps. So a call's traffic depends on the cache's fixed size, never on how much was said.

- `GlobalGraph` (`lm_global.onnx`): T new rows after the `length` valid rows of a cache of fixed
  capacity C -> the last row's hidden state and the new rows' keys/values. The cache comes per
  layer, keys transposed ([1, nh, D, C]) and values as they are ([1, nh, C, D]), so the
  attention multiplies the inputs as given. Prefill is length = 0; a frame is T = 1.
- `FrameGraph` (`lm_local.onnx`): one whole frame of the local transformer, `lm_step.frame`
  itself: continue/stop and the n_vq codes, with the repetition penalty and greedy or
  top-k/top-p sampling inside. The frame's 1 + n_vq uniforms, the seen mask and the sampling
  parameters are inputs, so the caller's own seeded generator decides the draws.
- `CodecStepGraph` (`codec_decode.onnx`): one streaming decoder pass with the decoder's ring
  state in; out come the audio, the ring slots the pass wrote (and which slots), and the small
  positions/offsets records (`codec_state_specs`).
- `CodecEncodeGraph` (`codec_encode.onnx`): a reference clip -> its codes (voice cloning).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from ..engine.sampler import packed_batch
from ..model import codec_layers
from ..model.codec import CodecDecodeState, MossAudioCodec
from ..model.codec_layers import StageCache
from ..model.kv_cache import LocalKVCache
from ..model.layers import attention_backends
from ..model.lm import MossTTSNanoLM
from ..model.lm_step import frame

# `sampling_params` input: `engine.sampler.param_row`'s layout.
SAMPLING_PARAMS = ("do_sample", "audio_temperature", "audio_kth_index", "audio_top_p", "audio_repetition_penalty",
                   "text_temperature", "text_kth_index", "text_top_p")


class _CacheAttender:
    """Queries of T new rows over the first `length` rows of a fixed-capacity cache and over the new
    rows themselves (causal among them): scores against the cache and against the new keys side by
    side, one softmax, then the two weighted sums. Collects each layer's new keys/values."""

    def __init__(self, keys_t: list[torch.Tensor], values: list[torch.Tensor], length: torch.Tensor):
        self.keys_t, self.values = keys_t, values  # per layer [1, nh, D, C], [1, nh, C, D]
        capacity = values[0].shape[2]
        self.cached = (torch.arange(capacity) < length)[None, :]  # [1, C]: valid cache rows
        self.new_k: list[torch.Tensor] = []
        self.new_v: list[torch.Tensor] = []

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.new_k.append(k[0])
        self.new_v.append(v[0])
        new = q.shape[2]
        q = q * q.shape[-1] ** -0.5
        causal = torch.arange(new)[None, :] <= torch.arange(new)[:, None]  # [T, T]
        visible = torch.cat([self.cached.expand(new, -1), causal], dim=1)  # [T, C + T]
        scores = torch.cat([torch.matmul(q, self.keys_t[layer]), torch.matmul(q, k.transpose(-1, -2))], dim=-1)
        weights = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        capacity = self.values[layer].shape[2]
        return (torch.matmul(weights[..., :capacity], self.values[layer])
                + torch.matmul(weights[..., capacity:], v))


class GlobalGraph(nn.Module):
    """rows [1, T, 17] int64, length [1] int64 (valid cache rows), keys_i [1, nh, D, C] and values_i
    [1, nh, C, D] per layer i -> hidden [1, H] (post-ln_f, last row), new_keys/new_values
    [L, nh, T, D] (the caller writes them at rows length..length + T - 1). `max_rows` bounds
    length + T (the RoPE table's length)."""

    def __init__(self, lm: MossTTSNanoLM, max_rows: int):
        super().__init__()
        self.lm = lm
        cos, sin = lm.rope.get(max_rows, torch.device("cpu"))  # the very table the torch engine reads
        self.register_buffer("cos", cos[:max_rows].clone(), persistent=False)
        self.register_buffer("sin", sin[:max_rows].clone(), persistent=False)

    def forward(self, rows: torch.Tensor, length: torch.Tensor, *cache: torch.Tensor):
        layers = len(cache) // 2
        x = self.lm.embed_rows(rows, validate=False)  # [1, T, H]
        positions = length + torch.arange(rows.shape[1])  # [T]
        cos = self.cos[positions].to(x.dtype)[None, :, None, None]  # [1, T, 1, 1, D/2]
        sin = self.sin[positions].to(x.dtype)[None, :, None, None]
        attender = _CacheAttender(list(cache[:layers]), list(cache[layers:]), length)
        with attention_backends():
            h = self.lm.transformer(x, cos, sin, attender)
        return h[:, -1], torch.stack(attender.new_k), torch.stack(attender.new_v)


class FrameGraph(nn.Module):
    """hidden [1, H] (the global state), seen [1, n_vq, V] bool (codes emitted so far, per
    codebook), uniforms [1, 1 + n_vq] float32 in [0, 1) (the stop decision's, then one per
    codebook), sampling_params [1, 8] float32 (`SAMPLING_PARAMS`) -> go_on [1] bool, codes
    [1, n_vq] int64 (meaningless when go_on is false)."""

    def __init__(self, lm: MossTTSNanoLM):
        super().__init__()
        sizes = set(lm.config.audio_codebook_sizes)
        if len(sizes) != 1:
            raise ValueError(f"the ONNX frame graph needs codebooks of one size, got {sorted(sizes)}")
        self.lm = lm
        self.vocab = sizes.pop()
        # The scratch state's constants (continue token, stop rows, RoPE, positions) become graph
        # constants; its keys/values are made fresh in each call.
        self.local = lm.new_local_cache(1, torch.device("cpu"))

    def forward(self, hidden: torch.Tensor, seen: torch.Tensor, uniforms: torch.Tensor, sampling_params: torch.Tensor):
        local = LocalKVCache.__new__(LocalKVCache)
        local.__dict__.update(self.local.__dict__)
        local.k = [torch.zeros_like(k) for k in self.local.k]
        local.v = [torch.zeros_like(v) for v in self.local.v]
        sampling = packed_batch(sampling_params, uniforms, seen, self.vocab)
        go_on, codes = frame(self.lm, hidden, sampling, local)
        return go_on, codes


@dataclass(frozen=True)
class StateSpec:
    """One tensor of the codec's streaming state: ONNX input `name`. A ring (`ring` names its
    stage's slots output) comes back as `name + "_new"`, the values at those slots along axis 2;
    any other tensor comes back whole as `name + "_out"`."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # "float32" or "int64"
    fill: float  # initial value of every element
    ring: str | None = None  # output holding the slots written (axis 2), for a ring tensor


def codec_state_specs(state: CodecDecodeState) -> list[StateSpec]:
    """The flattened layout of a one-row `CodecDecodeState`: per stage its keys, values (per layer),
    positions and offsets."""
    specs: list[StateSpec] = []
    for index, stage in enumerate(state.stages):
        slots = f"s{index}_slots"
        for layer, tensor in enumerate(stage.keys):
            specs.append(StateSpec(f"s{index}_k{layer}", tuple(tensor.shape), "float32", 0.0, slots))
        for layer, tensor in enumerate(stage.values):
            specs.append(StateSpec(f"s{index}_v{layer}", tuple(tensor.shape), "float32", 0.0, slots))
        specs.append(StateSpec(f"s{index}_positions", tuple(stage.positions.shape), "int64", -1.0))
        specs.append(StateSpec(f"s{index}_offsets", tuple(stage.offsets.shape), "int64", 0.0))
    return specs


def codec_output_names(specs: list[StateSpec]) -> list[str]:
    """`CodecStepGraph`'s outputs in order: audio, then per stage its slots and its state's returns."""
    names = ["audio"]
    for spec in specs:
        if spec.ring and spec.ring not in names:
            names.append(spec.ring)
        names.append(f"{spec.name}_new" if spec.ring else f"{spec.name}_out")
    return names


def flatten_state(state: CodecDecodeState) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for stage in state.stages:
        out += [*stage.keys, *stage.values, stage.positions, stage.offsets]
    return out


def unflatten_state(template: CodecDecodeState, flat: list[torch.Tensor]) -> CodecDecodeState:
    """A state shaped like `template` holding `flat` (in `flatten_state` order)."""
    stages, cursor = [], 0
    for stage in template.stages:
        layers = len(stage.keys)
        keys = flat[cursor : cursor + layers]
        values = flat[cursor + layers : cursor + 2 * layers]
        positions, offsets = flat[cursor + 2 * layers], flat[cursor + 2 * layers + 1]
        cursor += 2 * layers + 2
        stages.append(StageCache(keys=list(keys), values=list(values), positions=positions, offsets=offsets,
                                 window=stage.window))
    return CodecDecodeState(stages, template.tokens_per_frame, template.max_frames_per_pass)


class _SlotWrite(codec_layers._RingWrite):
    """The ring write of `ProjectedTransformer.step` for one stream row that advances, as a copy of
    the n new entries into their slots along the ring axis: the values `scatter_` writes, which
    ONNX would otherwise express element by element (ScatterElements, a third of the pass)."""

    def store(self, cache: torch.Tensor, new: torch.Tensor) -> None:
        heads, slots = cache.shape[1], self.index[0, 0, :, 0]
        rows = torch.zeros(heads, slots.shape[0], dtype=torch.long)
        cache.index_put_((rows, torch.arange(heads)[:, None] + rows, slots[None, :] + rows), new[0].to(cache.dtype))


@contextlib.contextmanager
def _slot_writes() -> Iterator[None]:
    original = codec_layers._RingWrite
    codec_layers._RingWrite = _SlotWrite
    try:
        yield
    finally:
        codec_layers._RingWrite = original


class CodecStepGraph(nn.Module):
    """codes [1, 16, frames] int64 and the flattened state -> audio [1, 2, 3840 frames], then per
    stage the ring slots this pass wrote ([n] int64), the keys/values at those slots per layer
    ([1, nh, n, D]) and the stage's positions/offsets after the pass (see `codec_state_specs`)."""

    def __init__(self, codec: MossAudioCodec, frames: int = 1):
        super().__init__()
        self.codec = codec
        self.frames = frames
        self.template = codec.new_decode_state(1, torch.device("cpu"), max_frames_per_pass=frames)

    def initial_state(self) -> list[torch.Tensor]:
        return [t.clone() for t in flatten_state(self.template)]

    def forward(self, codes: torch.Tensor, *flat: torch.Tensor):
        state = unflatten_state(self.template, [t.clone() for t in flat])  # the pass updates it in place
        # The slots `ProjectedTransformer.step` writes: the next n positions, modulo the ring.
        slots = [((stage.offsets[0] + torch.arange(n * self.frames)) % stage.capacity)
                 for stage, n in zip(state.stages, self.template.tokens_per_frame)]
        with _slot_writes():  # one row, every row advancing: the plain slot copy is the same write
            audio = self.codec.decode_pass(codes, state, None, trim=False)
        out: list[torch.Tensor] = [audio]
        for stage, written in zip(state.stages, slots):
            out.append(written)
            out += [t.index_select(2, written) for t in (*stage.keys, *stage.values)]
            out += [stage.positions, stage.offsets]
        return tuple(out)


class CodecEncodeGraph(nn.Module):
    """wav [1, 2, samples] fp32 at 48 kHz (a fixed, padded length), length [1] int64 (real samples)
    -> codes [1, 16, samples / 3840] int64 and frames [1] (valid frames = floor(length / 3840)),
    as `MossAudioCodec.encode` gives them (the offline encoder, then the residual LFQ)."""

    def __init__(self, codec: MossAudioCodec):
        super().__init__()
        self.codec = codec

    def forward(self, wav: torch.Tensor, length: torch.Tensor):
        latents, frames = self.codec.encode_pass(wav, length)
        return self.codec.quantizer.encode(latents, frames), frames
