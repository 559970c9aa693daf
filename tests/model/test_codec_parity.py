"""Codec parity with the reference (tiny random codec + real quantizer weights), manifest and loader.

Vectors: parity/tiny_codec_vectors.* (see parity/README.md); fixtures and tolerance in codec_helpers.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from support.codec_helpers import ATOL, max_diff

from tts_core.errors import ModelLoadError
from tts_core.model.codec import MossAudioCodec
from tts_core.model.codec_config import CodecConfig, TransformerSpec
from tts_core.model.codec_loading import load_codec

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------- encode
def test_encode_codes_exact(tiny_codec: MossAudioCodec, codec_vectors, parity_dir: Path) -> None:
    wav = codec_vectors["encode.input_waveform"]  # [2, 48000], used as is
    codes, lengths = tiny_codec.encode(wav[None])
    ref_len = int(codec_vectors["encode.audio_codes_lengths"][0])
    assert lengths.tolist() == [ref_len] == [48000 // 3840]
    assert codes.shape == (1, 16, ref_len) and codes.dtype == torch.long
    reference = codec_vectors["encode.audio_codes"][:, 0, :ref_len]  # [16, 12]
    mismatch = (codes[0] != reference).nonzero().tolist()
    # Any flip would be at a small LFQ argmax margin; the smallest valid one is 6e-4 (JSON), far above
    # fp32 noise, so every code must match.
    meta = json.loads((parity_dir / "tiny_codec_vectors.json").read_text())
    assert meta["results_summary"]["encode"]["min_lfq_margin_valid_frames"] > 1e-4
    assert not mismatch, f"codes differ at (codebook, frame) {mismatch}"
    assert torch.equal(codec_vectors["encode_streaming_chunk0p24.audio_codes"][:, 0], reference)


def test_encoder_latents_match(tiny_codec: MossAudioCodec, codec_vectors) -> None:
    latents, frames = tiny_codec.encode_latents(codec_vectors["encode.input_waveform"][None])
    assert latents.shape == (1, 768, 13) and frames.tolist() == [12]
    assert max_diff(latents, codec_vectors["encode.encoder_hidden_states"]) < 2e-5


def test_encode_batch_with_lengths_equals_single(tiny_codec: MossAudioCodec, codec_vectors) -> None:
    wav = codec_vectors["encode.input_waveform"]
    short = 30_000
    batch = torch.stack([wav, torch.nn.functional.pad(wav[:, :short], (0, wav.shape[1] - short), value=0.3)])
    codes, lengths = tiny_codec.encode(batch, lengths=torch.tensor([wav.shape[1], short]))
    assert lengths.tolist() == [12, short // 3840]
    alone_full, _ = tiny_codec.encode(wav[None])
    alone_short, _ = tiny_codec.encode(wav[None, :, :short])
    assert torch.equal(codes[0], alone_full[0])
    assert torch.equal(codes[1, :, : lengths[1]], alone_short[0])


def test_encode_clip_layout(tiny_codec: MossAudioCodec, codec_vectors) -> None:
    clip = tiny_codec.encode_clip(codec_vectors["encode.input_waveform"])
    assert clip.shape == (12, 16)
    assert torch.equal(clip, codec_vectors["encode.audio_codes"][:, 0, :12].t())
    assert tiny_codec.encode_clip(torch.zeros(2, 3000)).shape == (0, 16)  # shorter than one frame


# ---------------------------------------------------------------- decode
def test_offline_decode(tiny_codec: MossAudioCodec, codec_vectors) -> None:
    audio = tiny_codec.decode(codec_vectors["decode.input_codes"][None])
    assert audio.shape == (1, 2, 46080) and audio.dtype == torch.float32
    assert max_diff(audio[0], codec_vectors["decode_offline.audio"]) < ATOL
    audio13 = tiny_codec.decode(codec_vectors["encode.audio_codes"].permute(1, 0, 2))
    assert max_diff(audio13[0], codec_vectors["decode_offline_13frames.audio"]) < ATOL


def test_zh1_real_codes_decode(tiny_codec: MossAudioCodec, codec_vectors) -> None:
    codes = codec_vectors["zh1_first10.input_codes"][None]  # [1, 16, 10]
    assert max_diff(tiny_codec.decode(codes)[0], codec_vectors["zh1_first10.decode_offline.audio"]) < ATOL
    state = tiny_codec.new_decode_state(1)
    streamed = torch.cat([tiny_codec.decode_step(codes[:, :, i : i + 1], state) for i in range(10)], dim=-1)
    assert max_diff(streamed[0], codec_vectors["zh1_first10.decode_stream_session_1frame.audio"]) < ATOL


def _load_real_quantizer(codec: MossAudioCodec, npz_path: Path) -> None:
    """Put codec_quantizer.npz (effective weights W [in, out]) into the weight-norm form g, v."""
    real = np.load(npz_path)

    def set_conv(conv, weight_in_out: np.ndarray, bias: np.ndarray) -> None:
        v = torch.from_numpy(weight_in_out).t()[:, :, None].contiguous()  # [out, in, 1]
        params = conv.parametrizations["weight"]
        params.original1.copy_(v)
        params.original0.copy_(v.norm(dim=(1, 2), keepdim=True))
        conv.bias.copy_(torch.from_numpy(bias))

    with torch.no_grad():
        for index, lfq in enumerate(codec.quantizer.quantizers):
            lfq.codebook.weight.copy_(torch.from_numpy(real[f"codebook_{index}"]))
            set_conv(lfq.out_proj, real[f"out_proj_w_{index}"], real[f"out_proj_b_{index}"])
        set_conv(codec.quantizer.output_proj, real["output_proj_w"], real["output_proj_b"])
    codec.fuse()


def test_real_quantizer_decode(data_dir: Path, codec_vectors) -> None:
    config = CodecConfig.from_json(data_dir / "codec" / "config.json")
    codec = MossAudioCodec(config).eval()
    _load_real_quantizer(codec, data_dir / "codec" / "codec_quantizer.npz")
    real_codes = torch.from_numpy(np.load(data_dir / "codec" / "zh_1.prompt_codes.npy"))  # [99, 16]
    codes = real_codes[:10].t()[None]
    assert torch.equal(codes[0], codec_vectors["zh1_first10.input_codes"])
    latent = codec.quantizer_decode(codes)
    assert latent.shape == (1, 768, 10)
    assert max_diff(latent[0], codec_vectors["zh1_first10.quantizer_decode_codes"]) < ATOL


# ---------------------------------------------------------------- manifest
def test_state_dict_manifest(data_dir: Path, parity_dir: Path) -> None:
    manifest = json.loads((parity_dir / "codec_state_dict_manifest.json").read_text())
    config = CodecConfig.from_json(data_dir / "codec" / "config.json")
    with torch.device("meta"):
        codec = MossAudioCodec(config)
    state = codec.state_dict()
    expected = [(e["key"], tuple(e["shape"])) for e in manifest["state_dict"]]
    assert [(k, tuple(t.shape)) for k, t in state.items()] == expected
    assert len(state) == manifest["num_state_dict_keys"] == 374
    assert sum(t.numel() for t in state.values()) == manifest["total_parameters_unique"] == 21_969_664
    windows = {}
    for side, stages in (("encoder", codec.encoder), ("decoder", codec.decoder)):
        for index, stage in enumerate(stages):
            spec = getattr(stage, "spec", None)
            if isinstance(spec, TransformerSpec):
                for layer in range(spec.num_layers):
                    windows[f"{side}.{index}.transformer.layers.{layer}.self_attn"] = spec.context_tokens
    assert windows == manifest["attention_context_tokens"]


def test_config_rejects_bad_input(data_dir: Path) -> None:
    raw = json.loads((data_dir / "codec" / "config.json").read_text())
    broken = json.loads(json.dumps(raw))
    del broken["encoder_kwargs"][1]["d_model"]
    with pytest.raises(ModelLoadError, match="d_model"):
        CodecConfig.from_json(broken)
    broken = json.loads(json.dumps(raw))
    broken["decoder_kwargs"][0]["patch_size"] = 8
    with pytest.raises(ModelLoadError, match="decoder"):
        CodecConfig.from_json(broken)
    broken = json.loads(json.dumps(raw))
    broken["encoder_kwargs"][3]["positional_embedding"] = "sin"
    with pytest.raises(ModelLoadError, match="positional_embedding"):
        CodecConfig.from_json(broken)
    with pytest.raises(ModelLoadError, match="cannot read"):
        CodecConfig.from_json(data_dir / "does-not-exist.json")


# ---------------------------------------------------------------- loader
_LEGACY = (
    (".parametrizations.weight.original0", ".weight_g"),
    (".parametrizations.weight.original1", ".weight_v"),
    (".self_attn.out_proj.weight", ".self_attn.out_projs.0.weight"),
    (".ffn.0.", ".linear1."),
    (".ffn.2.", ".linear2."),
)


def _legacy_name(key: str) -> str:
    for new, old in _LEGACY:
        key = key.replace(new, old)
    if key.endswith("self_attn.in_proj.weight"):  # both old spellings appear in the wild
        old = "in_proj_weight" if key.startswith("encoder") else "in_projs.0.weight"
        key = key.replace("in_proj.weight", old)
    return key


def _write_checkpoint(directory: Path, parity_dir: Path) -> Path:
    directory.mkdir()
    (directory / "config.json").write_text((parity_dir / "tiny_codec" / "config.json").read_text())
    return directory


def test_legacy_and_sharded_checkpoints_load_identically(
    tiny_codec, codec_vectors, parity_dir: Path, tmp_path: Path
) -> None:
    state = load_file(str(parity_dir / "tiny_codec" / "model.safetensors"))
    codes = codec_vectors["decode.input_codes"][None]
    expected = tiny_codec.decode(codes)

    legacy = _write_checkpoint(tmp_path / "legacy", parity_dir)
    legacy_state = {_legacy_name(k): v for k, v in state.items()}
    assert any(k.endswith("weight_g") for k in legacy_state) and any(".linear1." in k for k in legacy_state)
    torch.save(legacy_state, legacy / "pytorch_model.bin")
    assert torch.equal(load_codec(legacy).decode(codes), expected)

    sharded = _write_checkpoint(tmp_path / "sharded", parity_dir)
    keys = sorted(state)
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    for name, shard_keys in shards.items():
        save_file({k: state[k].contiguous() for k in shard_keys}, str(sharded / name))
    index = {"weight_map": {k: name for name, ks in shards.items() for k in ks}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    assert torch.equal(load_codec(sharded).decode(codes), expected)


def test_loader_reports_bad_keys_and_shapes(parity_dir: Path, tmp_path: Path) -> None:
    state = load_file(str(parity_dir / "tiny_codec" / "model.safetensors"))
    bad = dict(state)
    bad["decoder.3.output_proj.weight"] = torch.zeros(5, 32)
    del bad["quantizer.quantizers.7.codebook.weight"]
    bad["decoder.9.extra.weight"] = torch.zeros(3)
    directory = _write_checkpoint(tmp_path / "bad", parity_dir)
    save_file(bad, str(directory / "model.safetensors"))
    with pytest.raises(ModelLoadError) as info:
        load_codec(directory)
    message = str(info.value)
    assert "decoder.3.output_proj.weight: checkpoint [5, 32]" in message
    assert "quantizer.quantizers.7.codebook.weight" in message and "1 missing" in message
    assert "decoder.9.extra.weight" in message and "1 unexpected" in message

    duplicated = dict(state)
    duplicated["quantizer.input_proj.weight_g"] = state[
        "quantizer.input_proj.parametrizations.weight.original0"
    ].clone()
    directory = _write_checkpoint(tmp_path / "dup", parity_dir)
    save_file(duplicated, str(directory / "model.safetensors"))
    with pytest.raises(ModelLoadError, match="twice"):
        load_codec(directory)


def test_loaded_model_state_dict_keeps_reference_names(tiny_codec: MossAudioCodec, parity_dir: Path) -> None:
    state = load_file(str(parity_dir / "tiny_codec" / "model.safetensors"))
    ours = tiny_codec.state_dict()
    assert set(ours) == set(state)
    assert all(torch.equal(ours[k], state[k]) for k in state)
    conv = tiny_codec.quantizer.quantizers[0].out_proj
    assert conv.fused_weight is not None  # weight norm folded once at load
    assert torch.equal(conv.fused_weight, conv.compute_weight())


def test_query_blocking_does_not_change_results(tiny_codec: MossAudioCodec, codec_vectors,
                                                monkeypatch) -> None:
    from tts_core.model import codec_layers

    codes = codec_vectors["decode.input_codes"][None]
    wav = codec_vectors["encode.input_waveform"][None]
    results = []
    for block in (10_000, 32):  # one block (the reference's full mask) vs many small ones
        monkeypatch.setattr(codec_layers, "QUERY_BLOCK", block)
        results.append((tiny_codec.encode(wav)[0], tiny_codec.decode(codes)))
    assert torch.equal(results[0][0], results[1][0])
    assert max_diff(results[0][1], results[1][1]) < ATOL
