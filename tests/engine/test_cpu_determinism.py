"""On the CPU a request's PCM is a function of the request alone: the same text, voice, seed and
settings give bit-identical float32 audio whatever other stream runs beside it and however the
pacing (a wall-clock decision) cuts the audio into chunks.

Tiny parity checkpoints. Chunkings are forced by replacing the engine's pacing rule
(`pacing.frame_budget`) with a fixed chunk size; a neighbour is a longer stream started first (its
codec rings are ahead of the request's) that is still running when the request ends. The runner
tests pin the mechanism: `EagerRunner` steps each slot alone (its hidden state is bit-identical
with or without other slots stepped beside it) and decodes one frame per codec call.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tts_core import EngineConfig, SamplingParams, SynthesisRequest, Synthesizer
from tts_core.engine import engine as engine_module
from tts_core.engine.eager_runner import EagerRunner

REQUEST = SynthesisRequest(text="A request that should always sound the same, sample for sample.", voice="Cedar",
                           seed=1235, max_frames=40)
NEIGHBOUR = SynthesisRequest(text="Another voice talking at the same time, for rather longer than the first.",
                             voice="Hutong", seed=7, max_frames=150)


@pytest.fixture(scope="module")
def synth(data_dir, tmp_path_factory):
    parity = data_dir / "parity"
    s = Synthesizer.from_pretrained(
        str(parity / "tiny_lm"), str(parity / "tiny_codec"), device="cpu",
        tokenizer=str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"),
        voices_dir=data_dir / "presets", cache_dir=tmp_path_factory.mktemp("cache"), allow_download=False,
        engine_config=EngineConfig(max_active_streams=3, max_queue=2),
    )
    yield s
    s.close()


@pytest.fixture(scope="module")
def alone(synth):
    """The request alone, with the engine's own pacing: (pcm float32 [2, S], codes [F, 16])."""
    return _run(synth)


def _run(synth) -> tuple[np.ndarray, np.ndarray]:
    chunks = list(synth.stream(REQUEST))
    assert chunks[-1].is_last
    return (np.concatenate([c.pcm for c in chunks], axis=1),
            np.concatenate([c.codes for c in chunks if len(c.codes)]))


def _fixed_chunks(monkeypatch, frames: int) -> None:
    monkeypatch.setattr(engine_module, "frame_budget", lambda lead_s: frames)


def _assert_same(got, want) -> None:
    (pcm, codes), (want_pcm, want_codes) = got, want
    np.testing.assert_array_equal(codes, want_codes)
    assert pcm.dtype == want_pcm.dtype == np.float32 and pcm.shape == want_pcm.shape
    assert np.array_equal(pcm, want_pcm), (
        f"{int((pcm != want_pcm).sum())} samples differ, max |diff| {float(np.abs(pcm - want_pcm).max()):.3g}")


def test_the_request_is_long_enough_to_show_it(alone):
    pcm, codes = alone
    assert len(codes) == 40 and pcm.shape[1] == 40 * 3840  # 3.2 s: past where earlier runs drifted (0.7 s)


@pytest.mark.parametrize("frames", [1, 3, 8])
def test_same_pcm_whatever_the_chunk_sizes(synth, alone, monkeypatch, frames):
    _fixed_chunks(monkeypatch, frames)
    _assert_same(_run(synth), alone)


@pytest.mark.parametrize("frames", [1, 4])
def test_same_pcm_beside_another_stream(synth, alone, monkeypatch, frames):
    """The neighbour starts first, so the request takes another slot, its codec rings are behind
    the neighbour's, and (with equal chunk sizes) both are decoded in the same engine iteration."""
    _fixed_chunks(monkeypatch, frames)
    neighbour = synth.stream(NEIGHBOUR)
    try:
        for _ in range(3):
            assert not next(neighbour).is_last
        got = _run(synth)
        assert synth.stats().active_streams == 1  # the neighbour ran beside it throughout
    finally:
        neighbour.close()
    _assert_same(got, alone)


# ---- the mechanism: the eager runner ------------------------------------------------------------------


@pytest.fixture(scope="module")
def prompts(parity_dir):
    vectors = load_file(str(parity_dir / "tiny_lm_vectors.safetensors"))
    return [vectors[f"{case}.input_ids"].numpy() for case in ("A_voice_clone_en", "B_voice_clone_zh")]


def _hidden_states(tiny_models, prompts, slot: int, neighbours: list[int], frames: int = 30) -> torch.Tensor:
    """The LM hidden state of a stream in `slot` after each of `frames` steps, with streams in
    `neighbours` stepped in the same calls."""
    runner = EagerRunner(*tiny_models, num_slots=4, max_context_rows=600, device="cpu")
    for index, s in enumerate([slot, *neighbours]):
        runner.begin_stream(s, SamplingParams(), 11 + index)
        runner.start_segment(s, prompts[min(index, 1)], None)
    states = []
    for _ in range(frames):
        runner.step(sorted([slot, *neighbours]))
        states.append(runner.hidden[slot].clone())
    return torch.stack(states)


def test_an_lm_step_is_bit_identical_alone_and_beside_other_streams(tiny_models, prompts):
    want = _hidden_states(tiny_models, prompts, 0, [])
    for slot, neighbours in ((0, [1]), (2, [0, 1, 3]), (3, [1])):
        assert torch.equal(_hidden_states(tiny_models, prompts, slot, neighbours), want), (slot, neighbours)


def test_a_decode_is_bit_identical_whatever_the_chunks_and_the_neighbours(tiny_models):
    codes = np.random.default_rng(0).integers(0, 1024, (3, 24, 16))
    runner = EagerRunner(*tiny_models, num_slots=3, max_context_rows=64, device="cpu")
    [want] = runner.decode([0], codes[:1])  # slot 0, alone, one call of 24 frames
    runner.release(0)
    for chunks in ([1] * 24, [1, 1, 2, 4, 8, 8], [3, 5, 7, 9]):
        runner.decode([0, 2], codes[1:, :5])  # the neighbours' rings are ahead of slot 1's
        pieces, start = [], 0
        for n in chunks:
            pieces.append(runner.decode([0, 1, 2], codes[[1, 0, 2], start : start + n])[1])
            start += n
        assert np.array_equal(np.concatenate(pieces, axis=-1), want), chunks
        for slot in range(3):
            runner.release(slot)
