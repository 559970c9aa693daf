"""On the CPU a request's PCM is a function of the request alone: the same text, voice, seed and
settings give bit-identical float32 audio whatever other stream runs beside it and however the
pacing (a wall-clock decision) cuts the audio into chunks.

Tiny parity checkpoints. Chunkings are forced by replacing the engine's pacing rule
(`pacing.decode_count`) with a fixed chunk size; a neighbour is a longer stream started first (its
codec rings are ahead of the request's) that is still running when the request ends. The runner
tests pin the mechanism: `EagerRunner` steps and decodes the slots together, and a stream's hidden
states, codes and audio are bit-identical alone in slot 0 and in any slot beside others, with 1 or
2 torch threads, beside other sampling settings, and for any split of its frames into decode calls;
they also hold on the fallback that steps each slot on its own.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bench.lib.runners import SoloEagerRunner
from tts_core import EngineConfig, SamplingParams, SynthesisRequest, Synthesizer
from tts_core.engine import cpu as eager_runner
from tts_core.engine import engine as engine_module
from tts_core.engine.cpu import EagerRunner
from tts_core.model import lm_step
from tts_core.model.quant import quantize_codec, quantize_lm
from tts_core.model.row_linear import rows_independent

REQUEST = SynthesisRequest(text="A request that should always sound the same, sample for sample.", voice="Cedar",
                           seed=1235, max_frames=40)
DEFAULT = SamplingParams()
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
    monkeypatch.setattr(engine_module, "decode_count",
                        lambda pending, lead_s, step: frames if pending >= frames else 0)


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


@pytest.fixture
def threads():
    """Sets torch's CPU thread count for the test (the runner checks its kernels under it)."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def _rows_apart(runner) -> bool:
    return rows_independent(runner.lm, lm_step.ROW_LINEARS) and runner.row_decoder.rows_independent()


def _stream(tiny_models, prompts, slot: int, neighbours: list[int], *, frames: int = 30,
         sampling: SamplingParams = DEFAULT, neighbour_sampling: SamplingParams = DEFAULT,
         batched: bool = True) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """A stream in `slot` with streams in `neighbours` stepped and decoded in the same calls, a frame
    at a time: its LM hidden state after each step [F, H], its codes [F, 16] and its audio [2, S]."""
    runner = (EagerRunner if batched else SoloEagerRunner)(*tiny_models, num_slots=4, max_context_rows=600,
                                                           device="cpu")
    # Batched exactly where the start-up probe found this machine's rows independent (it does here).
    assert runner.batched == (batched and _rows_apart(runner)), "the runner batches only where rows stay apart"
    for index, s in enumerate([slot, *neighbours]):
        runner.begin_stream(s, sampling if index == 0 else neighbour_sampling, 11 + index)
        runner.start_segment(s, prompts[min(index, 1)], None)
    slots = sorted([slot, *neighbours])
    states, codes, pcm = [], [], []
    for _ in range(frames):
        _, frame = runner.step(slots)
        states.append(runner.hidden[slot].clone())
        codes.append(frame[slots.index(slot)])
        pcm.append(runner.decode(slots, frame[:, None])[slots.index(slot)])
    return torch.stack(states), np.stack(codes), np.concatenate(pcm, axis=1)


def _assert_same_stream(got, want) -> None:
    assert torch.equal(got[0], want[0]), "hidden states differ"
    np.testing.assert_array_equal(got[1], want[1])
    assert np.array_equal(got[2], want[2]), "audio differs"


def test_an_lm_step_is_bit_identical_alone_and_beside_other_streams(tiny_models, prompts):
    want = _stream(tiny_models, prompts, 0, [])
    for slot, neighbours in ((0, [1]), (2, [0, 1, 3]), (3, [1])):
        _assert_same_stream(_stream(tiny_models, prompts, slot, neighbours), want)


@pytest.mark.parametrize("count", [1, 2])
def test_alone_in_slot_0_equals_in_slot_3_beside_three_others(tiny_models, prompts, threads, count):
    """The batched runner (one LM step and one decode for all four slots) with 1 and 2 torch threads."""
    threads(count)
    _assert_same_stream(_stream(tiny_models, prompts, 3, [0, 1, 2]), _stream(tiny_models, prompts, 0, []))


def test_the_thread_count_changes_nothing(tiny_models, prompts, threads):
    threads(1)
    want = _stream(tiny_models, prompts, 1, [0, 3])
    threads(2)
    _assert_same_stream(_stream(tiny_models, prompts, 1, [0, 3]), want)


def test_neighbours_with_other_sampling_settings_change_nothing(tiny_models, prompts):
    """A narrow top-k beside a wider one and greedy rows: the CPU sampler's top-k window is shared by
    the rows of a step, so it is kept wide enough that its width changes no row's arithmetic."""
    narrow = SamplingParams(audio_top_k=5)
    want = _stream(tiny_models, prompts, 0, [], sampling=narrow)
    for other in (SamplingParams(audio_top_k=60), SamplingParams.greedy()):
        _assert_same_stream(_stream(tiny_models, prompts, 2, [0, 1], sampling=narrow, neighbour_sampling=other), want)


@pytest.mark.parametrize("mode", ["fp16", "int8"])
def test_quantised_weights_batch_exactly_too(tiny_models, prompts, mode):
    """fp16 weights (FBGEMM) compute rows independently as they are; int8 ones run row by row."""
    lm, codec = (copy.deepcopy(m) for m in tiny_models)
    models = (quantize_lm(lm, mode), quantize_codec(codec, mode))
    _assert_same_stream(_stream(models, prompts, 3, [0, 1, 2], frames=6), _stream(models, prompts, 0, [], frames=6))


def test_where_rows_are_not_independent_each_slot_runs_alone(tiny_models, prompts, monkeypatch):
    """The fallback when the start-up check fails: one row per step, one frame per codec call."""
    monkeypatch.setattr(eager_runner, "rows_independent", lambda *args, **kwargs: False)
    want = _stream(tiny_models, prompts, 0, [], frames=12, batched=False)
    _assert_same_stream(_stream(tiny_models, prompts, 3, [0, 1], frames=12, batched=False), want)


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
