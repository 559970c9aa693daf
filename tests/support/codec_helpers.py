"""Fixtures and a comparison shared by the codec tests (loaded with
`pytest_plugins = ["support.codec_helpers"]`): the tiny parity codec and its recorded reference vectors
(parity/tiny_codec_vectors.*, see parity/README.md), each loaded once per module.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tts_core.model.codec import MossAudioCodec
from tts_core.model.codec_loading import load_codec

# The tiny codec's waveforms have std ~1, so 1e-5 absolute is the reference's own
# streaming-vs-offline noise level.
ATOL = 1e-5


@pytest.fixture(scope="module")
def codec_vectors(parity_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(parity_dir / "tiny_codec_vectors.safetensors"))


@pytest.fixture(scope="module")
def tiny_codec(parity_dir: Path) -> MossAudioCodec:
    return load_codec(parity_dir / "tiny_codec")


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute difference of two tensors of the same shape."""
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()
