"""SentencePiece text tokenizer of MOSS-TTS-Nano (docs/spec/LM.md §4.1).

Plain `SentencePieceProcessor.encode` semantics, which is what the reference calls for ordinary
text: no BOS/EOS, the model's own `nmt_nfkc` normalisation and dummy prefix. Control pieces
(`<s>`, `</s>`, `<pad>`) are never produced from text; their literal strings are byte-encoded.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import sentencepiece as spm

logger = logging.getLogger(__name__)


class TextTokenizer:
    """Encode text to ids of the 16,384-entry SentencePiece BPE vocabulary."""

    def __init__(self, processor: spm.SentencePieceProcessor):
        self._sp = processor

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> TextTokenizer:
        """Load `tokenizer.model` (a file, or a directory holding one)."""
        model_path = Path(os.fspath(path))
        if model_path.is_dir():
            model_path = model_path / "tokenizer.model"
        if not model_path.is_file():
            raise FileNotFoundError(
                f"SentencePiece model not found at {model_path}: pass the checkpoint's tokenizer.model"
            )
        processor = spm.SentencePieceProcessor()
        processor.Load(str(model_path))
        logger.debug("loaded tokenizer %s (%d pieces)", model_path, processor.GetPieceSize())
        return cls(processor)

    def encode(self, text: str) -> list[int]:
        """Ids of `text`; each call adds its own dummy-prefix `▁`, as the reference's separate calls do."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not text.isascii():
            # Lone surrogates (JSON "\ud800" decodes to one) cannot cross into SentencePiece's UTF-8;
            # they become "?" instead of a RuntimeError. Valid text is unchanged.
            text = text.encode("utf-8", "replace").decode("utf-8")
        return list(self._sp.EncodeAsIds(text))
