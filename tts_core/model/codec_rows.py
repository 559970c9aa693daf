"""The CPU runner's batched codec decode: each row's audio independent of the other rows and of
how its frames are split into calls.

What `MossAudioCodec.decode_step` computes, with the products through row-independent linears
(`row_linear.py`) and the attention per row and per frame over the ring slots filled up to that
frame (later frames of the pass are masked), so a pass costs one set of products but rounds as
if each frame were decoded alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .codec import MossAudioCodec, Patch
from .codec_layers import ProjectedTransformer, StageCache, rope_tables, unpatchify
from .row_linear import RowLinear, make_rows_independent, rows_independent


class RowDecoder:
    """Streaming decodes of listed rows of a `CodecDecodeState` with `codec` on the CPU (fp32, or a
    CPU precision mode's decoder), whose fp32 linears are made row-independent in place."""

    def __init__(self, codec: MossAudioCodec):
        self.codec = codec
        make_rows_independent(codec.decoder)
        quantizer = codec.quantizer
        self.codebooks = [q.codebook.weight.float() for q in quantizer.quantizers]
        self.code_proj = [_conv_rows(q.out_proj) for q in quantizer.quantizers]
        self.output_proj = _conv_rows(quantizer.output_proj)

    def rows_independent(self) -> bool:
        """Whether this machine computes each row's products independently (`row_linear`)."""
        return rows_independent(self.codec.decoder) and all(
            rows_independent(layer) for layer in (*self.code_proj, self.output_proj))

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor, state, rows: Sequence[int]) -> torch.Tensor:
        """codes [B, n, 16] long (valid ids) for state rows `rows` -> audio [B, 2, 3840 n]; advances
        those rows' rings (the others are untouched). Passes of at most `state.max_frames_per_pass`."""
        index = torch.as_tensor(list(rows), dtype=torch.long)
        step = state.max_frames_per_pass
        pieces = [self._pass(codes[:, start : start + step], state, index) for start in range(0, codes.shape[1], step)]
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=-1)

    def _pass(self, codes: torch.Tensor, state, index: torch.Tensor) -> torch.Tensor:
        batch, frames, num_codebooks = codes.shape
        total = torch.zeros(batch * frames, self.code_proj[0].out_features)
        flat = codes.reshape(batch * frames, num_codebooks)
        for k in range(num_codebooks):  # summed in codebook order, from zeros, as the quantiser does
            total = total + self.code_proj[k](F.embedding(flat[:, k], self.codebooks[k]))
        h = self.output_proj(total).view(batch, frames, -1)  # [B, n, 768]: time-major
        caches = iter(state.stages)
        for stage in self.codec.decoder:
            if isinstance(stage, Patch):
                h = unpatchify(h, stage.patch_size)
            else:
                h = _stage_rows(stage, h, next(caches), index, frames)
        return h.float().reshape(batch, -1, 2).transpose(1, 2).contiguous()  # [B, 2, S]: even L, odd R


def _conv_rows(conv) -> RowLinear:
    """A 1x1 convolution (`WeightNormConv1d`) as a row-independent linear over time-major rows."""
    return RowLinear(conv.weight[:, :, 0], conv.bias)


def _stage_rows(stage: ProjectedTransformer, x: torch.Tensor, cache: StageCache, rows: torch.Tensor,
                frames: int) -> torch.Tensor:
    """`ProjectedTransformer.step` (CPU trim) for x [B, frames * tokens per frame, C_in] of state
    rows `rows` [B], each row's and each frame's attention alone (see the module doc)."""
    tokens = x.shape[1]
    per_frame = tokens // frames
    spec = stage.spec
    offsets = cache.offsets[rows]  # [B]
    positions = offsets[:, None] + torch.arange(tokens)  # [B, T]
    slots = positions % cache.capacity
    cache.positions[rows[:, None], slots] = positions
    cos, sin = rope_tables(positions, spec.head_dim, spec.max_period)  # [B, 1, T, D/2]
    # Per row and frame: its tokens [start, stop) and the ring slots filled up to it, all it reads.
    spans = [[(j * per_frame, (j + 1) * per_frame, min(cache.capacity, offset + (j + 1) * per_frame))
              for j in range(frames)] for offset in offsets.tolist()]
    mask = _masks(cache, rows, positions, max(keys for row in spans for _, _, keys in row))
    h = stage.input_proj(x)
    for layer, cache_k, cache_v in zip(stage.transformer.layers, cache.keys, cache.values):
        q, k, v = layer.self_attn.qkv(layer.norm1(h), cos, sin)
        cache_k[rows[:, None], :, slots] = k.transpose(1, 2).to(cache_k.dtype)  # [B, T, H, D] into each ring
        cache_v[rows[:, None], :, slots] = v.transpose(1, 2).to(cache_v.dtype)
        attn = torch.cat([
            torch.cat([F.scaled_dot_product_attention(q[i : i + 1, :, start:stop], cache_k[row : row + 1, :, :keys],
                                                      cache_v[row : row + 1, :, :keys],
                                                      attn_mask=mask[i : i + 1, :, start:stop, :keys])
                       for start, stop, keys in row_spans], dim=2)
            for i, (row, row_spans) in enumerate(zip(rows.tolist(), spans))])  # [B, H, T, D]
        h = layer._finish(h, attn)
    cache.offsets[rows] += tokens
    return stage.output_proj(h)


def _masks(cache: StageCache, rows: torch.Tensor, positions: torch.Tensor, keys: int) -> torch.Tensor:
    """Additive masks [B, 1, T, keys] of the first `keys` ring slots each new token of each row sees
    (a frame's queries read the first min(capacity, filled) columns: the other slots are empty
    until the ring wraps, or hold the pass's later frames)."""
    held = cache.positions[rows, :keys]  # [B, keys]
    delta = positions[:, :, None] - held[:, None, :]  # [B, T, keys]
    allowed = (held[:, None, :] >= 0) & (delta >= 0) & (delta < cache.window)
    return torch.zeros(allowed.shape).masked_fill_(~allowed, float("-inf"))[:, None]
