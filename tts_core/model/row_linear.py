"""CPU linears whose result for a row does not depend on the other rows of the call.

A CPU matrix product picks its kernel by row count, so the CPU runner batches streams only through
these (docs/ARCHITECTURE.md, "Two runners"): `RowLinear` (oneDNN on a weight packed once, or MKL on
rows padded to a multiple of 4 for small weights) and `EachRowLinear` (int8 dynamic linears, row by
row; fp16 ones are row-independent already). `make_rows_independent` swaps them in place;
`rows_independent` probes the property at start-up, since a BLAS may change its kernels.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

logger = logging.getLogger(__name__)

# Weights of at least this many elements go through oneDNN (below it, MKL's cheaper calls win).
ONEDNN_MIN_WEIGHTS = 1 << 17
# oneDNN computes a lone row of an input wider than 1024 with another kernel than 2 or more rows.
ONEDNN_MIN_ROWS = 2
MKL_ROW_MULTIPLE = 4
# Row counts the probe compares.
PROBE_ROWS = (1, 2, 3, 4, 5, 7, 8, 13, 16, 33, 64)


def onednn_available() -> bool:
    """True when this torch build has oneDNN and its packed-linear ops."""
    mkldnn = getattr(torch.ops, "mkldnn", None)
    return bool(torch.backends.mkldnn.is_available() and mkldnn is not None
                and hasattr(mkldnn, "_linear_pointwise") and hasattr(mkldnn, "_reorder_linear_weight"))


class RowLinear(nn.Module):
    """An fp32 CPU linear computing each row as it would alone (see the module doc): through oneDNN
    on a packed weight when the weight is large, else through MKL on rows padded to a multiple of 4."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        weight = weight.detach().float().contiguous()
        self.out_features, self.in_features = weight.shape
        self.bias = None if bias is None else bias.detach().float().contiguous()
        self.packed = self.plain = None
        if weight.numel() >= ONEDNN_MIN_WEIGHTS and onednn_available():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)  # opaque oneDNN layout
        else:
            self.plain = weight

    @classmethod
    def of(cls, linear: nn.Linear) -> RowLinear:
        return cls(linear.weight, linear.bias)

    @property
    def weight(self) -> torch.Tensor:
        return self.plain if self.packed is None else self.packed.to_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x if x.dim() == 2 else x.reshape(-1, self.in_features)
        count = rows.shape[0]
        if self.packed is None:
            pad = max(MKL_ROW_MULTIPLE, -(-count // MKL_ROW_MULTIPLE) * MKL_ROW_MULTIPLE) - count
        else:
            pad = max(ONEDNN_MIN_ROWS - count, 0)
        if pad:
            rows = F.pad(rows, (0, 0, 0, pad))
        if self.packed is None:
            out = F.linear(rows, self.plain, self.bias)
        else:
            out = torch.ops.mkldnn._linear_pointwise(rows.contiguous(), self.packed, self.bias, "none", [], "")
        if pad:
            out = out[:count]
        return out if x.dim() == 2 else out.view(*x.shape[:-1], self.out_features)

    def __deepcopy__(self, memo):  # an opaque oneDNN tensor has no storage to copy
        return RowLinear(self.weight.clone(), None if self.bias is None else self.bias.clone())

    def extra_repr(self) -> str:
        kind = "mkl" if self.packed is None else "onednn"
        return f"in_features={self.in_features}, out_features={self.out_features}, {kind}"


class EachRowLinear(nn.Module):
    """Runs a linear one row at a time: for int8 dynamic quantisation, whose activation scale is
    measured over every row of a call, so a row alone is the only call independent of the others."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.in_features, self.out_features = inner.in_features, inner.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        out = torch.cat([self.inner(rows[i : i + 1]) for i in range(rows.shape[0])])
        return out.view(*x.shape[:-1], self.out_features)


def _is_int8_dynamic(module: nn.Module) -> bool:
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    return isinstance(module, DynamicLinear) and module._packed_params.dtype == torch.qint8


def make_rows_independent(module: nn.Module, prefixes: tuple[str, ...] = ("",)) -> int:
    """Replace, in place, the fp32 CPU `nn.Linear`s under `module` whose names start with one of
    `prefixes` by `RowLinear`, and its int8 dynamic linears by `EachRowLinear` (fp16 dynamic ones
    stay: they are row-independent already). Returns how many were replaced; idempotent."""
    swaps = []
    for name, child in module.named_modules():
        if not name or not name.startswith(prefixes):
            continue
        if type(child) is nn.Linear and child.weight.dtype == torch.float32 and child.weight.device.type == "cpu":
            swaps.append((name, RowLinear.of(child)))
        elif _is_int8_dynamic(child):
            swaps.append((name, EachRowLinear(child)))
    for name, new in swaps:
        parent, _, leaf = name.rpartition(".")
        setattr(module.get_submodule(parent) if parent else module, leaf, new)
    logger.debug("%d linear layers made row-independent", len(swaps))
    return len(swaps)


@torch.inference_mode()
def rows_independent(module: nn.Module, prefixes: tuple[str, ...] = ("",), seed: int = 0) -> bool:
    """Does every linear under `module` (names starting with `prefixes`) give a row the same bits
    beside any other rows, at any position, for each row count of `PROBE_ROWS`? A probe with random
    rows on this machine and thread count: it can refute the property, never prove it."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    generator = torch.Generator().manual_seed(seed)
    layers, wrapped = {}, ()
    for name, child in module.named_modules():
        if not name or not name.startswith(prefixes) or name.startswith(wrapped):
            continue
        if isinstance(child, EachRowLinear):
            wrapped += (name + ".",)  # its inner linear runs one row at a time
        if isinstance(child, (nn.Linear, RowLinear, EachRowLinear, DynamicLinear)):
            layers.setdefault((type(child), child.in_features, child.out_features), child)
    for layer in layers.values():
        row = torch.randn(1, layer.in_features, generator=generator)
        want = None
        for count in PROBE_ROWS:
            for position in sorted({0, count // 2, count - 1}):
                rows = torch.randn(count, layer.in_features, generator=generator)
                rows[position] = row[0]
                got = layer(rows)[position]
                if want is None:
                    want = got
                elif not torch.equal(got, want):
                    return False
    return True
