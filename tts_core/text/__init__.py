"""Text front-end, pure functions: cleanup and number reading (docs/spec/LM.md §4.6), long-text chunking
and pauses (docs/spec/LM.md §4.7).

`normalize` (cleanup, language guess, validation) uses `numbers` (numbers in words); `chunking`
(sentence splitting within a token budget) stands alone.
"""

from __future__ import annotations

from .chunking import pause_after_chunk_s, split_text
from .normalize import check_text, detect_language, is_speakable, normalize_text

__all__ = [
    "check_text",
    "detect_language",
    "is_speakable",
    "normalize_text",
    "pause_after_chunk_s",
    "split_text",
]
