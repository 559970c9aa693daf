"""Building blocks of the codec's causal transformer stages (docs/spec/CODEC.md §3.2, §3.3, §4.4).

Tensors inside a stage are time-major `[B, T, C]`; patch/unpatch work in that layout directly, so the
reference's `(B, C, T)` conv layout never has to be materialised. Module and parameter names follow the
reference state_dict (`input_proj`, `transformer.layers.{i}.self_attn.in_proj`, `ffn.0`, ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import ring_kernel
from .codec_config import TransformerSpec

# Offline attention runs over blocks of queries, each against keys [q0 - W + 1, q1) only: memory
# O(block x (block + window)) instead of O(N^2), the same result as the reference's full mask.
QUERY_BLOCK = 256


# How a streaming pass computes its ring attention: PyTorch's fused SDPA kernel under an additive mask,
# two GEMMs around a softmax under the same mask, or the Triton kernel of `ring_kernel.py` (fp32 on
# CUDA), which reads visibility from the ring's positions and needs no mask.
ATTENTION_MODES = ("sdpa", "gemm", "ring_kernel")


def ring_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                   explicit: bool = False) -> torch.Tensor:
    """Attention of a streaming step's queries [B, H, n, D] over ring keys/values [B, H, K, D] under an
    additive mask [B, 1, n, K]. `explicit`: two batched GEMMs around a softmax instead of the fused
    SDPA kernel, which walks the keys serially per (row, head) and so only wins with many rows (the
    engine picks per batch size: `engine/cuda/codec_passes.py`)."""
    if not explicit:
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
    scores = torch.matmul(q, keys.transpose(-1, -2)).float() * (q.shape[-1] ** -0.5) + mask
    return torch.matmul(torch.softmax(scores, dim=-1).to(values.dtype), values)


def patchify(x: torch.Tensor, patch: int) -> torch.Tensor:
    """[B, N, D] -> [B, N/patch, D*patch] with out[b, n, d*patch + j] = x[b, n*patch + j, d]
    (docs/spec/CODEC.md §3.2)."""
    batch, length, dim = x.shape
    return x.reshape(batch, length // patch, patch, dim).transpose(2, 3).reshape(batch, length // patch, -1)


def unpatchify(x: torch.Tensor, patch: int) -> torch.Tensor:
    """[B, N, D*patch] -> [B, N*patch, D], the exact inverse of `patchify` (docs/spec/CODEC.md §4.2)."""
    batch, length, dim = x.shape
    return x.reshape(batch, length, dim // patch, patch).transpose(2, 3).reshape(batch, length * patch, -1)


def rope_tables(
    positions: torch.Tensor, head_dim: int, max_period: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin of the RoPE angles for absolute `positions` [..., T] -> [..., 1, T, head_dim/2], fp32."""
    pairs = torch.arange(head_dim // 2, device=positions.device, dtype=torch.float32)
    freqs = torch.exp(pairs * (-math.log(max_period) * 2.0 / head_dim))  # theta_j = period^(-2j/D)
    angles = positions.to(torch.float32)[..., None] * freqs  # [..., T, D/2]
    return angles.cos().unsqueeze(-3), angles.sin().unsqueeze(-3)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs (2j, 2j+1) of x [..., T, D] (GPT-J layout), in fp32 then cast back."""
    pairs = x.float().unflatten(-1, (-1, 2))  # [..., T, D/2, 2]
    a, b = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)
    return rotated.flatten(-2).to(x.dtype)


class LayerScale(nn.Module):
    def __init__(self, dim: int, init: float):
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class SelfAttention(nn.Module):
    """Fused-QKV multi-head attention; rows 0..d-1 of in_proj are Q, then K, then V
    (docs/spec/CODEC.md §3.3)."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def qkv(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, d] -> RoPE'd q, k and plain v, each [B, H, T, D]."""
        batch, length, _ = x.shape
        qkv = (
            self.in_proj(x).view(batch, length, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        )  # [3, B, H, T, D]
        q, k = apply_rope(qkv[:2], cos, sin).unbind(0)  # q and k rotated in one pass
        return q, k, qkv[2]

    def merge(self, attn: torch.Tensor) -> torch.Tensor:
        batch, _, length, _ = attn.shape
        return self.out_proj(attn.transpose(1, 2).reshape(batch, length, -1))  # [B, T, H*D]


class TransformerLayer(nn.Module):
    def __init__(self, spec: TransformerSpec):
        super().__init__()
        d = spec.d_model
        self.self_attn = SelfAttention(d, spec.num_heads)
        self.norm1 = nn.LayerNorm(d, eps=1e-5)
        self.norm2 = nn.LayerNorm(d, eps=1e-5)
        self.ffn = nn.Sequential(
            nn.Linear(d, spec.dim_feedforward, bias=False),
            nn.GELU(),
            nn.Linear(spec.dim_feedforward, d, bias=False),
        )
        self.layer_scale_1 = LayerScale(d, spec.layer_scale_init)
        self.layer_scale_2 = LayerScale(d, spec.layer_scale_init)

    def _finish(self, h: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        h = h + self.layer_scale_1(self.self_attn.merge(attn)).to(h.dtype)
        return h + self.layer_scale_2(self.ffn(self.norm2(h))).to(h.dtype)

    def forward_offline(
        self,
        h: torch.Tensor,
        blocks: list[tuple[int, int, int, torch.Tensor]],
        cos: torch.Tensor,
        sin: torch.Tensor,
        query_valid: torch.Tensor | None,
    ) -> torch.Tensor:
        q, k, v = self.self_attn.qkv(self.norm1(h), cos, sin)
        if len(blocks) == 1:
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=blocks[0][3])
        else:
            attn = torch.cat(
                [
                    F.scaled_dot_product_attention(
                        q[:, :, q0:q1], k[:, :, k0:q1], v[:, :, k0:q1], attn_mask=mask
                    )
                    for q0, q1, k0, mask in blocks
                ],
                dim=2,
            )
        if query_valid is not None:
            # where(), not a multiply: fully masked rows come out of SDPA as NaN and must not leak.
            attn = torch.where(query_valid, attn, torch.zeros((), dtype=attn.dtype, device=attn.device))
        return self._finish(h, attn)

    def forward_step(
        self,
        h: torch.Tensor,
        cache_k: torch.Tensor,
        cache_v: torch.Tensor,
        write: _RingWrite,
        visible: torch.Tensor | RingPositions,
        cos: torch.Tensor,
        sin: torch.Tensor,
        attention: str = "sdpa",
    ) -> torch.Tensor:
        """`visible`: for "sdpa"/"gemm" an additive mask [B, 1, n, K] over the first K ring slots
        (K <= capacity: see `step`'s trim); for "ring_kernel" the positions it is computed from."""
        q, k, v = self.self_attn.qkv(self.norm1(h), cos, sin)
        write.store(cache_k, k)
        write.store(cache_v, v)
        if isinstance(visible, RingPositions):
            attn = ring_kernel.ring_attention(q, cache_k, cache_v, visible.keys, visible.queries, visible.window)
        else:
            keys = visible.shape[-1]
            attn = ring_attention(q, cache_k[:, :, :keys], cache_v[:, :, :keys], visible, attention == "gemm")
        return self._finish(h, attn)


class Transformer(nn.Module):
    def __init__(self, spec: TransformerSpec):
        super().__init__()
        self.layers = nn.ModuleList(TransformerLayer(spec) for _ in range(spec.num_layers))


@dataclass(frozen=True, slots=True)
class RingPositions:
    """What `ring_kernel.ring_attention` computes visibility from, shared by a stage's layers."""

    keys: torch.Tensor  # [B, capacity] long: position held by each ring slot (-1: empty)
    queries: torch.Tensor  # [B, n] long: positions of this step's new tokens
    window: int


@dataclass(slots=True)
class _RingWrite:
    """Where this step's n new tokens go in the ring, per row; inactive rows keep their old entries."""

    index: torch.Tensor  # [B, H, n, D] ring slot of each new token, expanded for scatter
    active: torch.Tensor | None  # [B, 1, 1, 1] bool, None = every row advances

    def store(self, cache: torch.Tensor, new: torch.Tensor) -> None:
        new = new.to(cache.dtype)
        if self.active is not None:
            new = torch.where(self.active, new, cache.gather(2, self.index))
        cache.scatter_(2, self.index, new)


@dataclass(slots=True)
class StageCache:
    """Sliding-window attention state of one stage for B stream rows: a ring of `capacity` slots per
    layer of post-RoPE keys/values, and the absolute position each slot holds (-1 = empty), shared by
    the layers. capacity = window + (max tokens per call) - 1, so a call never overwrites a key its
    first query needs."""

    keys: list[torch.Tensor]  # per layer [B, H, capacity, D]
    values: list[torch.Tensor]  # per layer [B, H, capacity, D]
    positions: torch.Tensor  # [B, capacity] long
    offsets: torch.Tensor  # [B] long: absolute position of the next token
    window: int

    @classmethod
    def empty(
        cls, spec: TransformerSpec, batch: int, capacity: int, device: torch.device, dtype: torch.dtype
    ) -> StageCache:
        shape = (batch, spec.num_heads, capacity, spec.head_dim)
        return cls(
            keys=[torch.zeros(shape, device=device, dtype=dtype) for _ in range(spec.num_layers)],
            values=[torch.zeros(shape, device=device, dtype=dtype) for _ in range(spec.num_layers)],
            positions=torch.full((batch, capacity), -1, device=device, dtype=torch.long),
            offsets=torch.zeros(batch, device=device, dtype=torch.long),
            window=spec.context_tokens,
        )

    @property
    def capacity(self) -> int:
        return self.positions.shape[1]

    def reset(self, rows: torch.Tensor) -> None:
        """Forget rows (bool [B]): empty slots, offset 0, and no trace of the previous stream's KV."""
        self.positions[rows] = -1
        self.offsets[rows] = 0
        for tensor in (*self.keys, *self.values):
            tensor[rows] = 0


class ProjectedTransformer(nn.Module):
    """input_proj -> causal windowed transformer (RoPE, pre-LN, LayerScale) -> output_proj."""

    def __init__(self, spec: TransformerSpec):
        super().__init__()
        self.spec = spec
        self.input_proj = nn.Linear(spec.input_dim, spec.d_model, bias=False)
        self.transformer = Transformer(spec)
        self.output_proj = nn.Linear(spec.d_model, spec.output_dim, bias=False)

    def forward(self, x: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        """Offline pass: x [B, N, C_in], valid lengths [B] (None: all valid) -> [B, N, C_out]."""
        length, device = x.shape[1], x.device
        window = self.spec.context_tokens
        positions = torch.arange(length, device=device)
        cos, sin = rope_tables(positions, self.spec.head_dim, self.spec.max_period)
        blocks = []
        for q0 in range(0, length, QUERY_BLOCK):
            q1 = min(length, q0 + QUERY_BLOCK)
            k0 = max(0, q0 - window + 1)  # earliest key any query of the block may see
            delta = positions[q0:q1, None] - positions[None, k0:q1]  # [nq, nk] query - key
            mask = (delta >= 0) & (delta < window)
            if valid is not None:
                mask = mask & (positions[None, None, k0:q1] < valid[:, None, None])  # [B, nq, nk]
                mask = mask[:, None]  # [B, 1, nq, nk]
            blocks.append((q0, q1, k0, mask))
        query_valid = None
        if valid is not None:
            query_valid = (positions[None, :] < valid[:, None])[:, None, :, None]  # [B, 1, N, 1]
        h = self.input_proj(x)
        for layer in self.transformer.layers:
            h = layer.forward_offline(h, blocks, cos, sin, query_valid)
        return self.output_proj(h)

    def step(self, x: torch.Tensor, cache: StageCache, active: torch.Tensor | None,
             trim: bool = False, attention: str = "sdpa") -> torch.Tensor:
        """Streaming pass over n new tokens x [B, n, C_in] per row, at each row's own offset. `trim`
        (host-synchronising, the CPU path): attend only over the ring slots filled so far. `attention`:
        one of ATTENTION_MODES; "ring_kernel" falls back to "sdpa" where the kernel does not fit."""
        batch, n, _ = x.shape
        if n > cache.capacity - cache.window + 1:
            raise ValueError(f"{n} tokens in one call exceed the ring (capacity {cache.capacity})")
        spec = self.spec
        positions = cache.offsets[:, None] + torch.arange(n, device=x.device)  # [B, n]
        slots = positions % cache.capacity  # [B, n]
        stored = positions
        if active is not None:  # rows that do not advance write back what their slots already hold
            stored = torch.where(active[:, None], positions, cache.positions.gather(1, slots))
        cache.positions.scatter_(1, slots, stored)
        if attention == "ring_kernel" and ring_kernel.ring_attention_fits(cache.keys[0], cache.values[0]):
            visible = RingPositions(cache.positions, positions, cache.window)
        else:
            visible = self._ring_mask(cache, positions, trim)
        cos, sin = rope_tables(positions, spec.head_dim, spec.max_period)  # [B, 1, n, D/2]
        index = slots[:, None, :, None].expand(batch, spec.num_heads, n, spec.head_dim)
        write = _RingWrite(index, None if active is None else active[:, None, None, None])
        h = self.input_proj(x)
        for layer, cache_k, cache_v in zip(self.transformer.layers, cache.keys, cache.values):
            h = layer.forward_step(h, cache_k, cache_v, write, visible, cos, sin, attention)
        cache.offsets += n if active is None else n * active.long()
        return self.output_proj(h)

    @staticmethod
    def _ring_mask(cache: StageCache, positions: torch.Tensor, trim: bool) -> torch.Tensor:
        """Additive mask [B, 1, n, keys] of which ring slots each new token sees (built once per
        stage: SDPA would otherwise convert a bool mask per layer)."""
        keys = cache.capacity
        if trim:
            keys = min(keys, int(cache.offsets.max()) + positions.shape[1])
        held = cache.positions[:, :keys]
        delta = positions[:, :, None] - held[:, None, :]  # [B, n, keys]
        allowed = (held[:, None, :] >= 0) & (delta >= 0) & (delta < cache.window)
        mask = torch.zeros(allowed.shape, device=positions.device).masked_fill_(~allowed, float("-inf"))
        return mask.unsqueeze(1)
