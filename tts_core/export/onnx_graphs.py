"""The three graphs the browser engine runs, as thin wrappers around the model's own modules.

No math is defined here: each wrapper picks tensors and calls what the torch engine calls
(`DecoderStack.forward` with an `Attender`, `lm_step.local_position`, `MossAudioCodec.decode_pass`).
What a wrapper adds is the plumbing ONNX needs: caches come in as inputs and go out as outputs
instead of being mutated in place, and host-side choices become index inputs.

- `GlobalGraph` (`lm_global.onnx`): T new rows after S cached ones -> the last row's hidden state
  and the cache grown to S + T. The prompt prefill is S = 0; a frame is T = 1 (the row
  [assistant slot, c_0..c_15]). One graph for both, so the big global weights ship once.
- `LocalGraph` (`lm_local.onnx`): one local-transformer position, its input chosen from the
  position (global hidden, the continue token, or the previous code's embedding), and the logits
  the caller samples from: the stop pair [continue, stop] and the codebook head of that position.
  Sampling (penalty, temperature, top-k/p, the RNG) stays outside, in the caller's own code.
- `CodecStepGraph` (`codec_decode.onnx`): one streaming decoder pass of `frames` frames with the
  decoder's ring state in and out (flattened: see `codec_state_specs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..model.codec import CodecDecodeState, MossAudioCodec
from ..model.codec_layers import StageCache
from ..model.layers import attention_backends
from ..model.lm import MossTTSNanoLM
from ..model.lm_step import local_position


class _ConcatAttender:
    """Keys/values of the T new rows appended to the S cached ones; queries see every cached row and
    the new rows up to their own (causal among the new rows). Collects the grown caches."""

    def __init__(self, past_k: torch.Tensor, past_v: torch.Tensor):
        self.past_k, self.past_v = past_k, past_v  # [L, B, nh, S, D]
        self.present_k: list[torch.Tensor] = []
        self.present_v: list[torch.Tensor] = []

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        keys = torch.cat([self.past_k[layer], k], dim=2)  # [B, nh, S + T, D]
        values = torch.cat([self.past_v[layer], v], dim=2)
        self.present_k.append(keys)
        self.present_v.append(values)
        new, total = q.shape[2], keys.shape[2]
        # Query i sits at position S + i and sees keys 0..S + i (the fresh-slot prefill's causal mask
        # when S = 0, no mask at all in effect when T = 1).
        query_pos = torch.arange(new, device=q.device)[:, None] + (total - new)
        visible = torch.arange(total, device=q.device)[None, :] <= query_pos  # [T, S + T]
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=visible)


class GlobalGraph(nn.Module):
    """rows [1, T, 17] int64, past_k/past_v [L, 1, nh, S, D] -> hidden [1, H] (post-ln_f, last row),
    present_k/present_v [L, 1, nh, S + T, D]. `max_rows` bounds S + T (the RoPE table's length)."""

    def __init__(self, lm: MossTTSNanoLM, max_rows: int):
        super().__init__()
        self.lm = lm
        cos, sin = lm.rope.get(max_rows, torch.device("cpu"))  # the very table the torch engine reads
        self.register_buffer("cos", cos[:max_rows].clone(), persistent=False)
        self.register_buffer("sin", sin[:max_rows].clone(), persistent=False)

    def forward(self, rows: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor):
        x = self.lm.embed_rows(rows, validate=False)  # [1, T, H]
        start, new = past_k.shape[3], rows.shape[1]
        cos = self.cos[start : start + new].to(x.dtype)[None, :, None, None]  # [1, T, 1, 1, D/2]
        sin = self.sin[start : start + new].to(x.dtype)[None, :, None, None]
        attender = _ConcatAttender(past_k, past_v)
        with attention_backends():
            h = self.lm.transformer(x, cos, sin, attender)
        return h[:, -1], torch.stack(attender.present_k), torch.stack(attender.present_v)


class LocalGraph(nn.Module):
    """One local position p for a frame: hidden [B, H] (the global state), prev_code [B] int64 (the
    code drawn at position p - 1; ignored for p < 2), position [1] int64, keys/values
    [L_local, B, nh, P, D] -> stop_logits [B, 2] (meaningful at p = 0), audio_logits [B, V]
    (codebook p - 1's head; meaningful at p >= 1), keys/values out."""

    def __init__(self, lm: MossTTSNanoLM):
        super().__init__()
        sizes = set(lm.config.audio_codebook_sizes)
        if len(sizes) != 1:
            raise ValueError(f"the ONNX local graph needs codebooks of one size, got {sorted(sizes)}")
        self.lm = lm
        local = lm.new_local_cache(1, torch.device("cpu"))
        self.register_buffer("first_input", local.first_input.clone(), persistent=False)  # [1, H]
        self.register_buffer("stop_weight", local.stop_weight.clone(), persistent=False)  # [2, H]
        self.register_buffer("cos", torch.cat(local.cos), persistent=False)  # [P, D/2]
        self.register_buffer("sin", torch.cat(local.sin), persistent=False)
        self.register_buffer("key_pos", local.key_pos.clone(), persistent=False)
        # Heads are tied to the code tables (docs/spec/LM.md §2.2): one stack serves both lookups.
        self.register_buffer("tables", torch.stack([e.weight for e in lm.audio_embeddings]), persistent=False)

    def forward(self, hidden: torch.Tensor, prev_code: torch.Tensor, position: torch.Tensor,
                keys: torch.Tensor, values: torch.Tensor):
        n_vq = self.tables.shape[0]
        table_in = self.tables[(position - 2).clamp(0, n_vq - 1)][0]  # [V, H]
        code_input = F.embedding(prev_code, table_in)  # what `lm_step.pick` feeds the next position
        first = self.first_input.expand(hidden.shape[0], -1)
        x = torch.where(position == 0, hidden, torch.where(position == 1, first, code_input))
        key_list = [k.clone() for k in keys.unbind(0)]  # local_position writes its cache in place
        value_list = [v.clone() for v in values.unbind(0)]
        with attention_backends():
            h = local_position(self.lm.local_transformer, x, position, self.cos[position], self.sin[position],
                               key_list, value_list, self.key_pos)
        head = self.tables[(position - 1).clamp(0, n_vq - 1)][0]  # [V, H]
        stop = F.linear(h, self.stop_weight).float()
        return stop, F.linear(h, head).float(), torch.stack(key_list), torch.stack(value_list)


@dataclass(frozen=True)
class StateSpec:
    """One tensor of the codec's streaming state: ONNX input `name`, output `name + "_out"`."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # "float32" or "int64"
    fill: float  # initial value of every element


def codec_state_specs(state: CodecDecodeState) -> list[StateSpec]:
    """The flattened layout of a one-row `CodecDecodeState`: per stage its keys, values (per layer),
    positions and offsets."""
    specs: list[StateSpec] = []
    for index, stage in enumerate(state.stages):
        for layer, tensor in enumerate(stage.keys):
            specs.append(StateSpec(f"s{index}_k{layer}", tuple(tensor.shape), "float32", 0.0))
        for layer, tensor in enumerate(stage.values):
            specs.append(StateSpec(f"s{index}_v{layer}", tuple(tensor.shape), "float32", 0.0))
        specs.append(StateSpec(f"s{index}_positions", tuple(stage.positions.shape), "int64", -1.0))
        specs.append(StateSpec(f"s{index}_offsets", tuple(stage.offsets.shape), "int64", 0.0))
    return specs


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


class CodecStepGraph(nn.Module):
    """codes [1, 16, frames] int64 and the flattened state -> audio [1, 2, 3840 frames] and the state
    after the pass."""

    def __init__(self, codec: MossAudioCodec, frames: int = 1):
        super().__init__()
        self.codec = codec
        self.frames = frames
        self.template = codec.new_decode_state(1, torch.device("cpu"), max_frames_per_pass=frames)

    def initial_state(self) -> list[torch.Tensor]:
        return [t.clone() for t in flatten_state(self.template)]

    def forward(self, codes: torch.Tensor, *flat: torch.Tensor):
        state = unflatten_state(self.template, [t.clone() for t in flat])  # the pass updates it in place
        audio = self.codec.decode_pass(codes, state, None, trim=False)
        return (audio, *flatten_state(state))


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
