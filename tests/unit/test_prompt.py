"""Prompt rows: template id blocks (docs/spec/LM.md §4.2) and the four parity cases A-D."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from tts_core.model.lm_config import LMConfig
from tts_core.prompt import PromptTemplate, build_prompt_rows, validate_codes
from tts_core.tokenizer import TextTokenizer

USER_PREFIX = [4, 600, 289, 10356, 13, 10356, 10425, 1860, 4546, 12907, 10363, 13325, 11492]
NONE_IDS = [505, 587]
AFTER_REFERENCE = [
    *[10356, 10425, 3965, 7738, 11492, 505, 587],
    *[10356, 10425, 352, 500, 856, 11492, 505, 587],
    *[10356, 10425, 2128, 1247, 594, 11492, 505, 587],
    *[10356, 10425, 348, 909, 561, 3648, 11492, 505, 587],
    *[10356, 10425, 2818, 1305, 355, 348, 909, 11492, 505, 587],
    *[10356, 10425, 484, 339, 10367, 783, 11492, 505, 587],
    *[10356, 10425, 2427, 980, 11492],
]
ASSISTANT_PREFIX = [10356, 14, 5, 4, 8165, 430]


@pytest.fixture(scope="module")
def tokenizer(data_dir):
    return TextTokenizer.from_file(data_dir / "hf_checkpoint_meta" / "tokenizer.model")


@pytest.fixture(scope="module")
def template(data_dir, tokenizer):
    config = LMConfig.from_json(data_dir / "hf_checkpoint_meta" / "config.json")
    return PromptTemplate.from_tokenizer(tokenizer, config)


@pytest.fixture(scope="module")
def vectors(parity_dir):
    return load_file(str(parity_dir / "tiny_lm_vectors.safetensors"))


@pytest.fixture(scope="module")
def cases(parity_dir):
    with (parity_dir / "tiny_lm_vectors.json").open(encoding="utf-8") as handle:
        return json.load(handle)["cases"]


@pytest.fixture(scope="module")
def zh1_codes(data_dir):
    return np.load(data_dir / "codec" / "zh_1.prompt_codes.npy")


def test_template_blocks(template):
    assert list(template.user_prefix) == USER_PREFIX
    assert list(template.no_reference) == NONE_IDS
    assert list(template.after_reference) == AFTER_REFERENCE
    assert list(template.assistant_prefix) == ASSISTANT_PREFIX
    assert len(AFTER_REFERENCE) == 56


def _case_rows(case: dict, tokenizer, template, codes) -> np.ndarray:
    kwargs = case["build_inference_input_ids_kwargs"]
    text = kwargs["text"]
    if kwargs.get("prompt_text") is not None:
        text = kwargs["prompt_text"] + text  # one string, one encode call (docs/spec/LM.md §4.4)
    prompt_codes = codes if "prompt_audio_codes" in kwargs else None
    return build_prompt_rows(template, kwargs["mode"], tokenizer.encode(text), prompt_codes)


@pytest.mark.parametrize(
    "name", ["A_voice_clone_en", "B_voice_clone_zh", "C_continuation_prompted", "D_continuation_text_only"]
)
def test_parity_cases(name, cases, vectors, tokenizer, template, zh1_codes):
    rows = _case_rows(cases[name], tokenizer, template, zh1_codes)
    expected = vectors[f"{name}.input_ids"]
    assert rows.dtype == np.int64
    assert rows.shape == expected.shape == (cases[name]["input_len"], 17)
    np.testing.assert_array_equal(rows, expected)


def test_batch_ab_rows_are_the_unpadded_prompts(cases, vectors, tokenizer, template, zh1_codes):
    batch = vectors["batch_AB.input_ids"]
    mask = vectors["batch_AB.attention_mask"].astype(bool)
    for index, name in enumerate(["A_voice_clone_en", "B_voice_clone_zh"]):
        rows = _case_rows(cases[name], tokenizer, template, zh1_codes)
        np.testing.assert_array_equal(batch[index][mask[index]], rows)


def test_voice_clone_layout(template, zh1_codes):
    text_ids = [558, 760, 4002]
    rows = build_prompt_rows(template, "voice_clone", text_ids, zh1_codes)
    frames = zh1_codes.shape[0]
    assert rows.shape == (78 + frames + len(text_ids), 17)
    audio = rows[14 : 14 + frames]
    assert (audio[:, 0] == 8).all()
    np.testing.assert_array_equal(audio[:, 1:], zh1_codes)
    text = np.concatenate([rows[:14], rows[14 + frames :]])
    assert (text[:, 1:] == 1024).all()
    assert rows[13, 0] == 6 and rows[14 + frames, 0] == 7 and rows[-1, 0] == 6


def test_text_only_continuation_layout(template):
    rows = build_prompt_rows(template, "continuation", [])
    assert rows.shape == (78, 17)  # 13 + 2 + 56 + 0 + 6 + 1 (docs/spec/LM.md §4.2)
    assert rows[-1, 0] == 6 and (rows[:, 1:] == 1024).all()


def test_continuation_with_codes_uses_assistant_slot(template, zh1_codes):
    rows = build_prompt_rows(template, "continuation", [1, 2], zh1_codes[:5])
    assert (rows[-5:, 0] == 9).all()
    np.testing.assert_array_equal(rows[-5:, 1:], zh1_codes[:5])


@pytest.mark.parametrize(
    ("codes", "message"),
    [
        (np.zeros((4, 15), dtype=np.int64), r"shape \[frames, 16\]"),
        (np.zeros((0, 16), dtype=np.int64), r"frames >= 1"),
        (np.zeros(16, dtype=np.int64), r"shape"),
        (np.full((2, 16), 1024, dtype=np.int64), r"outside \[0, 1024\)"),
        (np.full((2, 16), -1, dtype=np.int64), r"outside"),
        (np.zeros((2, 16), dtype=np.float32), r"integers"),
    ],
)
def test_bad_codes_are_rejected(template, codes, message):
    with pytest.raises(ValueError, match=message):
        build_prompt_rows(template, "voice_clone", [1], codes)


def test_mode_errors(template, zh1_codes):
    with pytest.raises(ValueError, match="needs reference codes"):
        build_prompt_rows(template, "voice_clone", [1])
    with pytest.raises(ValueError, match="mode must be"):
        build_prompt_rows(template, "plain", [1], zh1_codes)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-negative"):
        build_prompt_rows(template, "continuation", [-1])


def test_validate_codes_returns_int64_copy(template):
    codes = np.arange(32, dtype=np.int32).reshape(2, 16)
    out = validate_codes(template, codes)
    assert out.dtype == np.int64 and out.flags.c_contiguous
    np.testing.assert_array_equal(out, codes)
