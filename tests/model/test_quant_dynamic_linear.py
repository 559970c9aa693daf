"""`quant.dynamic_linear` builds what torch's `quantize_dynamic` builds with its default dynamic
qconfigs (the same packed weights, hence the same outputs), only without converting a throw-away
weight first (a CPU start waits for this conversion)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.ao.quantization import default_dynamic_qconfig, float16_dynamic_qconfig, quantize_dynamic

from tts_core.model.quant import dynamic_linear


@pytest.mark.parametrize("dtype", [torch.qint8, torch.float16])
@pytest.mark.parametrize("bias", [True, False])
def test_the_same_module_as_quantize_dynamic(dtype, bias):
    generator = torch.Generator().manual_seed(7)
    linear = nn.Linear(48, 80, bias=bias)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(80, 48, generator=generator) * 0.2)
        if bias:
            linear.bias.copy_(torch.randn(80, generator=generator))
    holder = nn.Sequential(linear)
    qconfig = default_dynamic_qconfig if dtype == torch.qint8 else float16_dynamic_qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = quantize_dynamic(holder, {"0": qconfig}, dtype=dtype, inplace=False)[0]
    ours = dynamic_linear(linear, dtype)
    assert type(ours) is type(reference) and repr(ours) == repr(reference)
    (ref_w, ref_b), (w, b) = reference._weight_bias(), ours._weight_bias()
    if dtype == torch.qint8:
        assert torch.equal(w.int_repr(), ref_w.int_repr())
        assert (w.q_scale(), w.q_zero_point()) == (ref_w.q_scale(), ref_w.q_zero_point())
    else:
        assert torch.equal(w, ref_w)
    assert (b is None and ref_b is None) or torch.equal(b, ref_b)
    x = torch.randn(5, 48, generator=generator)
    assert torch.equal(ours(x), reference(x))


def test_other_dtypes_are_refused():
    with pytest.raises(ValueError, match="qint8 or float16"):
        dynamic_linear(nn.Linear(4, 4), torch.bfloat16)
