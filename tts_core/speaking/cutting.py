"""Text that arrives in pieces -> the spans speech can start on: `TextBuffer`, pure bookkeeping.

An agent's LLM writes its reply a few characters at a time. The buffer keeps what has not been
spoken yet and hands out, when asked, everything up to its last place where speech can start: after
a sentence or clause mark (the marks of `text.chunking`, closers included), never after a decimal
point ("3.5"), a thousands comma ("1,000") or a common abbreviation ("Mr."). A mark at the very end
of the buffer counts at once (the next token may be a while), except after a digit or an
abbreviation, which wait for the next character. `mark(tag)` (a flush) makes the text so far a piece
of its own, whatever follows: the next `take` ends there and carries the tag (a mark with no text
before it gives a cut with no text). `take(force=True)` (the end of input) hands out everything;
once the oldest unspoken character is older than the buffer's delay, what is there goes at the last
word boundary (all of it when there is none).

Invariant: everything taken, then what is left, concatenated, equals everything pushed, in order.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..text.chunking import CLAUSE_END, CLOSERS, SENTENCE_END

MARKS = SENTENCE_END | CLAUSE_END | frozenset("…")
# Marks of scripts written without spaces: a boundary even with no space after them.
WIDE_MARKS = frozenset("。！？；，、：…")
# Marks that a digit before them makes ambiguous at the end of the buffer ("3." -> "3.5").
_NUMERIC_MARKS = frozenset(".,:")
_ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "no",
                            "mt", "ft", "approx", "dept", "inc", "ltd", "co"})


@dataclass(frozen=True, slots=True)
class Cut:
    """What `take` hands out: the text, why it was cut there, and the marks it ends (their tags)."""

    text: str
    reason: str  # "sentence", "clause", "forced" (a mark or the end of input), "deadline", "mark" (no text)
    marks: tuple[int, ...] = ()


def _word_before(text: str, index: int) -> str:
    """The word that ends just before `index` (letters and inner dots), lower-cased."""
    start = index
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "."):
        start -= 1
    return text[start:index].lower()


def _is_abbreviation(text: str, mark_index: int) -> bool:
    """"Mr." or an initial ("J."): a dot that does not end a sentence."""
    word = _word_before(text, mark_index)
    return word in _ABBREVIATIONS or (len(word) == 1 and text[mark_index - 1].isupper())


def boundaries(text: str) -> list[tuple[int, str]]:
    """Every place in `text` where speech may start: (index just after the mark and its closers,
    "sentence" or "clause"), in order. The whitespace after a boundary belongs to the next piece."""
    found: list[tuple[int, str]] = []
    index, size = 0, len(text)
    while index < size:
        ch = text[index]
        if ch not in MARKS:
            index += 1
            continue
        mark_index = index
        while index < size and text[index] in MARKS:  # "?!", "...": one group
            index += 1
        while index < size and text[index] in CLOSERS:
            index += 1
        kind = "sentence" if any(c in SENTENCE_END or c == "…" for c in text[mark_index:index]) else "clause"
        last_mark = text[index - 1] if text[index - 1] in MARKS else text[mark_index]
        if index < size:
            if not (text[index].isspace() or last_mark in WIDE_MARKS or text[mark_index] in WIDE_MARKS):
                continue  # "3.5", "1,000", "a.m": not a boundary
            if ch == "." and _is_abbreviation(text, mark_index):
                continue
            found.append((index, kind))
            continue
        # The mark ends the buffer: count it unless the next character could change its meaning.
        if ch in _NUMERIC_MARKS and mark_index > 0 and text[mark_index - 1].isdigit():
            continue
        if ch == "." and _is_abbreviation(text, mark_index):
            continue
        found.append((index, kind))
    return found


class TextBuffer:
    """Unspoken text of one utterance (see the module docstring). Not thread-safe.

    Args:
        max_delay_s: how long text may wait for a boundary before it is spoken anyway (0: every
            push is spoken as soon as it is taken, the client cutting its own text).
        max_piece_chars: the longest text one `take` hands out (cut at the last boundary or word
            boundary within it).
    """

    def __init__(self, *, max_delay_s: float, max_piece_chars: int):
        if max_delay_s < 0:
            raise ValueError(f"max_delay_s must be >= 0, got {max_delay_s!r}")
        if max_piece_chars < 1:
            raise ValueError(f"max_piece_chars must be >= 1, got {max_piece_chars!r}")
        self.max_delay_s = float(max_delay_s)
        self.max_piece_chars = int(max_piece_chars)
        self._text = ""
        self._since: float | None = None  # when the oldest unspoken character arrived
        self._marks: list[tuple[int, int]] = []  # (position in the text, tag), in order

    @property
    def text(self) -> str:
        return self._text

    def __len__(self) -> int:
        return len(self._text)

    def push(self, text: str, now: float) -> None:
        if not text:
            return
        if self._since is None:
            self._since = now
        self._text += text

    def clear(self) -> None:
        self._text, self._since, self._marks = "", None, []

    def mark(self, tag: int) -> None:
        """The text so far ends a piece (see the module docstring)."""
        self._marks.append((len(self._text), tag))

    def deadline(self) -> float | None:
        """When the buffered text is spoken even without a boundary (None: nothing buffered)."""
        if self._since is None or not self._text.strip():
            return None
        return self._since + self.max_delay_s

    def take(self, now: float, *, force: bool = False) -> Cut | None:
        """The text speech can start on now (None when there is none): see the module docstring."""
        lead = len(self._text) - len(self._text.lstrip())  # leading whitespace rides along, uncounted
        limit = lead + self.max_piece_chars
        if self._marks and not self._text[: self._marks[0][0]].strip():
            return self._cut(self._marks[0][0], "mark", now)  # a flush with no text before it
        if self._marks and self._marks[0][0] <= limit:
            return self._cut(self._marks[0][0], "forced", now)
        if not self._text.strip():
            return None  # whitespace alone is never spoken (it stays, for the text after it)
        over = len(self._text) > limit
        if force and not over:
            return self._cut(len(self._text), "forced", now)
        reach = [b for b in boundaries(self._text) if b[0] <= limit and self._text[: b[0]].strip()]
        if reach:
            return self._cut(*reach[-1], now)
        deadline = self.deadline()
        if not (force or over or (deadline is not None and now >= deadline)):
            return None
        reason = "forced" if force else "deadline"
        if not over and self.max_delay_s == 0:
            return self._cut(len(self._text), reason, now)  # the client cuts its own text
        window = self._text[:limit]
        space = max(window.rfind(" ", lead), window.rfind("\n", lead))
        if space > lead and window[:space].strip():
            return self._cut(space, reason, now)
        return self._cut(len(window), reason, now)

    def _cut(self, end: int, reason: str, now: float) -> Cut:
        """Hand out text[:end]; what is left waits from now on. A forced cut that ends at a boundary
        is named after the boundary (the pause after it depends on that)."""
        text, self._text = self._text[:end], self._text[end:]
        ended = tuple(tag for position, tag in self._marks if position <= end)
        self._marks = [(position - end, tag) for position, tag in self._marks if position > end]
        if reason in ("forced", "deadline"):
            stripped = text.rstrip()
            found = boundaries(stripped)
            if found and found[-1][0] == len(stripped):
                reason = found[-1][1]
        self._since = now if self._text.strip() else None
        return Cut(text, reason, ended)
