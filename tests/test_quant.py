"""The optional int8 CPU mode: it runs end to end and stays close to fp32 on the tiny checkpoints."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tts_core.bench import measure_fidelity
from tts_core.model.codec_loading import load_codec
from tts_core.model.lm_loading import load_lm
from tts_core.model.quant import quantize_codec_int8, quantize_lm_int8


@pytest.fixture(scope="module")
def tiny(parity_dir):
    return load_lm(parity_dir / "tiny_lm"), load_codec(parity_dir / "tiny_codec")


def test_int8_mode_is_close_to_fp32(tiny, parity_dir):
    lm, codec = tiny
    prompt = load_file(str(parity_dir / "tiny_lm_vectors.safetensors"))["A_voice_clone_en.input_ids"].numpy()
    quantized = (quantize_lm_int8(copy.deepcopy(lm)), quantize_codec_int8(copy.deepcopy(codec)))
    figures = measure_fidelity((lm, codec), quantized, prompt, frames=6)
    # Loose sanity bounds only: int8 changes the numbers by design; the figures are reported by bench.
    assert figures["greedy_code_agreement"] > 0.5
    assert figures["codec_snr_db"] > 10


def test_int8_modules_replace_linears_but_not_tables(tiny):
    lm = quantize_lm_int8(copy.deepcopy(tiny[0]))
    assert not any(isinstance(m, torch.nn.Linear) for name, m in lm.named_modules() if name.startswith("transformer.h"))
    assert isinstance(lm.text_lm_head, torch.nn.Linear)  # tied to the token table, kept fp32
    assert lm.transformer.wte.weight.dtype == torch.float32


def test_synthesizer_with_int8(data_dir, tmp_path):
    from tts_core import SamplingParams, SynthesisRequest, Synthesizer

    parity = data_dir / "parity"
    synth = Synthesizer.from_pretrained(
        str(parity / "tiny_lm"), str(parity / "tiny_codec"), quantize="int8", warmup=False,
        tokenizer=str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"), voices_dir=data_dir / "presets",
        cache_dir=tmp_path, allow_download=False,
    )
    try:
        result = synth.synthesize(SynthesisRequest(text="Quantised.", mode="continuation",
                                                   sampling=SamplingParams.greedy(), max_frames=5))
        assert result.pcm.shape == (2, 5 * 3840) and np.isfinite(result.pcm).all()
        assert synth.health()["quantize"] == "int8"
    finally:
        synth.close()
