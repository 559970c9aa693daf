"""The reduced-precision CPU modes (fp16 / int8 weights) and the start-up choice between them."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bench.lib.fidelity import compare_models
from tts_core.model.codec_loading import load_codec
from tts_core.model.lm_loading import load_lm
from tts_core.model.quant import quantize_codec, quantize_lm
from tts_core.precision import REALTIME_RTF, choose_mode

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny(parity_dir):
    return load_lm(parity_dir / "tiny_lm"), load_codec(parity_dir / "tiny_codec")


@pytest.fixture(scope="module")
def prompt(parity_dir):
    return load_file(str(parity_dir / "tiny_lm_vectors.safetensors"))["A_voice_clone_en.input_ids"].numpy()


def _quantized(tiny, mode):
    lm, codec = tiny
    return quantize_lm(copy.deepcopy(lm), mode), quantize_codec(copy.deepcopy(codec), mode)


def test_fp16_weights_keep_greedy_codes_and_the_waveform(tiny, prompt):
    figures = compare_models(tiny, _quantized(tiny, "fp16"), prompt, frames=8)
    assert figures["top1_agreement"] == 1.0, figures
    assert figures["max_abs_dlogit"] < 0.01 * figures["logit_scale"], figures
    assert figures["codec_snr_db"] > 40, figures


def test_int8_mode_stays_close(tiny, prompt):
    figures = compare_models(tiny, _quantized(tiny, "int8"), prompt, frames=8)
    # int8 changes numbers by design (figures: bench/engine/fidelity.py); the codec is fp16 in this mode.
    assert figures["top1_agreement"] > 0.8, figures
    assert figures["codec_snr_db"] > 40, figures


def test_where_each_mode_puts_its_weights(tiny):
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    def weight_dtypes(lm, prefix):
        # The packed weights' dtype, as the module prints it ("..., dtype=torch.float16").
        return {m.extra_repr().split("dtype=")[1].split(",")[0] for name, m in lm.named_modules()
                if name.startswith(prefix) and isinstance(m, DynamicLinear)}

    lm8, codec8 = _quantized(tiny, "int8")
    assert weight_dtypes(lm8, "transformer.h") == {"torch.qint8"}
    assert weight_dtypes(lm8, "local_transformer.h") == weight_dtypes(lm8, "audio_lm_heads") == {"torch.float16"}
    assert isinstance(lm8.text_lm_head, torch.nn.Linear)  # tied to the token table, kept fp32
    assert lm8.transformer.wte.weight.dtype == torch.float32
    lm16, _ = _quantized(tiny, "fp16")
    assert weight_dtypes(lm16, "transformer.h") == {"torch.float16"}
    # The codec's encoder stays fp32 (encoded voices are the same in every mode).
    assert not any(isinstance(m, DynamicLinear) for name, m in codec8.named_modules() if name.startswith("encoder."))
    assert any(isinstance(m, DynamicLinear) for name, m in codec8.named_modules() if name.startswith("decoder."))


@pytest.mark.parametrize(("rtf", "want"), [
    ({"fp32": 0.5, "fp16": 0.3, "int8": 0.2}, "fp32"),
    ({"fp32": 1.6, "fp16": 0.6, "int8": 0.4}, "fp16"),
    ({"fp32": 2.5, "fp16": 1.1, "int8": 0.7}, "int8"),
    ({"fp32": 4.0, "fp16": 1.5, "int8": 1.2}, "int8"),  # nothing is real-time: the fastest
])
def test_auto_mode_picks_the_most_faithful_real_time_mode(tiny, rtf, want):
    modes = iter(["fp32", "fp16", "int8"])

    def fake_measure(lm, codec, *, pipelined):  # a fake clock: no dependence on this machine's speed
        return rtf[next(modes)] * 0.08

    lm, codec, choice = choose_mode(*tiny, pipelined=True, measure=fake_measure)
    assert choice.mode == want
    assert list(choice.rtf) == ["fp32", "fp16", "int8"][: ["fp32", "fp16", "int8"].index(want) + 1]
    assert ("still slower than real time" in choice.reason) == (min(rtf.values()) > REALTIME_RTF)
    if want == "fp32":
        assert lm is tiny[0] and codec is tiny[1]  # untouched originals
    else:
        assert lm is not tiny[0] and isinstance(tiny[0].transformer.h[0].attn.c_attn, torch.nn.Linear)


@pytest.mark.parametrize("mode", ["fp16", "int8", "auto"])
def test_synthesizer_in_each_cpu_mode(data_dir, tmp_path, mode):
    from tts_core import SamplingParams, SynthesisRequest, Synthesizer

    parity = data_dir / "parity"
    synth = Synthesizer.from_pretrained(
        str(parity / "tiny_lm"), str(parity / "tiny_codec"), quantize=mode, warmup=False,
        tokenizer=str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"), voices_dir=data_dir / "presets",
        cache_dir=tmp_path, allow_download=False,
    )
    try:
        result = synth.synthesize(SynthesisRequest(text="Quantised.", mode="continuation",
                                                   sampling=SamplingParams.greedy(), max_frames=5))
        assert result.pcm.shape == (2, 5 * 3840) and np.isfinite(result.pcm).all()
        health = synth.health()
        if mode == "auto":
            assert health["precision"].startswith("auto: ")
        else:
            assert health["quantize"] == mode and health["precision"] == f"{mode} (forced)"
    finally:
        synth.close()
