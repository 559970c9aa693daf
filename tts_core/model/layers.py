"""Building blocks of the MOSS-TTS-Nano transformers (docs/spec/LM.md §3.2-3.3).

Pre-LN GPT-2 block with interleaved (GPT-J) rotary embeddings. Module and parameter names follow
the reference state_dict (`ln_1`, `attn.c_attn`, `attn.c_proj`, `ln_2`, `mlp.fc_in`, `mlp.fc_out`),
all `nn.Linear` layout. The blocks do not own any cache: attention over past keys is delegated to an
`Attender` (global static cache, or the local transformer's per-frame cache).
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

# cuDNN attention is left out: it rebuilds its plan whenever the key length changes, which here is
# every decode step, and that host work costs more than the attention itself.
_SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def attention_backends():
    """Context manager restricting F.scaled_dot_product_attention to the backends we want."""
    return sdpa_kernel(_SDPA_BACKENDS)


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    """GPT-2 tanh GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return F.gelu(x, approximate="tanh")


def rope_inv_freq(head_dim: int, base: float) -> torch.Tensor:
    """inv_freq[i] = 1 / base^(2i/d), float32 on the CPU (same expression as the reference)."""
    steps = torch.arange(0, head_dim, 2, dtype=torch.float32, device="cpu")
    return 1.0 / (base ** (steps / head_dim))


class RotaryTable:
    """cos/sin of the rotary angles for positions 0..n-1, float32 whatever the model's dtype (cast
    only when applied); grown on demand, one per device. Plain tensors, not buffers, so meta-device
    construction and `model.to(dtype)` never touch them."""

    def __init__(self, head_dim: int, base: float):
        self.head_dim = head_dim
        self.base = base
        self.inv_freq = rope_inv_freq(head_dim, base)  # [D/2]
        self._tables: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def get(self, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin), each [>= length, D/2] float32 on `device`."""
        table = self._tables.get(device)
        if table is None or table[0].shape[0] < length:
            size = max(length, 64 if table is None else 2 * table[0].shape[0])
            angles = torch.outer(
                torch.arange(size, dtype=torch.float32, device="cpu"), self.inv_freq
            )  # [n, D/2]
            table = (angles.cos().to(device), angles.sin().to(device))
            self._tables[device] = table
        return table

    def at(
        self, positions: torch.Tensor, length: int, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin at integer `positions` [...] (all < `length`, known on the host) -> [..., D/2] each."""
        cos, sin = self.get(length, positions.device)
        return cos[positions].to(dtype), sin[positions].to(dtype)

    def span(
        self, start: int, length: int, device: torch.device, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for positions start..start+length-1 -> two [length, D/2] tensors in `dtype`."""
        cos, sin = self.get(start + length, device)
        return cos[start : start + length].to(dtype), sin[start : start + length].to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent lane pairs (2i, 2i+1) of x [..., D] by the angles behind cos/sin [..., D/2]:
    out[2i] = x[2i] cos - x[2i+1] sin, out[2i+1] = x[2i+1] cos + x[2i] sin, bit-identical to the
    reference's `x * cos_rep + rotate_half(x) * sin_rep`."""
    pairs = x.unflatten(-1, (-1, 2))  # [..., D/2, 2]
    even, odd = pairs[..., 0], pairs[..., 1]
    return torch.stack((even * cos - odd * sin, odd * cos + even * sin), dim=-1).flatten(-2)


class Attender(Protocol):
    """Stores this step's keys/values of a layer and attends the queries over everything stored."""

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q, k, v: [B, heads, S, D] (rotated). Returns [B, heads, S, D]."""
        ...


class Attention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.c_attn = nn.Linear(hidden_size, 3 * hidden_size)
        self.c_proj = nn.Linear(hidden_size, hidden_size)


class MLP(nn.Module):
    def __init__(self, hidden_size: int, inner_size: int):
        super().__init__()
        self.fc_in = nn.Linear(hidden_size, inner_size)
        self.fc_out = nn.Linear(inner_size, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(gelu_new(self.fc_in(x)))


class Block(nn.Module):
    """h = h + attn(ln_1(h)); h = h + mlp(ln_2(h)), split around the attention (`block_qkv`,
    `block_finish`) so the owner of the keys and values (an `Attender`) sits in the middle."""

    def __init__(self, hidden_size: int, num_heads: int, inner_size: int, eps: float):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden_size, eps=eps)
        self.attn = Attention(hidden_size, num_heads)
        self.ln_2 = nn.LayerNorm(hidden_size, eps=eps)
        self.mlp = MLP(hidden_size, inner_size)

    def forward(
        self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attender: Attender, layer: int
    ) -> torch.Tensor:
        q, k, v = block_qkv(self, h, cos, sin)
        return block_finish(self, h, attender.attend(layer, q, k, v))


def block_qkv(
    block: Block, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A block up to its attention: h [B, S, H] -> q, k, v [B, nh, S, D], q and k rotated.

    cos/sin broadcast to [B, S, 1, 1, D/2] (or [S, D/2]-like shapes that broadcast the same way).
    """
    attn = block.attn
    batch, seq = h.shape[:2]
    qkv = attn.c_attn(block.ln_1(h)).view(batch, seq, 3, attn.num_heads, attn.head_dim)  # [B, S, 3, nh, D]
    # q and k are rotated in one pass; the split order in the weight is q | k | v.
    qk = apply_rope(qkv[:, :, :2], cos, sin)  # [B, S, 2, nh, D]
    return qk[:, :, 0].transpose(1, 2), qk[:, :, 1].transpose(1, 2), qkv[:, :, 2].transpose(1, 2)


def block_finish(block: Block, h: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
    """The rest of a block once attention ran: attn_out [B, nh, S, D] -> next h [B, S, H]."""
    batch, seq, hidden = h.shape
    h = h + block.attn.c_proj(attn_out.transpose(1, 2).reshape(batch, seq, hidden))
    return h + block.mlp(block.ln_2(h))


class Embedding(nn.Embedding):
    """`nn.Embedding` whose random init is skipped on the meta device, where the loaders build every
    model: torch's `normal_` there would import torch._dynamo, which a CPU start never needs."""

    def reset_parameters(self) -> None:
        if not self.weight.is_meta:
            super().reset_parameters()


class DecoderStack(nn.Module):
    """`transformer` / `local_transformer`: optional token table `wte`, blocks `h`, final `ln_f`."""

    def __init__(
        self,
        hidden_size: int,
        num_layers: int,
        num_heads: int,
        inner_size: int,
        eps: float,
        vocab_size: int | None,
    ):
        super().__init__()
        # The local transformer has no table of its own (its inputs are built from shared tables).
        if vocab_size is not None:
            self.wte = Embedding(vocab_size, hidden_size)
        self.h = nn.ModuleList(Block(hidden_size, num_heads, inner_size, eps) for _ in range(num_layers))
        self.ln_f = nn.LayerNorm(hidden_size, eps=eps)

    def forward(
        self,
        h: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        attender: Attender,
        collect: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """h: [B, S, H] input embeddings -> post-ln_f states [B, S, H]. `collect`, if given, receives
        each block's input, then the ln_f output (the reference's `output_hidden_states`)."""
        for index, block in enumerate(self.h):
            if collect is not None:
                collect.append(h)
            h = block(h, cos, sin, attender, index)
        h = self.ln_f(h)
        if collect is not None:
            collect.append(h)
        return h
