"""Long text -> chunks that fit the model's text budget, and the pause after each (docs/spec/LM.md §4.7).

Pure functions: the token counter is passed in, so this module knows nothing of the tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable

SENTENCE_END = frozenset(".!?。！？；;")
CLAUSE_END = frozenset(",，、；;：:")
CLOSERS = frozenset("\"'”’)]}）】》」』")


def pause_after_chunk_s(chunk: str) -> float:
    """Silence after a chunk (docs/spec/LM.md §4.7): 0.40 s for ≤ 4 whitespace words (all CJK
    chunks), else 0.24 s."""
    return 0.40 if len(chunk.split()) <= 4 else 0.24


def _has_cjk_or_hangul(text: str) -> bool:
    return any("\u3400" <= ch <= "\u9fff" or "\u3040" <= ch <= "\u30ff" or "\uac00" <= ch <= "\ud7af"
               for ch in text)


def _prepare_for_chunking(text: str) -> str:
    text = text.strip().replace("\r", " ").replace("\n", " ")
    while "  " in text:
        text = text.replace("  ", " ")
    if not text:
        return text
    if _has_cjk_or_hangul(text):
        return text if text[-1] in SENTENCE_END else text + "。"
    if text[0].islower():
        text = text[0].upper() + text[1:]
    # (Upstream also prepends 8 spaces to texts under 5 words; they are stripped again later.)
    return text + "." if text[-1].isalnum() else text


def _split_after(text: str, marks: frozenset[str]) -> list[str]:
    """Split after each mark, keeping any closers that follow it; drop the whitespace after."""
    pieces, start, index = [], 0, 0
    while index < len(text):
        if text[index] in marks:
            index += 1
            while index < len(text) and text[index] in CLOSERS:
                index += 1
            pieces.append(text[start:index].strip())
            while index < len(text) and text[index].isspace():
                index += 1
            start = index
        else:
            index += 1
    pieces.append(text[start:].strip())
    return [piece for piece in pieces if piece]


def _cut_to_budget(text: str, count_tokens: Callable[[str], int], max_tokens: int) -> list[str]:
    """Greedy cut: longest prefix within budget, moved back to a boundary in its last 24 chars."""
    boundaries = CLAUSE_END | SENTENCE_END | {" "}
    pieces, rest = [], text.strip()
    while rest:
        if count_tokens(rest) <= max_tokens:
            pieces.append(rest)
            break
        low, high, best = 1, len(rest), 1
        while low <= high:  # binary search assumes counts grow with the prefix
            middle = (low + high) // 2
            candidate = rest[:middle].strip()
            if candidate and count_tokens(candidate) <= max_tokens:
                best, low = middle, middle + 1
            else:
                high = middle - 1
        cut = best
        for index in range(best - 1, max(-1, best - 25), -1):
            if rest[index] in boundaries:
                cut = index + 1
                break
        pieces.append(rest[:cut].strip())  # non-empty: rest starts with a non-space
        rest = rest[cut:].strip()
    return pieces


def split_text(text: str, count_tokens: Callable[[str], int], max_tokens: int = 75) -> list[str]:
    """Split long text into chunks of at most `max_tokens` tokens (docs/spec/LM.md §4.7): sentences,
    then clauses for sentences over budget, then a greedy cut; pieces packed greedily ("" next to CJK,
    else " "). One chunk is the stripped text; `max_tokens <= 0` disables splitting. Deviation: a
    join whose re-tokenised count exceeds the budget starts a new chunk."""
    original = text.strip()
    if not original:
        return []
    if max_tokens <= 0:
        return [original]
    prepared = _prepare_for_chunking(original)
    pieces: list[tuple[int, str]] = []
    for sentence in _split_after(prepared, SENTENCE_END):
        count = count_tokens(sentence)
        if count <= max_tokens:
            pieces.append((count, sentence))
            continue
        for clause in _split_after(sentence, CLAUSE_END):
            count = count_tokens(clause)
            if count <= max_tokens:
                pieces.append((count, clause))
            else:
                pieces.extend((count_tokens(p), p) for p in _cut_to_budget(clause, count_tokens, max_tokens))
    chunks: list[str] = []
    current, current_count = "", 0
    for count, piece in pieces:
        if current and current_count + count <= max_tokens:
            joiner = "" if _has_cjk_or_hangul(current) or _has_cjk_or_hangul(piece) else " "
            joined = current + joiner + piece
            joined_count = count_tokens(joined)
            if joined_count <= max_tokens:
                current, current_count = joined, joined_count
                continue
        if current:
            chunks.append(current)
        current, current_count = piece, count
    if current:
        chunks.append(current)
    return chunks if len(chunks) > 1 else [original]
