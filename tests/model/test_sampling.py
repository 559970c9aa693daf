"""Sampling math (docs/spec/LM.md §5.2), per-stream RNG isolation, and seeded generation determinism."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.generation_helpers import generate_codes, observe_frames

from tts_core.config import SamplingParams
from tts_core.engine.sampler import DRAW_BLOCK_FRAMES, StreamSampler, batch_for_frame
from tts_core.model.lm_loading import load_lm
from tts_core.model.sampling import (
    FilterParams,
    apply_repetition_penalty,
    decide_continue,
    greedy_pick,
    pick_codes,
    pick_tokens,
    sample_filtered,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _reference_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Straight transcription of docs/spec/LM.md §5.2 steps 3-6 for one row [V] -> probabilities [V]."""
    scores = logits / temperature
    if top_k > 0:
        k = min(top_k, scores.shape[-1])
        threshold = torch.topk(scores, k).values[-1]
        scores = scores.masked_fill(scores < threshold, float("-inf"))
    if 0.0 < top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True)
        remove = torch.softmax(sorted_scores, -1).cumsum(-1) > top_p
        remove[1:] = remove[:-1].clone()
        remove[0] = False
        scores = torch.full_like(scores, float("-inf")).scatter(
            0, order, sorted_scores.masked_fill(remove, float("-inf"))
        )
    return torch.softmax(scores, -1)


def _draw_histogram(logits: torch.Tensor, temperature: float, top_k: int, top_p: float, grid: int = 4000):
    """Fraction of a uniform grid of u in [0, 1) that lands on each id."""
    rows = logits.expand(grid, -1)
    u = (torch.arange(grid, dtype=torch.float32) + 0.5) / grid
    filters = FilterParams.build([temperature] * grid, [top_k] * grid, [top_p] * grid, vocab=logits.shape[-1])
    ids = sample_filtered(rows, filters, u)
    return torch.bincount(ids, minlength=logits.shape[-1]).float() / grid


# --------------------------------------------------------------------------------------------------
# Pure functions


def test_repetition_penalty_semantics():
    logits = torch.tensor([[2.0, -2.0, 0.0, 3.0, -1.0]])
    seen = torch.tensor([[True, True, True, False, False]])
    out = apply_repetition_penalty(logits, seen, torch.tensor([2.0]))
    torch.testing.assert_close(out, torch.tensor([[1.0, -4.0, 0.0, 3.0, -1.0]]))
    unchanged = apply_repetition_penalty(logits, torch.ones_like(seen), torch.tensor([1.0]))
    assert torch.equal(unchanged, logits)


def test_repetition_penalty_applies_in_greedy_mode():
    params = SamplingParams(do_sample=False, audio_repetition_penalty=2.0)
    sampler = StreamSampler(params, seed=0, n_vq=1, codebook_size=4)
    sampler.observe([0])
    logits = torch.tensor([[3.0, 2.0, 0.0, -1.0]])
    batch = batch_for_frame([sampler])
    assert int(pick_codes(logits, batch.seen[:, 0], batch.uniforms[:, 1], batch)[0]) == 1  # 3/2 < 2
    fresh = batch_for_frame([StreamSampler(params, seed=0, n_vq=1, codebook_size=4)])
    assert int(pick_codes(logits, fresh.seen[:, 0], fresh.uniforms[:, 1], fresh)[0]) == 0


def test_greedy_ties_pick_first_index():
    assert greedy_pick(torch.tensor([[1.0, 5.0, 5.0, 2.0]])).tolist() == [1]
    assert greedy_pick(torch.tensor([[7.0, 7.0]])).tolist() == [0]


def test_top_k_keeps_ties_at_threshold():
    logits = torch.tensor([5.0, 4.0, 3.0, 3.0, 3.0, 1.0, 0.0, -2.0])
    hist = _draw_histogram(logits, 1.0, 3, 1.0)
    assert set(torch.nonzero(hist).flatten().tolist()) == {0, 1, 2, 3, 4}
    torch.testing.assert_close(hist, _reference_probs(logits, 1.0, 3, 1.0), atol=2e-3, rtol=0)


def test_top_p_keeps_the_first_crossing_token():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    kept = lambda p: set(torch.nonzero(_draw_histogram(logits, 1.0, 0, p)).flatten().tolist())  # noqa: E731
    assert kept(0.6) == {0, 1}  # 0.5 <= 0.6 < 0.8: token 1 crosses p and is kept
    assert kept(0.85) == {0, 1, 2}
    assert kept(0.01) == {0}  # the top token is always kept
    assert kept(1.0) == {0, 1, 2, 3}


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.8, 25, 0.95), (1.7, 25, 0.8), (0.5, 0, 0.9)]
)
def test_distribution_matches_reference(temperature, top_k, top_p):
    logits = torch.randn(64, generator=torch.Generator().manual_seed(3)) * 2
    hist = _draw_histogram(logits, temperature, top_k, top_p, grid=8000)
    reference = _reference_probs(logits, temperature, top_k, top_p)
    assert set(torch.nonzero(hist).flatten().tolist()) <= set(torch.nonzero(reference).flatten().tolist())
    torch.testing.assert_close(hist, reference, atol=1.5e-3, rtol=0)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    top_k=st.integers(0, 40),
    top_p=st.floats(0.05, 1.0),
    temperature=st.floats(0.2, 3.0),
    u=st.floats(0.0, 0.99999994),
)
def test_draw_stays_inside_the_kept_set(seed, top_k, top_p, temperature, u):
    logits = torch.randn(1, 256, generator=torch.Generator().manual_seed(seed)) * 3
    filters = FilterParams.build([temperature], [top_k], [top_p], vocab=256)
    ids = sample_filtered(logits, filters, torch.tensor([u]))
    assert float(_reference_probs(logits[0], temperature, top_k, top_p)[ids[0]]) > 0


def test_per_row_parameters_are_independent():
    generator = torch.Generator().manual_seed(11)
    logits = torch.randn(4, 300, generator=generator)
    do_sample = [True, True, False, True]
    temperature = [0.7, 1.5, 1.0, 1.0]
    top_k = [5, 0, 25, 50]
    top_p = [1.0, 0.9, 0.5, 0.3]
    u = torch.tensor([0.1, 0.5, 0.9, 0.99])
    batched = pick_tokens(
        logits,
        do_sample=torch.tensor(do_sample),
        filters=FilterParams.build(temperature, top_k, top_p, vocab=300),
        uniforms=u,
    )
    for row in range(4):
        one = slice(row, row + 1)
        alone = pick_tokens(
            logits[one],
            do_sample=torch.tensor(do_sample[one]),
            filters=FilterParams.build(temperature[one], top_k[one], top_p[one], vocab=300),
            uniforms=u[one],
            all_sample=do_sample[row],
        )
        assert int(alone[0]) == int(batched[row]), row
    assert int(batched[2]) == int(logits[2].argmax())


def test_filter_params_forms():
    params = FilterParams.build([0.8, 1.0], [25, 0], [0.95, 1.0], vocab=1024)
    assert params.kth_index[:, 0].tolist() == [24, 1023]
    assert params.top_p[1, 0] == float("inf") and params.window == 0
    assert FilterParams.build([1.0], [25], [0.9], vocab=1024).window == 25
    assert FilterParams.build([1.0], [5000], [0.9], vocab=1024).kth_index.item() == 1023


def test_continue_decision():
    greedy = StreamSampler(SamplingParams.greedy(), seed=0)
    batch = batch_for_frame([greedy, StreamSampler(SamplingParams.greedy(), seed=1)])
    assert decide_continue(torch.tensor([[1.0, 1.0], [0.5, 0.6]]), batch).tolist() == [True, False]
    sampled = StreamSampler(SamplingParams(text_temperature=1.0), seed=0)
    # p(continue) = sigmoid(s9 - s7); with a huge margin the draw always continues.
    decisions = [
        bool(decide_continue(torch.tensor([[30.0, 0.0]]), batch_for_frame([sampled]))[0])
        for _ in range(20)
    ]
    assert all(decisions)


# --------------------------------------------------------------------------------------------------
# Stream state


def test_stream_sampler_draws_seventeen_uniforms_per_frame_and_resets():
    sampler = StreamSampler(SamplingParams(), seed=123)
    first = torch.stack([batch_for_frame([sampler]).uniforms[0] for _ in range(3)])
    assert first.shape == (3, 17)
    reference = torch.rand(51, generator=torch.Generator().manual_seed(123)).view(3, 17)
    assert torch.equal(first, reference)
    sampler.observe(torch.arange(16) * 3)
    assert int(sampler.seen.sum()) == 16 and bool(sampler.seen[5, 15])
    sampler.reset()
    assert not sampler.seen.any() and sampler.num_frames == 0
    assert torch.equal(batch_for_frame([sampler]).uniforms[0], reference[0])


def test_uniforms_drawn_ahead_in_blocks_are_the_per_frame_draws_and_put_back_comes_first():
    """Drawing a block of frames at once (`DRAW_BLOCK_FRAMES`) gives the very sequence of one
    generator call per frame, across block boundaries; a draw put back is handed out again first."""
    frames = 2 * DRAW_BLOCK_FRAMES + 5
    sampler = StreamSampler(SamplingParams(), seed=99)
    generator = torch.Generator().manual_seed(99)
    per_frame = np.stack([torch.rand(17, generator=generator).numpy() for _ in range(frames)])
    got = [sampler.draw_uniforms().copy() for _ in range(DRAW_BLOCK_FRAMES - 1)]
    dropped = sampler.draw_uniforms().copy()  # the last row of the first block, then put back
    sampler.put_back(dropped)
    got += [sampler.draw_uniforms().copy() for _ in range(frames - len(got))]
    np.testing.assert_array_equal(np.stack(got), per_frame)
    with pytest.raises(ValueError):
        sampler.draw_uniforms()[0] = 0.5  # rows of the shared block are read-only


def test_observe_frames_skips_stopped_streams():
    samplers = [StreamSampler(SamplingParams(), seed=s) for s in range(3)]
    codes = torch.arange(48).view(3, 16)
    observe_frames(samplers, codes, [True, False, True])
    assert [int(s.seen.sum()) for s in samplers] == [16, 0, 16]
    assert bool(samplers[2].seen[0, 32]) and samplers[0].num_frames == 1 and samplers[1].num_frames == 0


def test_batch_stacking_does_not_change_a_streams_randomness():
    alone = StreamSampler(SamplingParams(), seed=5)
    paired = StreamSampler(SamplingParams(), seed=5)
    other = StreamSampler(SamplingParams(audio_top_k=3), seed=9)
    for _ in range(3):
        a = batch_for_frame([alone])
        b = batch_for_frame([other, paired])
        assert torch.equal(a.uniforms[0], b.uniforms[1])
    assert b.audio.kth_index[:, 0].tolist() == [2, 24] and b.audio.window == 25
    assert b.any_sample and b.all_sample and b.any_penalty


# --------------------------------------------------------------------------------------------------
# Seeded generation with the tiny LM


@pytest.fixture(scope="module")
def lm_and_prompts(parity_dir):
    from safetensors.torch import load_file

    vectors = load_file(str(parity_dir / "tiny_lm_vectors.safetensors"))
    return (
        load_lm(parity_dir / "tiny_lm"),
        vectors["A_voice_clone_en.input_ids"],
        vectors["D_continuation_text_only.input_ids"],
    )


def test_seeded_sampling_is_reproducible_and_batch_independent(lm_and_prompts):
    lm, prompt_a, prompt_d = lm_and_prompts
    params = SamplingParams()
    first = generate_codes(lm, [prompt_a], params, seeds=42, max_frames=6)[0]
    # Unrelated work in between must not matter (no global RNG).
    generate_codes(lm, [prompt_d], params, seeds=7, max_frames=3)
    torch.rand(10)
    again = generate_codes(lm, [prompt_a], params, seeds=42, max_frames=6)[0]
    np.testing.assert_array_equal(first, again)
    other_seed = generate_codes(lm, [prompt_a], params, seeds=43, max_frames=6)[0]
    assert not np.array_equal(first, other_seed)
    batched = generate_codes(
        lm, [prompt_d, prompt_a], [SamplingParams(audio_top_k=5), params], seeds=[1, 42], max_frames=6
    )
    np.testing.assert_array_equal(batched[1], first)
    assert first.shape == (6, 16)
