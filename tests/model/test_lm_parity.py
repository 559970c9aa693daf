"""MossTTSNanoLM against the reference vectors of the tiny random LM (parity/tiny_lm_vectors.*).

Tolerances from parity/README.md: hidden states 1e-5, logits 5e-5, integer outputs exact.
float32 on CPU throughout.
"""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from support.generation_helpers import generate_codes

from tts_core.config import SamplingParams
from tts_core.engine.sampler import StreamSampler, batch_for_frame
from tts_core.errors import ModelLoadError
from tts_core.model.layers import RotaryTable, apply_rope, gelu_new
from tts_core.model.lm_config import LMConfig
from tts_core.model.lm_loading import build_lm_on_meta, load_lm

CASES = ["A_voice_clone_en", "B_voice_clone_zh", "C_continuation_prompted", "D_continuation_text_only"]
HIDDEN_TOL = 1e-5
LOGIT_TOL = 5e-5


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def vectors(parity_dir):
    return load_file(str(parity_dir / "tiny_lm_vectors.safetensors"))


@pytest.fixture(scope="module")
def lm(parity_dir):
    return load_lm(parity_dir / "tiny_lm")


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a.float() - b.float()).abs().max())


# --------------------------------------------------------------------------------------------------
# Config


def _real_config(data_dir) -> dict:
    with (data_dir / "hf_checkpoint_meta" / "config.json").open(encoding="utf-8") as handle:
        return json.load(handle)


def test_config_values_from_real_checkpoint(data_dir):
    config = LMConfig.from_json(data_dir / "hf_checkpoint_meta" / "config.json")
    assert (config.hidden_size, config.num_layers, config.num_heads, config.head_dim) == (768, 12, 12, 64)
    assert (config.inner_size, config.local_num_layers, config.n_vq) == (3072, 1, 16)
    assert config.audio_codebook_sizes == (1024,) * 16 and config.audio_pad_id == 1024
    assert config.text_vocab_size == 16384 and config.rope_base == 10000.0 and config.layer_norm_eps == 1e-5
    special = [getattr(config, name) for name in LMConfig.special_id_names()]
    assert special == [3, 4, 5, 6, 7, 8, 9]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c["gpt2_config"].update(activation_function="relu"), "activation_function"),
        (lambda c: c["gpt2_config"].update(position_embedding_type="absolute"), "position_embedding_type"),
        (lambda c: c["gpt2_config"].update(n_head=7), "not divisible by n_head"),
        (lambda c: c.update(audio_codebook_sizes=[1024] * 15), "n_vq=16"),
        (lambda c: c.update(audio_pad_token_id=1000), "audio_pad_token_id"),
        (lambda c: c.update(hidden_size=512), "hidden_size"),
        (lambda c: c.pop("im_start_token_id"), "im_start_token_id"),
        (lambda c: c.pop("local_transformer_layers"), "local_transformer_layers"),
        (lambda c: c["gpt2_config"].pop("rope_base"), "rope_base"),
        (lambda c: c.pop("gpt2_config"), "gpt2_config"),
        (lambda c: c.update(audio_end_token_id=20000), "audio_end_id"),
    ],
)
def test_config_validation(data_dir, edit, message):
    raw = _real_config(data_dir)
    edit(raw)
    with pytest.raises(ValueError, match=message):
        LMConfig.from_json(raw)


def test_missing_keys_never_fall_back_to_class_defaults(data_dir):
    raw = _real_config(data_dir)
    del raw["n_vq"]  # the reference class default would be 8, the checkpoint says 16
    with pytest.raises(ValueError, match="missing 'n_vq'"):
        LMConfig.from_json(raw)


# --------------------------------------------------------------------------------------------------
# Module tree


def test_state_dict_manifest_of_real_config(data_dir, parity_dir):
    with (parity_dir / "lm_state_dict_manifest.json").open(encoding="utf-8") as handle:
        manifest = json.load(handle)
    model = build_lm_on_meta(LMConfig.from_json(data_dir / "hf_checkpoint_meta" / "config.json"))
    state = model.state_dict(keep_vars=True)
    expected = {entry["key"]: entry["shape"] for entry in manifest["state_dict"]}
    assert len(state) == manifest["num_state_dict_keys"] == 194
    assert {key: list(t.shape) for key, t in state.items()} == expected
    assert list(state) == list(expected), "key order differs from the reference"
    assert sum(p.numel() for p in model.parameters()) == manifest["total_parameters_unique"] == 117_311_232
    for tie in manifest["tied"]:
        assert state[tie["key"]] is state[tie["same_storage_as"]], tie
    assert not list(model.buffers()), "RoPE tables must not be module buffers"


def test_loaded_tiny_model_is_tied_and_frozen(lm):
    assert lm.text_lm_head.weight is lm.transformer.wte.weight
    for embedding, head in zip(lm.audio_embeddings, lm.audio_lm_heads):
        assert head.weight is embedding.weight
    assert not any(p.requires_grad for p in lm.parameters())
    assert not lm.training and lm.dtype == torch.float32


# --------------------------------------------------------------------------------------------------
# Layers


def test_rope_is_interleaved_gptj_style():
    table = RotaryTable(head_dim=8, base=10000.0)
    torch.testing.assert_close(table.inv_freq, 1.0 / 10000.0 ** (torch.arange(0, 8, 2).float() / 8))
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(0))
    cos, sin = table.span(0, 5, torch.device("cpu"), torch.float32)  # [5, 4]
    # Reference form: x * cos_rep + rotate(x) * sin_rep with rotate(x)[2i] = -x[2i+1], [2i+1] = x[2i].
    rotated = torch.stack((-x[:, 1::2], x[:, 0::2]), dim=-1).reshape_as(x)
    expected = x * cos.repeat_interleave(2, -1) + rotated * sin.repeat_interleave(2, -1)
    assert torch.equal(apply_rope(x, cos, sin), expected)
    assert torch.equal(apply_rope(x, cos, sin)[0], x[0])  # position 0 is the identity
    cos_at, _ = table.at(torch.tensor([3, 1]), 4, torch.float32)
    assert torch.equal(cos_at, cos[[3, 1]])


def test_gelu_new_is_the_tanh_approximation():
    x = torch.linspace(-8, 8, 4001)
    formula = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    torch.testing.assert_close(gelu_new(x), formula, rtol=0, atol=1e-6)


# --------------------------------------------------------------------------------------------------
# Embeddings, prefill, local transformer, heads


def test_row_embedding(lm):
    wte, tables = lm.transformer.wte.weight, [e.weight for e in lm.audio_embeddings]
    rows = torch.full((1, 3, 17), 1024)
    rows[0, :, 0] = torch.tensor([4, 8, 9])
    rows[0, 1, 1:] = torch.arange(16) * 60
    rows[0, 2, 1:9] = torch.arange(8)  # half the codebooks padded
    emb = lm.embed_rows(rows)
    assert torch.equal(emb[0, 0], wte[4])  # pad columns add exactly nothing
    expected = wte[8].clone()
    for k in range(16):
        expected = expected + tables[k][60 * k]
    assert torch.equal(emb[0, 1], expected)  # text first, then channels 0..15 in order
    expected = wte[9].clone()
    for k in range(8):
        expected = expected + tables[k][k]
    assert torch.equal(emb[0, 2], expected)
    assert torch.equal(lm.embed_rows(rows, validate=False), emb)
    bad = rows.clone()
    bad[0, 1, 5] = 1025
    with pytest.raises(ValueError, match="outside their codebook"):
        lm.embed_rows(bad)
    frame = lm.frame_rows(torch.arange(16)[None] * 60)  # [1, 17]
    assert frame[0, 0] == 9 and torch.equal(frame[0, 1:], rows[0, 1, 1:])


@pytest.mark.parametrize("case", CASES)
def test_prefill_and_first_local_position(case, lm, vectors):
    rows = vectors[f"{case}.input_ids"]
    cache = lm.new_cache(1, rows.shape[0])
    hidden = lm.prefill(rows, cache, 0, return_all=True)
    assert _max_diff(hidden, vectors[f"{case}.prefill.global_last_hidden_state"]) < HIDDEN_TOL
    assert cache.length(0) == rows.shape[0]

    local = lm.local_hidden_pos0(hidden[-1:])
    assert _max_diff(local[0], vectors[f"{case}.prefill.local_hidden_pos0"]) < LOGIT_TOL
    text_logits = lm.text_logits(local)[0]
    assert _max_diff(text_logits, vectors[f"{case}.prefill.text_logits_last"]) < LOGIT_TOL
    stop = lm.stop_logits(local)[0]
    assert _max_diff(stop, text_logits[[9, 7]]) < 1e-5


def test_case_a_per_layer_hidden_states(lm, vectors):
    rows = vectors["A_voice_clone_en.input_ids"]
    collected: list[torch.Tensor] = []
    lm.prefill(rows, lm.new_cache(1, rows.shape[0]), 0, hidden_states_out=collected)
    # Entries: block inputs (0 = row embeddings, 1 = after block 0), then the ln_f output.
    assert len(collected) == 3
    for index, hidden in enumerate(collected):
        expected = vectors[f"A_voice_clone_en.prefill.global_hidden_states.{index}"]
        assert _max_diff(hidden, expected) < HIDDEN_TOL, index
    assert _max_diff(collected[0], vectors["A_voice_clone_en.prefill.global_hidden_states.0"]) == 0.0


# --------------------------------------------------------------------------------------------------
# Greedy generation


def _greedy_run(lm, rows: torch.Tensor, frames: int):
    """Frame loop on one slot, keeping the traces of the first two frames."""
    cache = lm.new_cache(1, rows.shape[0] + frames)
    hidden = lm.prefill(rows, cache, 0)[None]
    sampler = StreamSampler(SamplingParams.greedy(), seed=0)
    codes, audio_logits, text_logits = [], [], []
    for step in range(frames):
        if step < 2:
            text_logits.append(lm.text_logits(lm.local_hidden_pos0(hidden))[0])
        trace: list[torch.Tensor] = []
        is_continue, frame = lm.generate_frame(hidden, batch_for_frame([sampler]), trace=trace)
        assert bool(is_continue[0]), f"stopped at frame {step}"
        if step < 2:
            audio_logits.append(torch.cat(trace))  # [16, 1024]
        sampler.observe(frame[0])
        codes.append(frame[0])
        hidden = lm.decode(frame, cache, torch.tensor([0]))
    return torch.stack(codes), torch.stack(text_logits), torch.stack(audio_logits)


@pytest.mark.parametrize("case", CASES)
def test_greedy_codes_and_teacher_forced_logits(case, lm, vectors):
    codes, text_logits, audio_logits = _greedy_run(lm, vectors[f"{case}.input_ids"], 12)
    torch.testing.assert_close(codes, vectors[f"{case}.greedy.audio_token_ids"], rtol=0, atol=0)
    assert _max_diff(text_logits, vectors[f"{case}.greedy.text_logits_steps0_1"]) < LOGIT_TOL
    assert _max_diff(audio_logits, vectors[f"{case}.greedy.audio_logits_steps0_1"]) < LOGIT_TOL


def test_uncached_local_pass_matches_cached(lm, vectors):
    rows = vectors["B_voice_clone_zh.input_ids"]
    hidden = lm.prefill(rows, lm.new_cache(1, rows.shape[0]), 0)[None]
    trace: list[torch.Tensor] = []
    sampler = StreamSampler(SamplingParams.greedy(), seed=0)
    _, codes = lm.generate_frame(hidden, batch_for_frame([sampler]), trace=trace)
    text_logits, audio_logits = lm.local_teacher_forced(hidden, 9, codes)
    for channel in range(16):
        assert _max_diff(audio_logits[channel], trace[channel]) < LOGIT_TOL, channel
    assert _max_diff(text_logits[0], vectors["B_voice_clone_zh.prefill.text_logits_last"]) < LOGIT_TOL


def test_batch_ab_through_slots(lm, vectors):
    rows = [vectors["A_voice_clone_en.input_ids"], vectors["B_voice_clone_zh.input_ids"]]
    out = generate_codes(lm, rows, SamplingParams.greedy(), seeds=0, max_frames=12)
    expected = vectors["batch_AB.greedy.audio_token_ids"].numpy()
    assert len(out) == 2
    for got, want in zip(out, expected):
        np.testing.assert_array_equal(got, want)


def test_generate_codes_respects_max_frames(lm, vectors):
    out = generate_codes(lm, [vectors["D_continuation_text_only.input_ids"]], max_frames=3)
    np.testing.assert_array_equal(
        out[0], vectors["D_continuation_text_only.greedy.audio_token_ids"][:3].numpy()
    )


# --------------------------------------------------------------------------------------------------
# Loading


def _copy_config(parity_dir, target):
    target.mkdir(exist_ok=True)
    shutil.copy(parity_dir / "tiny_lm" / "config.json", target / "config.json")


def test_bin_round_trip_with_tied_aliases(lm, parity_dir, vectors, tmp_path):
    state = {key: value.clone() for key, value in lm.state_dict().items()}
    # Tied aliases share storage with their source, as in the released pytorch_model.bin.
    state["text_lm_head.weight"] = state["transformer.wte.weight"]
    for k in range(16):
        state[f"audio_lm_heads.{k}.weight"] = state[f"audio_embeddings.{k}.weight"]
    # A training checkpoint may also carry the local table the reference ignores.
    state["local_transformer.wte.weight"] = torch.zeros(16384, 64)
    assert len(state) == len(lm.state_dict()) + 1
    target = tmp_path / "bin_ckpt"
    _copy_config(parity_dir, target)
    torch.save(state, target / "pytorch_model.bin")
    reloaded = load_lm(target)
    assert reloaded.text_lm_head.weight is reloaded.transformer.wte.weight
    for key, value in lm.state_dict().items():
        assert torch.equal(reloaded.state_dict()[key], value), key
    rows = vectors["D_continuation_text_only.input_ids"]
    a = lm.prefill(rows, lm.new_cache(1, 100), 0)
    b = reloaded.prefill(rows, reloaded.new_cache(1, 100), 0)
    assert torch.equal(a, b)


def test_safetensors_with_only_alias_keys_is_retied(parity_dir, tmp_path, lm):
    state = load_file(str(parity_dir / "tiny_lm" / "model.safetensors"))
    # Keep the head copy instead of the embedding: the loader must fill in the source key.
    state["audio_lm_heads.3.weight"] = state.pop("audio_embeddings.3.weight")
    target = tmp_path / "alias_ckpt"
    _copy_config(parity_dir, target)
    save_file(state, str(target / "model.safetensors"))
    reloaded = load_lm(target)
    assert reloaded.audio_lm_heads[3].weight is reloaded.audio_embeddings[3].weight
    assert torch.equal(reloaded.audio_embeddings[3].weight, lm.audio_embeddings[3].weight)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda s: s.pop("transformer.h.1.mlp.fc_in.bias"),
            r"missing keys: transformer\.h\.1\.mlp\.fc_in\.bias",
        ),
        (
            lambda s: s.update({"transformer.ln_f.weight": torch.ones(65)}),
            r"shape mismatches: transformer\.ln_f\.weight \(checkpoint \[65\], model \[64\]\)",
        ),
        (
            lambda s: s.update({"transformer.wpe.weight": torch.zeros(4, 64)}),
            r"unexpected keys: transformer\.wpe",
        ),
    ],
)
def test_loader_reports_bad_checkpoints(parity_dir, tmp_path, edit, message):
    state = load_file(str(parity_dir / "tiny_lm" / "model.safetensors"))
    edit(state)
    target = tmp_path / "bad_ckpt"
    _copy_config(parity_dir, target)
    save_file(state, str(target / "model.safetensors"))
    with pytest.raises(ModelLoadError, match=message):
        load_lm(target)


def test_loader_reports_bad_config(parity_dir, tmp_path):
    target = tmp_path / "bad_config"
    _copy_config(parity_dir, target)
    raw = json.loads((target / "config.json").read_text())
    raw["gpt2_config"]["activation_function"] = "gelu"
    (target / "config.json").write_text(json.dumps(raw))
    shutil.copy(parity_dir / "tiny_lm" / "model.safetensors", target / "model.safetensors")
    with pytest.raises(ModelLoadError, match="activation_function"):
        load_lm(target)
