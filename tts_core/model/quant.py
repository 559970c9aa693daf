"""Optional reduced-precision CPU mode: int8 dynamic quantisation of the linear layers.

On a small CPU the frame loop is bound by reading weights (batch-1 matrix-vector products read
every weight once per local position), so int8 weights (4x fewer bytes) cut the LM step about
3x. It changes the numbers: off by default, and `bench --quantize int8 --fidelity` measures the
agreement of greedy codes and the waveform SNR against fp32.
"""

from __future__ import annotations

import logging
import warnings

import torch
from torch import nn

logger = logging.getLogger(__name__)

QUANT_MODES = ("int8",)


def _linear_names(module: nn.Module, skip: tuple[str, ...] = ()) -> set[str]:
    return {name for name, child in module.named_modules()
            if isinstance(child, nn.Linear) and not any(name.startswith(prefix) for prefix in skip)}


def _quantize(module: nn.Module, names: set[str]) -> None:
    from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():  # torch.ao.quantization announces its future move; it still works
        warnings.simplefilter("ignore")
        quantize_dynamic(module, {name: default_dynamic_qconfig for name in names}, dtype=torch.qint8,
                         inplace=True)


def quantize_lm_int8(lm: nn.Module) -> nn.Module:
    """int8 weights for every LM linear (global + local blocks and the 16 audio heads).

    The text head stays fp32 (it is tied to the token table, and only two of its rows are used).
    Embedding tables stay fp32.
    """
    if next(lm.parameters()).device.type != "cpu":
        raise ValueError("int8 dynamic quantisation is a CPU mode; on CUDA use the bf16 default")
    _quantize(lm, _linear_names(lm, skip=("text_lm_head",)))
    logger.info("LM linear layers quantised to int8 (dynamic)")
    return lm


def quantize_codec_int8(codec: nn.Module) -> nn.Module:
    """int8 weights for the codec's transformer stages (the quantiser's 1x1 convs stay fp32)."""
    _quantize(codec, _linear_names(codec, skip=("quantizer",)))
    logger.info("codec transformer linears quantised to int8 (dynamic)")
    return codec
