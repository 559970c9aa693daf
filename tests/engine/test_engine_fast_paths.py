"""The GPU engine's cheaper paths give the same results as the plain ones (checked on the CPU with
the tiny checkpoints): ring attention as GEMMs, the prefill unit compiled for any prompt length,
admission writes staged for the next step, and prompt bursts after a cached voice prefix. (Batched
codec row resets: tests/engine/test_static_engine.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bench.lib.drive import drive
from bench.lib.runners import static_runner
from tts_core.config import SamplingParams
from tts_core.engine.cuda.codec_passes import codec_attention
from tts_core.engine.sampler import param_row
from tts_core.model import lm_step
from tts_core.model.codec_layers import ring_attention
from tts_core.model.sampling import FilterParams

CPU = torch.device("cpu")


def test_ring_attention_as_gemms_equals_the_fused_kernel():
    g = torch.Generator().manual_seed(0)
    q, keys, values = (torch.randn(3, 4, n, 16, generator=g) for n in (5, 40, 40))
    allowed = torch.rand(3, 1, 5, 40, generator=g) > 0.3
    allowed[..., 0] = True  # every query sees at least one key, as in a stream
    mask = torch.zeros(allowed.shape).masked_fill_(~allowed, float("-inf"))
    fused = ring_attention(q, keys, values, mask)
    assert torch.equal(fused, F.scaled_dot_product_attention(q, keys, values, attn_mask=mask))
    torch.testing.assert_close(ring_attention(q, keys, values, mask, explicit=True), fused, rtol=1e-5, atol=1e-6)


def test_codec_attention_rule():
    """The choice the H200 record supports (see engine/codec_passes.py)."""
    assert codec_attention(256, 1, kernel=True) == codec_attention(16, 4, kernel=True) == "ring_kernel"
    assert codec_attention(8, 4, kernel=True) == codec_attention(1, 1, kernel=True) == "gemm"
    # Without the kernel (no Triton, or not an fp32 codec):
    assert codec_attention(256, 1, kernel=False) == codec_attention(16, 4, kernel=False) == "gemm"
    assert codec_attention(32, 4, kernel=False) == "sdpa"


def test_codec_decode_with_gemm_attention_matches_fused(tiny_models):
    _, codec = tiny_models
    states = [codec.new_decode_state(2), codec.new_decode_state(2)]
    active = torch.tensor([True, False])
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        codes = torch.randint(0, 1024, (2, 16, 2), generator=g)
        fused = codec.decode_frames_static(codes, states[0], active)
        gemm = codec.decode_frames_static(codes, states[1], active, attention="gemm")
        torch.testing.assert_close(gemm, fused, rtol=1e-4, atol=1e-5)
        assert not gemm[1].any()  # the inactive row gets silence and keeps its state



def _random_rows(config, rng: np.random.Generator, count: int, length: int) -> np.ndarray:
    """`count` prompts of `length` random rows [count, length, 17] (text ids, then audio codes)."""
    prompts = np.zeros((count, length, config.row_width), np.int64)
    prompts[..., 0] = rng.integers(10, 500, (count, length))
    prompts[..., 1:] = rng.integers(0, 1024, (count, length, config.n_vq))
    return prompts

@torch.inference_mode()
def test_prefill_unit_compiles_once_for_any_prompt_length(tiny_models):
    """The traced prefill (aot_eager: tracing only, so quick on a CPU) gives the plain prefill's
    states and keys for prompts of several lengths and counts, on caches of two sizes."""
    lm, _ = tiny_models
    units = lm_step.StepUnits.compiled("aot_eager")
    rng = np.random.default_rng(0)
    for slots_total, length in ((3, 80), (5, 200)):
        plain, traced = lm.new_cache(slots_total, length), lm.new_cache(slots_total, length)
        for count, rows in ((1, 23), (2, 41), (3, 17)):
            prompts = _random_rows(lm.config, rng, count, rows)
            slots = list(range(slots_total - count, slots_total))
            outputs = []
            for cache, step_units in ((plain, lm_step.EAGER), (traced, units)):
                cache.reset_all()
                outputs.append(lm.prefill_many(torch.from_numpy(prompts), [rows] * count, cache, slots, step_units))
            torch.testing.assert_close(outputs[1], outputs[0], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(traced.k[0][slots, :, :rows], plain.k[0][slots, :, :rows], rtol=1e-5, atol=1e-5)



@torch.inference_mode()
def test_prefill_after_a_prefix_compiles_once_for_any_prefix_and_text_length(tiny_models):
    """The traced after-prefix prefill (what a burst of one voice's prompts takes) gives the plain
    one's states and keys for several prompt counts, prefix lengths and text lengths, on caches of
    two sizes, and traces no new graph once a single and a batched call have been seen."""
    from torch._dynamo.utils import counters

    lm, _ = tiny_models
    units = lm_step.StepUnits.compiled("aot_eager")
    rng = np.random.default_rng(1)

    graphs_after_first = None
    for slots_total, length in ((3, 90), (5, 240)):
        plain, traced = lm.new_cache(slots_total, length), lm.new_cache(slots_total, length)
        for count, start, rows in ((1, 30, 7), (2, 41, 12), (3, 17, 20), (2, 60, 3)):
            prefix = torch.from_numpy(_random_rows(lm.config, rng, count, start))
            text = torch.from_numpy(_random_rows(lm.config, rng, count, rows))
            slots = list(range(slots_total - count, slots_total))
            outputs = []
            for cache, step_units in ((plain, lm_step.EAGER), (traced, units)):
                cache.reset_all()
                lm.prefill_many(prefix, [start] * count, cache, slots)
                outputs.append(lm.prefill_many(text, [rows] * count, cache, slots, step_units, start=start))
                assert [cache.length(s) for s in slots] == [start + rows] * count
            torch.testing.assert_close(outputs[1], outputs[0], rtol=1e-5, atol=1e-5)
            end = start + rows
            torch.testing.assert_close(traced.v[-1][slots, :, :end], plain.v[-1][slots, :, :end], rtol=1e-5, atol=1e-5)
            if graphs_after_first is None and count == 2:
                graphs_after_first = counters["stats"]["unique_graphs"]
    assert counters["stats"]["unique_graphs"] == graphs_after_first


def test_admission_writes_are_staged_until_the_next_step(tiny_models, tiny_lm_vectors):
    """Streams admitted together and one admitted later, on the static path, give the codes each
    gets alone (sampling rows and lengths are written in one batch before a step)."""
    runner = static_runner(tiny_models, 4)
    prompt = tiny_lm_vectors["A_voice_clone_en.input_ids"].numpy()
    sampling = SamplingParams(audio_repetition_penalty=1.3)
    alone, _ = drive(runner, [prompt], [5], [0], sampling)
    runner.begin_stream(1, SamplingParams.greedy(), 9)
    assert 1 in runner.graphs._staged_params  # nothing written to the device yet
    runner.release(1)
    together, _ = drive(runner, [prompt, prompt], [5, 5], [0, 3], sampling)  # slot 0 again: fresh history
    for codes in together:
        np.testing.assert_array_equal(codes, alone[0])


@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams.greedy(),
                                    SamplingParams(audio_top_k=0, audio_top_p=1.0, text_top_k=5, text_top_p=0.3),
                                    SamplingParams(audio_top_k=4000, audio_temperature=1.7, audio_repetition_penalty=2.0)])
def test_param_row_is_what_filter_params_build(params):
    """The admission-time row (plain floats) holds, once in the float32 table, what the tensor
    builder gives."""
    audio = FilterParams.build([params.audio_temperature], [params.audio_top_k], [params.audio_top_p], vocab=1024)
    text = FilterParams.build([params.text_temperature], [params.text_top_k], [params.text_top_p], vocab=2)
    expected = torch.tensor([float(params.do_sample), float(audio.temperature), float(audio.kth_index),
                             float(audio.top_p), params.audio_repetition_penalty, float(text.temperature),
                             float(text.kth_index), float(text.top_p)], dtype=torch.float32)
    assert torch.equal(torch.tensor(param_row(params, 1024), dtype=torch.float32), expected)


def _greedy_codes(runner, prompt, slots, prefix_rows, frames=8):
    for slot in slots:
        runner.begin_stream(slot, SamplingParams.greedy(), 0)
        runner.start_segment(slot, prompt, None, prefix_rows=prefix_rows)
    codes = [runner.step(slots)[1] for _ in range(frames)]
    for slot in slots:
        runner.release(slot)
    return np.stack(codes)  # [F, B, 16]


def test_prompts_after_a_cached_prefix_match_whole_prefills(tiny_models, tiny_lm_vectors):
    """Static path: a burst of prompts of one voice copies the voice's prefix KV (computed by
    `warm_prefix` in the spare row, or kept from an earlier prefill) and runs only the rows after
    it; the codes are the ones whole prefills give."""
    prompt = tiny_lm_vectors["A_voice_clone_en.input_ids"].numpy()
    whole = static_runner(tiny_models, 4, prefix_cache_size=0)
    expected = _greedy_codes(whole, prompt, [0, 2, 3], prefix_rows=30)
    warmed = static_runner(tiny_models, 4)
    assert warmed.warm_prefix(prompt[:30]) and not warmed.warm_prefix(prompt[:30])
    np.testing.assert_array_equal(_greedy_codes(warmed, prompt, [0, 2, 3], prefix_rows=30), expected)
    assert warmed.prefix_cache.hits == 3
    kept = static_runner(tiny_models, 4)
    _greedy_codes(kept, prompt, [1], prefix_rows=30)  # alone: a whole prefill, its prefix kept
    np.testing.assert_array_equal(_greedy_codes(kept, prompt, [0, 2, 3], prefix_rows=30), expected)
    assert kept.prefix_cache.hits == 3
