"""Residual LFQ quantiser of the codec (docs/spec/CODEC.md §3.5 encode, §4.1 decode); always fp32."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .codec_config import QuantizerSpec
from .layers import Embedding


class _WeightNormParams(nn.Module):
    """Holds g (`original0`, [out, 1, 1]) and v (`original1`, [out, in, 1]) under the names that
    torch's weight_norm parametrisation gives them, so checkpoints load key for key."""

    def __init__(self, out_channels: int, in_channels: int):
        super().__init__()
        self.original0 = nn.Parameter(torch.ones(out_channels, 1, 1))
        self.original1 = nn.Parameter(torch.empty(out_channels, in_channels, 1))
        if not self.original1.is_meta:  # (see layers.Embedding: normal_ on meta imports torch._dynamo)
            nn.init.normal_(self.original1, std=in_channels**-0.5)


class WeightNormConv1d(nn.Module):
    """1x1 conv with weight norm, W[o] = g[o] * v[o] / ||v[o]||, plus bias. `fuse()` computes W once
    in fp32 into a non-persistent buffer (torch's parametrisation recomputes it every call, and
    removing it renames the keys), so `state_dict()` keeps the reference names; unfused, W is
    computed on the fly."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(out_channels))
        self.parametrizations = nn.ModuleDict({"weight": _WeightNormParams(out_channels, in_channels)})
        self.register_buffer("fused_weight", None, persistent=False)

    def compute_weight(self) -> torch.Tensor:
        params = self.parametrizations["weight"]
        # torch's own weight-norm kernel (what the reference's parametrisation calls): v * (g / ||v||)
        # with the norm over all dims but 0. Matches the reference bit for bit, unlike a hand-written norm.
        return torch._weight_norm(params.original1.float(), params.original0.float(), 0)  # [out, in, 1]

    @torch.no_grad()
    def fuse(self) -> None:
        self.fused_weight = self.compute_weight()

    @property
    def weight(self) -> torch.Tensor:
        return self.fused_weight if self.fused_weight is not None else self.compute_weight()

    def _load_from_state_dict(self, *args, **kwargs):  # new g/v make any fused W stale
        self.fused_weight = None
        super()._load_from_state_dict(*args, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C_in, T] -> [B, C_out, T]."""
        return F.conv1d(x, self.weight, self.bias.float())


class LFQ(nn.Module):
    """One residual stage: project 512 -> 8, cosine nearest codebook row, project the RAW row back."""

    def __init__(self, spec: QuantizerSpec):
        super().__init__()
        self.in_proj = WeightNormConv1d(spec.rvq_dim, spec.codebook_dim)
        self.out_proj = WeightNormConv1d(spec.codebook_dim, spec.rvq_dim)
        self.codebook = Embedding(spec.codebook_size, spec.codebook_dim)

    def quantize(self, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """residual [B, rvq_dim, F] -> (indices [B, F], quantised [B, rvq_dim, F])."""
        batch, _, frames = residual.shape
        latents = self.in_proj(residual)  # [B, 8, F]
        encodings = F.normalize(latents.transpose(1, 2).reshape(batch * frames, -1))  # [B*F, 8]
        codebook = F.normalize(self.codebook.weight.float())  # [K, 8]
        # The expanded squared distance, literally as the reference writes it: codes are argmax
        # decisions, and a cosine-argmax shortcut could flip near-ties (docs/spec/CODEC.md §3.5).
        dist = (
            encodings.pow(2).sum(1, keepdim=True)
            - 2 * encodings @ codebook.t()
            + codebook.pow(2).sum(1, keepdim=True).t()
        )  # [B*F, K]
        indices = (-dist).max(1).indices.view(batch, frames)
        chosen = self.codebook(indices).float().transpose(1, 2)  # [B, 8, F], raw rows
        chosen = latents + (chosen - latents)  # straight-through form; can differ from `chosen` by an ulp
        return indices, self.out_proj(chosen)

    def decode(self, indices: torch.Tensor) -> torch.Tensor:
        """indices [B, F] -> [B, rvq_dim, F]."""
        return self.out_proj(self.codebook(indices).float().transpose(1, 2))


class ResidualLFQ(nn.Module):
    def __init__(self, spec: QuantizerSpec):
        super().__init__()
        self.spec = spec
        self.input_proj = WeightNormConv1d(spec.input_dim, spec.rvq_dim)
        self.output_proj = WeightNormConv1d(spec.rvq_dim, spec.output_dim)
        self.quantizers = nn.ModuleList(LFQ(spec) for _ in range(spec.num_quantizers))

    def encode(self, latents: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """latents [B, input_dim, F] fp32, lengths [B] valid frames -> codes [B, num_quantizers, F]."""
        residual = self.input_proj(latents.float())  # [B, rvq_dim, F]
        frames = residual.shape[-1]
        mask = (torch.arange(frames, device=residual.device)[None] < lengths[:, None]).unsqueeze(1)
        mask = mask.to(residual.dtype)  # [B, 1, F]
        codes = []
        for quantizer in self.quantizers:
            indices, quantised = quantizer.quantize(residual * mask)
            residual = residual - quantised * mask
            codes.append(indices)
        return torch.stack(codes, dim=1)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, nq, F] (nq <= num_quantizers: a prefix of the codebooks) -> [B, output_dim, F] fp32."""
        batch, num_codebooks, frames = codes.shape
        total = torch.zeros(batch, self.spec.rvq_dim, frames, device=codes.device)
        for index in range(num_codebooks):  # summed in codebook order, from zeros, as the reference
            total = total + self.quantizers[index].decode(codes[:, index])
        return self.output_proj(total)

    def fuse(self) -> None:
        for module in self.modules():
            if isinstance(module, WeightNormConv1d):
                module.fuse()
