"""Static KV cache: slot isolation, per-slot lengths, batched decode over unequal lengths."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from tts_core.model.kv_cache import KVCache
from tts_core.model.lm_loading import load_lm

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def lm(parity_dir):
    return load_lm(parity_dir / "tiny_lm")


@pytest.fixture(scope="module")
def prompts(parity_dir):
    vectors = load_file(str(parity_dir / "tiny_lm_vectors.safetensors"))
    return {
        "A": vectors["A_voice_clone_en.input_ids"],
        "B": vectors["B_voice_clone_zh.input_ids"],
        "D": vectors["D_continuation_text_only.input_ids"],
        "codes": vectors["A_voice_clone_en.greedy.audio_token_ids"],
    }


def _slot_snapshot(cache: KVCache, slot: int) -> list[torch.Tensor]:
    return [t[slot].clone() for t in cache.k + cache.v]


def test_reset_of_one_slot_leaves_the_others_untouched(lm, prompts):
    cache = lm.new_cache(3, 256)
    lm.prefill(prompts["A"], cache, 0)
    lm.prefill(prompts["B"], cache, 1)
    lm.prefill(prompts["D"], cache, 2)
    before = [_slot_snapshot(cache, 1), _slot_snapshot(cache, 2)]
    lengths_before = cache.lengths.copy()

    cache.reset(0)
    assert (
        cache.length(0) == 0 and cache.length(1) == lengths_before[1] and cache.length(2) == lengths_before[2]
    )
    lm.prefill(prompts["D"], cache, 0)  # reuse slot 0 for another stream
    lm.decode(prompts["codes"][0][None], cache, torch.tensor([0]))

    for slot, snapshot in zip((1, 2), before):
        for old, new in zip(snapshot, _slot_snapshot(cache, slot)):
            assert torch.equal(old, new), slot
    assert cache.lengths[1:].tolist() == lengths_before[1:].tolist()


def test_reused_slot_behaves_like_a_fresh_cache(lm, prompts):
    cache = lm.new_cache(2, 256)
    lm.prefill(prompts["A"], cache, 1)  # leaves long stale rows behind in slot 1
    reused = lm.prefill(prompts["D"], cache, 1)
    fresh = lm.prefill(prompts["D"], lm.new_cache(1, 256), 0)
    assert torch.equal(reused, fresh)
    row = prompts["codes"][0][None]
    fresh_cache = lm.new_cache(1, 256)
    lm.prefill(prompts["D"], fresh_cache, 0)
    torch.testing.assert_close(
        lm.decode(row, cache, [1]), lm.decode(row, fresh_cache, [0]), rtol=0, atol=1e-6
    )


def test_batched_decode_with_unequal_lengths_matches_single_streams(lm, prompts):
    names = ["A", "D", "B"]
    batched = lm.new_cache(3, 256)
    singles = [lm.new_cache(1, 256) for _ in names]
    for slot, name in enumerate(names):
        lm.prefill(prompts[name], batched, slot)
        lm.prefill(prompts[name], singles[slot], 0)
    # Slots out of order (a gather, not a view) and different lengths per slot.
    order = [2, 0, 1]
    for step in range(3):
        codes = torch.stack([prompts["codes"][step + slot] for slot in order])
        together = lm.decode(codes, batched, torch.tensor(order))
        for index, slot in enumerate(order):
            alone = lm.decode(codes[index : index + 1], singles[slot], [0])
            torch.testing.assert_close(together[index], alone[0], rtol=0, atol=1e-5)
    assert batched.lengths.tolist() == [prompts[n].shape[0] + 3 for n in names]


def test_chunked_prefill_matches_one_shot(lm, prompts):
    rows = prompts["A"]
    one_shot = lm.prefill(rows, lm.new_cache(1, 256), 0, return_all=True)
    cache = lm.new_cache(1, 256)
    first = lm.prefill(rows[:120], cache, 0, return_all=True)
    second = lm.prefill(rows[120:], cache, 0, reset=False, return_all=True)
    torch.testing.assert_close(torch.cat([first, second]), one_shot, rtol=0, atol=1e-5)
    assert cache.length(0) == rows.shape[0]


def test_capacity_and_slot_errors(lm, prompts):
    cache = lm.new_cache(2, prompts["D"].shape[0])
    lm.prefill(prompts["D"], cache, 0)
    with pytest.raises(ValueError, match="exceeds max_len"):
        lm.decode(prompts["codes"][0][None], cache, [0])
    with pytest.raises(IndexError, match="out of range"):
        cache.reset(2)
    with pytest.raises(ValueError, match="slot twice"):
        lm.decode(torch.stack([prompts["codes"][0]] * 2), lm.new_cache(2, 300), [1, 1])
    with pytest.raises(ValueError, match="exceeds max_len"):
        lm.prefill(prompts["A"], cache, 1)


def test_cache_geometry(lm):
    cache = lm.new_cache(4, 32)
    config = lm.config
    assert len(cache.k) == len(cache.v) == config.num_layers
    assert cache.k[0].shape == (4, config.num_heads, 32, config.head_dim)
    assert cache.dtype == torch.float32 and cache.lengths.tolist() == [0, 0, 0, 0]
    cache.advance([1, 3], 5)
    assert cache.lengths.tolist() == [0, 5, 0, 5]
    cache.reset_all()
    assert cache.lengths.tolist() == [0, 0, 0, 0]


def test_local_cache_survives_switching_out_of_inference_mode(lm, prompts):
    from tts_core.config import SamplingParams
    from tts_core.engine.sampler import StreamSampler, batch_for_frame

    def frame():
        cache = lm.new_cache(1, 128)
        hidden = lm.prefill(prompts["D"], cache, 0)[None]
        batch = batch_for_frame([StreamSampler(SamplingParams(), seed=3)])
        return lm.generate_frame(hidden, batch)[1]

    with torch.inference_mode():
        inside = frame()  # the engine's mode: the local scratch cache is made as inference tensors
    outside = frame()  # must not try to write those in place
    assert torch.equal(inside, outside)
