"""Estimated word times: each word of a piece of text placed within that piece's measured audio span.

The model does not align text to audio, so nothing here is measured per word: a piece's audio span
(its first to its last sample, pauses inside included) is shared among its words in proportion to
their letters (one share more per word, for the gap between words). Words are the text's
whitespace-separated tokens, punctuation attached, exactly as the client sent them; in scripts
written without spaces each CJK or kana character is a word, as Cartesia reports them. Pure function.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WordTime:
    """One word and its estimated start and end, in seconds of the utterance's audio."""

    word: str
    start: float
    end: float


def _is_wide(ch: str) -> bool:
    return "\u3040" <= ch <= "\u30ff" or "\u3400" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af"


def split_words(text: str) -> list[str]:
    """The words of `text` (see the module docstring); punctuation stays on the word before it."""
    words: list[str] = []
    for token in text.split():
        if not any(_is_wide(ch) for ch in token):
            words.append(token)
            continue
        current = ""
        for ch in token:
            if _is_wide(ch):
                if current:
                    words.append(current)
                current = ch
            else:
                current += ch  # punctuation (and Latin letters) stay with the character before
        if current:
            words.append(current)
    return words


def _weight(word: str) -> float:
    return 1.0 + sum(ch.isalnum() for ch in word)


def estimate_word_times(text: str, start_s: float, end_s: float) -> list[WordTime]:
    """`text`'s words spread over [start_s, end_s] (see the module docstring); [] when it has none."""
    words = split_words(text)
    if not words:
        return []
    span = max(0.0, end_s - start_s)
    weights = [_weight(word) for word in words]
    total = sum(weights)
    out, at = [], start_s
    for word, weight in zip(words, weights):
        length = span * weight / total
        out.append(WordTime(word, round(at, 3), round(at + length, 3)))
        at += length
    return out
