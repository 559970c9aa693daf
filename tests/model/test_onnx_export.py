"""The exported graphs (tts_core/export) in ONNX Runtime against the torch modules, tiny checkpoints.

Greedy codes exact (the reference vectors, and torch's own generation loop with a repetition
penalty); sampled codes exact against torch's loop given the same stream generator (the frame
graph samples inside from the uniforms it is given); streaming codec PCM within 1e-4 of
`MossAudioCodec.decode_step` past the rings' wrap, voice clone and continuation (the continuation
primes the decoder with the reference codes, as the engine does).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from support.browser_engine_helpers import tiny_build
from support.generation_helpers import generate_codes

from tts_core.config import SamplingParams
from tts_core.export.onnx_runtime import CodecStream, Generation, GlobalCache, OnnxModels

CASES = ["A_voice_clone_en", "B_voice_clone_zh", "C_continuation_prompted", "D_continuation_text_only"]
PCM_TOL = 1e-4

# slow: the graphs are exported once per session (`tiny_build`), about two CPU-minutes here.
pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]


@pytest.fixture(scope="module")
def models(data_dir):
    return OnnxModels.load(tiny_build(data_dir) / "models")


@pytest.mark.parametrize("case", CASES)
def test_greedy_codes_equal_torch(models, tiny_models, tiny_lm_vectors, case):
    rows = tiny_lm_vectors[f"{case}.input_ids"].numpy()
    codes = Generation(models).generate(rows, 12)
    reference = tiny_lm_vectors[f"{case}.greedy.audio_token_ids"].numpy()
    torch_codes = generate_codes(tiny_models[0], [rows], SamplingParams.greedy(), seeds=0, max_frames=12)[0]
    np.testing.assert_array_equal(codes, reference)
    np.testing.assert_array_equal(codes, torch_codes)


def test_repetition_penalty_is_applied_in_the_frame_graph(models, tiny_models, tiny_lm_vectors):
    """Greedy with the default penalty 1.2 (a graph input): equals torch's pick_codes."""
    rows = tiny_lm_vectors["A_voice_clone_en.input_ids"].numpy()
    params = SamplingParams(do_sample=False, audio_repetition_penalty=1.2)
    torch_codes = generate_codes(tiny_models[0], [rows], params, seeds=0, max_frames=12)[0]
    codes = Generation(models, params).generate(rows, 12)
    np.testing.assert_array_equal(codes, torch_codes)
    assert not np.array_equal(codes, tiny_lm_vectors["A_voice_clone_en.greedy.audio_token_ids"].numpy())


@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams(audio_top_k=0, audio_top_p=0.7, text_temperature=0.7)],
                         ids=["defaults", "top_p_only"])
def test_sampled_codes_equal_torch_with_the_same_draws(models, tiny_models, tiny_lm_vectors, params):
    """Penalty, temperature, top-k/top-p and the draw run inside the frame graph: fed the torch
    engine's own stream generator, it picks torch's codes, and another seed picks others."""
    rows = tiny_lm_vectors["B_voice_clone_zh.input_ids"].numpy()
    for seed in (3, 4):
        torch_codes = generate_codes(tiny_models[0], [rows], params, seeds=seed, max_frames=16)[0]
        np.testing.assert_array_equal(Generation(models, params, seed).generate(rows, 16), torch_codes)
    assert not np.array_equal(Generation(models, params, 3).generate(rows, 16),
                              Generation(models, params, 4).generate(rows, 16))


def test_global_cache_is_fixed_and_filled_in_place(models, tiny_lm_vectors):
    """Prefill and every frame write into the one preallocated cache; a call past its capacity is
    refused naming the capacity."""
    rows = tiny_lm_vectors["D_continuation_text_only.input_ids"].numpy()
    run = Generation(models)
    cache = GlobalCache(models.lm, len(rows) + 1)
    keys = cache.keys
    run.global_pass(rows, cache)
    assert cache.length == len(rows) and cache.keys is keys and np.abs(keys[..., : len(rows)]).max() > 0
    assert not keys[..., len(rows) :].any()
    row = np.full((1, rows.shape[1]), 0, np.int64)
    row[0, 0] = models.lm["audio_assistant_slot_id"]
    run.global_pass(row, cache)
    with pytest.raises(ValueError, match=f"capacity {len(rows) + 1}"):
        run.global_pass(row, cache)


def _torch_stream(codec, frames: np.ndarray, prime: np.ndarray | None) -> np.ndarray:
    state = codec.new_decode_state(1, "cpu")
    if prime is not None:
        codec.decode_step(torch.as_tensor(prime.T[None]), state)
    return np.concatenate([codec.decode_step(torch.as_tensor(frames[i : i + 1].T[None]), state)[0].numpy()
                           for i in range(len(frames))], axis=1)


@pytest.mark.parametrize("primed", [False, True], ids=["voice_clone", "continuation"])
def test_streaming_codec_pcm_within_1e4(models, tiny_models, tiny_lm_vectors, data_dir, primed):
    codec = tiny_models[1]
    frames = tiny_lm_vectors["C_continuation_prompted.greedy.audio_token_ids"].numpy()
    prime = np.load(data_dir / "codec" / "zh_1.prompt_codes.npy").astype(np.int64) if primed else None
    stream = CodecStream(models)
    if prime is not None:
        for row in prime:
            stream.decode(row[None])
    onnx_pcm = np.concatenate([stream.decode(frames[i : i + 1]) for i in range(len(frames))], axis=1)
    torch_pcm = _torch_stream(codec, frames, prime)
    assert onnx_pcm.shape == torch_pcm.shape == (2, 12 * 3840)
    positions = [s for s in models.description["codec"]["state"] if s["name"].endswith("_positions")]
    assert all(int(stream.state[s["name"]].max()) >= s["shape"][1] for s in positions)  # every ring wrapped
    assert float(np.abs(onnx_pcm - torch_pcm).max()) <= PCM_TOL
    assert float(np.abs(torch_pcm).max()) > 0.05  # real audio, not silence agreeing with silence


def test_graphs_json_describes_the_state_it_was_exported_with(models, tiny_models, data_dir):
    description = json.loads((tiny_build(data_dir) / "models" / "graphs.json").read_text())
    lm = tiny_models[0].config
    assert description["lm"]["num_layers"] == lm.num_layers and description["lm"]["n_vq"] == lm.n_vq
    names = [s["name"] for s in description["codec"]["state"]]
    inputs = [i.name for i in models.codec_graph.get_inputs()]
    assert inputs == ["codes", *names]
    outputs = [o.name for o in models.codec_graph.get_outputs()]
    for spec in description["codec"]["state"]:  # rings come back as their written slots, the rest whole
        assert (f"{spec['name']}_new" if spec["ring"] else f"{spec['name']}_out") in outputs
    assert [i.name for i in models.local_graph.get_inputs()] == ["hidden", "seen", "uniforms", "sampling_params"]


def test_encoder_codes_equal_torch_and_the_reference(models, tiny_models, parity_dir):
    """The clip encoder (cloning in the browser): fixed 20 s input, zero-padded, its valid frames."""
    from safetensors.torch import load_file

    from tts_core.export.onnx_runtime import encode_clip

    vectors = load_file(str(parity_dir / "tiny_codec_vectors.safetensors"))
    wav = vectors["encode.input_waveform"].numpy()
    codes = encode_clip(models, wav)
    frames = int(vectors["encode.audio_codes_lengths"][0])
    np.testing.assert_array_equal(codes, vectors["encode.audio_codes"][:, 0, :frames].numpy().T)
    np.testing.assert_array_equal(codes, tiny_models[1].encode_clip(torch.as_tensor(wav)).numpy())
    with pytest.raises(ValueError, match="exceeds the encoder"):
        encode_clip(models, np.zeros((2, models.description["codec"]["clip_samples"] + 1), np.float32))
