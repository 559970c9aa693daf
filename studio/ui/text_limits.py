"""Over-long text: speak the part that fits, cut where a reader would (a sentence end, else a word)."""

from __future__ import annotations

import re

# A sentence ends at . ! ? … or their CJK forms (plus closing quotes/brackets), or at a line break.
_SENTENCE_END = re.compile(r"(?:[.!?…][\"'”’)\]]*(?=\s)|[。！？][」』”’)）]*|\n)")
_CLAUSE_END = re.compile(r"[,;:，、；：]")
MIN_HEAD_SHARE = 0.5  # a sentence end earlier than this share of the limit cuts too much: use a word


def split_at_boundary(text: str, limit: int) -> tuple[str, str]:
    """(head, rest): head fits in `limit` characters and ends at a sentence end, else a word or clause
    end, else exactly at the limit (a text without any break); rest is what was left out (stripped)."""
    if len(text) <= limit:
        return text, ""
    window = text[: limit + 1]  # a boundary right after the limit's last character still counts
    cut = _last_end(_SENTENCE_END, window, limit)
    if cut < MIN_HEAD_SHARE * limit:
        spaces = [m.start() for m in re.finditer(r"\s", window)]
        clause = _last_end(_CLAUSE_END, window, limit)
        cut = max(spaces[-1] if spaces else 0, clause)
    if cut <= 0:
        cut = limit
    return text[:cut].rstrip(), text[cut:].strip()


def _last_end(pattern: re.Pattern, window: str, limit: int) -> int:
    ends = [m.end() for m in pattern.finditer(window) if m.end() <= limit]
    return ends[-1] if ends else 0
