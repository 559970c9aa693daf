"""TextTokenizer against the golden ids of the real SentencePiece model."""

from __future__ import annotations

import json

import pytest
import sentencepiece as spm

from tts_core.tokenizer import TextTokenizer


@pytest.fixture(scope="module")
def tokenizer(data_dir):
    return TextTokenizer.from_file(data_dir / "hf_checkpoint_meta" / "tokenizer.model")


@pytest.fixture(scope="module")
def golden(data_dir):
    with (data_dir / "golden" / "tokenizer_ids.json").open(encoding="utf-8") as handle:
        return json.load(handle)


def test_golden_ids(tokenizer, golden):
    assert golden["cases"], "golden file has no cases"
    for case in golden["cases"]:
        assert tokenizer.encode(case["text"]) == case["ids"], repr(case["text"])


def test_model_file_has_the_golden_vocab_and_reserved_pieces(data_dir, golden):
    """The tokenizer.model under test is the released one: the ids above and the control ids
    assumed below (0-3) mean what the golden file says."""
    processor = spm.SentencePieceProcessor()
    processor.Load(str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"))
    assert processor.GetPieceSize() == golden["vocab_size"] == 16384
    for token_id, piece in golden["first_16_pieces"].items():
        assert processor.IdToPiece(int(token_id)) == piece
        assert processor.PieceToId(piece) == int(token_id)


def test_directory_path_is_accepted(data_dir, golden):
    tokenizer = TextTokenizer.from_file(data_dir / "hf_checkpoint_meta")
    case = golden["cases"][0]
    assert tokenizer.encode(case["text"]) == case["ids"]


@pytest.mark.parametrize("literal", ["</s>", "<s>", "<pad>", "<unk>", "say </s> now <pad>"])
def test_literal_control_strings_never_become_control_ids(tokenizer, literal):
    ids = tokenizer.encode(literal)
    assert ids, literal
    assert not {0, 1, 2, 3} & set(ids), (literal, ids)


def test_whitespace_only_text_encodes_to_nothing(tokenizer):
    for text in ("", " ", "\n", "\t\n "):
        assert tokenizer.encode(text) == []


def test_missing_model_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.model"):
        TextTokenizer.from_file(tmp_path)


def test_encode_rejects_non_strings(tokenizer):
    with pytest.raises(TypeError):
        tokenizer.encode(b"bytes")  # type: ignore[arg-type]
