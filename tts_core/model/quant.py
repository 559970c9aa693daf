"""Reduced-precision CPU modes: which linear layers keep fp32, fp16 or int8 weights.

Dynamic quantisation (FBGEMM): arithmetic stays fp32, only the stored weights shrink. "fp16": every
linear of the LM (global and local transformers, audio heads) and of the codec decoder's
transformer stages; "int8": as "fp16", but the global transformer's linears hold int8. The text
head, the embedding tables and the codec's quantiser stay fp32. Why and what each costs:
docs/PERFORMANCE.md (the CPU section and the precision table).
"""

from __future__ import annotations

import logging
import warnings

import torch
from torch import nn

logger = logging.getLogger(__name__)

QUANT_MODES = ("fp16", "int8")
# Parts of the LM by module-name prefix.
_GLOBAL = ("transformer.h",)
_LOCAL_AND_HEADS = ("local_transformer.h", "audio_lm_heads")


def _linear_names(module: nn.Module, include: tuple[str, ...] = ("",), skip: tuple[str, ...] = ()) -> set[str]:
    return {name for name, child in module.named_modules()
            if isinstance(child, nn.Linear) and name.startswith(include) and not name.startswith(skip)}


def _quantize(module: nn.Module, names: set[str], dtype: torch.dtype) -> None:
    """Replace the linears named `names` in place by dynamic quantised ones (`dynamic_linear`)."""
    with warnings.catch_warnings():  # torch.ao.quantization announces its future move; it still works
        warnings.simplefilter("ignore")
        for name in sorted(names):
            parent_name, _, child = name.rpartition(".")
            parent = module.get_submodule(parent_name)
            setattr(parent, child, dynamic_linear(getattr(parent, child), dtype))


def dynamic_linear(linear: nn.Linear, dtype: torch.dtype) -> nn.Module:
    """What `torch.ao.quantization.quantize_dynamic` makes of `linear` with torch's default dynamic
    qconfigs (same packed weights: per-tensor symmetric MinMax for int8, fp16 packing otherwise),
    built without its throw-away full-size zero weight, which a CPU start would wait to pack."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    from torch.ao.quantization import default_dynamic_qconfig

    if dtype not in (torch.qint8, torch.float16):
        raise ValueError(f"dynamic linears hold qint8 or float16 weights, not {dtype}")
    converted = DynamicLinear(1, 1, dtype=dtype)  # its 1x1 placeholder weight is replaced below
    weight = linear.weight.detach().float()
    if dtype == torch.qint8:
        observer = default_dynamic_qconfig.weight()
        observer(weight)
        scale, zero_point = observer.calculate_qparams()
        weight = torch.quantize_per_tensor(weight, float(scale), int(zero_point), torch.qint8)
    converted.set_weight_bias(weight, None if linear.bias is None else linear.bias.detach().float())
    converted.in_features, converted.out_features = linear.in_features, linear.out_features
    return converted


def _check_mode(module: nn.Module, mode: str) -> None:
    if mode not in QUANT_MODES:
        raise ValueError(f"unknown quantisation {mode!r}; use one of {', '.join(QUANT_MODES)}")
    if next(module.parameters()).device.type != "cpu":
        raise ValueError(f"{mode} weights are a CPU mode; on CUDA the LM runs in bf16")


def quantize_lm(lm: nn.Module, mode: str) -> nn.Module:
    """Replace the LM's linears in place per `mode` (see the module doc); returns `lm`."""
    _check_mode(lm, mode)
    if mode == "int8":
        _quantize(lm, _linear_names(lm, include=_GLOBAL), torch.qint8)
        _quantize(lm, _linear_names(lm, include=_LOCAL_AND_HEADS), torch.float16)
    else:
        _quantize(lm, _linear_names(lm, include=_GLOBAL + _LOCAL_AND_HEADS), torch.float16)
    logger.info("LM linear layers: %s weights", mode)
    return lm


def quantize_codec(codec: nn.Module, mode: str) -> nn.Module:
    """fp16 weights for the decoder's transformer stages in both modes. The encoder (reference
    clips, once per voice, cached on disk by checkpoint) and the quantiser stay fp32, so encoded
    voices are the same in every mode."""
    _check_mode(codec, mode)
    _quantize(codec, _linear_names(codec, include=("decoder.",)), torch.float16)
    logger.info("codec decoder linear layers: fp16 weights")
    return codec
