"""Device and dtype choices (pure functions; no GPU needed)."""

from __future__ import annotations

import pytest
import torch

from tts_core.devices import auto_cuda_dtype, resolve_lm_dtype


@pytest.mark.parametrize(("capability", "want"), [
    ((7, 5), torch.float16),   # T4: bf16 only emulated
    ((7, 0), torch.float16),   # V100
    ((8, 0), torch.bfloat16),  # A100
    ((8, 6), torch.bfloat16),  # A10G
    ((8, 9), torch.bfloat16),  # L4, L40S
    ((9, 0), torch.bfloat16),  # H100, H200
])
def test_auto_dtype_follows_native_bf16_support(capability, want):
    assert auto_cuda_dtype(capability) == want


def test_explicit_and_cpu_dtypes():
    cpu = torch.device("cpu")
    assert resolve_lm_dtype("auto", cpu) == torch.float32
    assert resolve_lm_dtype("bf16", cpu) == torch.bfloat16
    assert resolve_lm_dtype(torch.float16, cpu) == torch.float16
    with pytest.raises(ValueError, match="unknown"):
        resolve_lm_dtype("int4", cpu)
