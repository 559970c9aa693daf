"""Text front-end: cleanup (LM.md §4.6), language guess, long-text chunking and pauses (§4.7).

Pure functions, no state. `normalize_text` is our own implementation of the upstream
non-semantic cleanup (`normalize_tts_text`); WeTextProcessing is not used. In its place
`read_numbers=True` spells out a small, safe set of numbers (see `_read_numbers`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from .errors import InvalidRequestError, PayloadTooLargeError

# Scripts written without spaces between words (ideographs + kana), per the upstream rules.
_CJK = "[\u3400-\u4dbf\u4e00-\u9fff\u3040-\u30ff]"
# Each protected span (URL, e-mail, file name...) is swapped for one private-use character while
# the other rules run. Private-use input characters are dropped first, so these cannot collide.
_PROT_BASE, _PROT_MAX = 0xE000, 0xF8FF - 0xE000
_PROT = "[\ue000-\uf8ff]"
_TOK = r"A-Za-z0-9./+:\-"  # characters of "Latin-ish" tokens (versions, paths, words)

_ZERO_WIDTH = re.compile("[\u200b-\u200d\u2060\ufeff]")
_MD_LINK = re.compile(r"\[([^\[\]\n]+?)\]\((https?://[^)\s]+)\)")
_MD_PREFIXES = tuple(re.compile(p) for p in (r"^#{1,6}\s+", r"^>\s+", r"^[-*+]\s+", r"^\d+[.)]\s+"))
_ARROW = re.compile(r"\s*(?:<[-=]+>|[-=]+>|<[-=]+|[→←↔⇒⇐⇔⟶⟵⟷⟹⟸⟺↦↤↪↩])\s*")
_PROTECTORS = (
    re.compile(r"https?://[^\s，。！？；、）】》〉」』]+", re.IGNORECASE),  # URL
    re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
               r"(?![\w.-])"),  # e-mail
    re.compile(r"(?<![A-Za-z0-9_])@[A-Za-z0-9_]{1,32}"),  # @mention
    re.compile(r"(?<![A-Za-z0-9_/])[ru]/[A-Za-z0-9_]+"),  # reddit r/ u/
    re.compile(r"(?<![A-Za-z0-9_&])#[^\s#，。！？；：、,!?;]+"),  # #hashtag
    re.compile(r"(?<![A-Za-z0-9_.])\.[A-Za-z0-9][A-Za-z0-9_.-]*"),  # .env, .gitignore
    re.compile(rf"(?<![{_TOK}_])[{_TOK}_]+"),  # candidate file/version token, checked in _protect
)
_TRAILING_JUNK = ".,;:!?'\"-_/+"
_URL_TRAILING = ".,;:!?'\""
_CLOSERS = frozenset("\"')]}）】》〉」』”’")
_SENTENCE_END = frozenset(".!?。！？；;")
_CLAUSE_END = frozenset(",，、；;：:")
_CHUNK_CLOSERS = frozenset("\"'”’)]}）】》」』")


def normalize_text(text: str, *, read_numbers: bool = True, language: str | None = None) -> str:
    """Non-semantic cleanup of LM.md §4.6 (+ optional number reading). Never raises on a str.

    Args:
        text: raw user text (any Unicode).
        read_numbers: spell out plain integers, decimals and percentages in Chinese or English
            text (Japanese/other text keeps its digits), see `_read_numbers`; in Chinese text also
            turn a hyphen between two CJK characters into "，" (the upstream pre-WeText step).
        language: the language numbers are read in; default `detect_language(text)`. Pass
            `detect_language(text, voice_language)` so digit-only text follows the voice.
    """
    text = _base_cleanup(text)
    text = _markdown_and_lines(text)
    text = _ARROW.sub("，", text)
    text, spans = _protect(text)
    text = text.replace("_", " ")  # underscores inside protected spans are hidden, so kept
    text = _normalize_spaces(text)
    text = _structural_punctuation(text)
    text = _repeated_punctuation(text)
    text = _normalize_spaces(text)
    if read_numbers:
        language = language or detect_language(text)
        if language == "zh":
            text = re.sub(rf"({_CJK})\s*-\s*(?={_CJK})", r"\1，", text)  # 中文-中文 is a pause
        text = _read_numbers(text, language)
    text = _restore(text, spans).strip()
    return _ensure_terminal(text)


def _base_cleanup(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\u3000", " ")
    text = _ZERO_WIDTH.sub("", text)
    # Drop every "C*" character (controls, format, surrogates, private use, unassigned).
    return "".join(ch for ch in text if ch in "\n\t" or not unicodedata.category(ch).startswith("C"))


def _markdown_and_lines(text: str) -> str:
    text = _MD_LINK.sub(r"\1 \2", text)
    lines = []
    for raw in text.split("\n"):
        line = raw.strip()
        for prefix in _MD_PREFIXES:  # heading, quote, bullet, number: each stripped once, in order
            line = prefix.sub("", line)
        if line:
            lines.append(line)
    # Each line is a sentence. Joined with a space (upstream joins with ""), so English keeps
    # "line. Next"; the space rules below remove it again next to CJK punctuation.
    return " ".join([_ensure_terminal(line) for line in lines[:-1]] + lines[-1:])


def _protect(text: str) -> tuple[str, list[str]]:
    spans: list[str] = []

    def hide(core: str) -> str:
        if len(spans) > _PROT_MAX:
            return core
        spans.append(_restore(core, spans))  # a span may swallow earlier ones (#@x): store it flat
        return chr(_PROT_BASE + len(spans) - 1)

    def repl(match: re.Match[str]) -> str:
        token = match.group(0)
        lead = ""
        if match.re is _PROTECTORS[-1]:
            # A file/version-like token: starts with an alphanumeric, has a letter and a . / + : -
            stripped = token.lstrip("./+:-_")
            lead, token = token[: len(token) - len(stripped)], stripped
        if match.re is _PROTECTORS[0]:
            core = token.rstrip(_URL_TRAILING)
            if core.endswith(")") and "(" not in core:
                core = core.rstrip(")")
        elif token.startswith(("#", "@")):
            core = token.rstrip(".")
        else:
            core = token.rstrip(_TRAILING_JUNK)
        tail = token[len(core):]
        if match.re is _PROTECTORS[-1] and (
            not re.search("[A-Za-z]", core) or not re.search(r"[./+:\-]", core)
        ):
            return match.group(0)
        return lead + (hide(core) if core else "") + tail

    for pattern in _PROTECTORS:
        text = pattern.sub(repl, text)
    return text, spans


def _restore(text: str, spans: list[str]) -> str:
    if not spans:
        return text
    return re.sub(_PROT, lambda m: spans[ord(m.group(0)) - _PROT_BASE], text)


def _latin_then_cjk(match: re.Match[str]) -> str:
    token = match.group(0)
    core = token.lstrip("./+:-")
    is_latinish = re.match(_PROT, token) or (core[:1].isascii() and re.search("[A-Za-z]", core))
    return token + " " if is_latinish else token


def _normalize_spaces(text: str) -> str:
    text = re.sub(r"\s+", " ", text)
    text = re.sub(rf"({_CJK}) (?={_CJK})", r"\1", text)
    text = re.sub(rf"({_CJK}) (?=[0-9])", r"\1", text)
    text = re.sub(rf"([0-9]) (?={_CJK})", r"\1", text)
    # One space between CJK and a Latin-ish / protected token, none between CJK and digits.
    text = re.sub(rf"({_CJK})(?={_PROT}|[A-Za-z]|[0-9][{_TOK}]*?[A-Za-z])", r"\1 ", text)
    text = re.sub(rf"(?:(?<![{_TOK}])[{_TOK}]+|{_PROT})(?={_CJK})", _latin_then_cjk, text)
    text = re.sub(r" +([，。！？；：、”’」』】）》])", r"\1", text)
    text = re.sub(r"([（【「『《“‘]) +", r"\1", text)
    text = re.sub(r"([，。！？；：、]) +", r"\1", text)
    text = re.sub(r" +([,.;!?])", r"\1", text)
    return re.sub(" {2,}", " ", text).strip()


def _structural_punctuation(text: str) -> str:
    text = re.sub(r"\[\s*([^\[\]]+?)\s*\]", r'"\1"', text)
    text = re.sub(r"\{\s*([^{}]+?)\s*\}", r'"\1"', text)
    for _ in range(3):  # innermost first, so nested CJK brackets also become quotes
        text, count = re.subn(r"[【〖『「]\s*([^【〖『「】〗』」]+?)\s*[】〗』」]", r'"\1"', text)
        if not count:
            break
    if re.search("[】〗』」]", text):  # unbalanced leftovers: outermost pair, as upstream
        text = re.sub(r"[【〖『「]\s*([^】〗』」]+?)\s*[】〗』」]", r'"\1"', text)
    # A stand-alone 《title》 (own sentence/heading) loses its marks; an embedded one keeps them.
    text = re.sub(
        rf"(^|[。！？!?；;]\s*)《([^《》]+)》(?=\s*(?:{_PROT}|[—–―-]{{2,}}|$|[。！？!?；;，,]))",
        r"\1\2",
        text,
    )
    text = _ARROW.sub("，", text)
    return re.sub(r"\s*[—–―-]{2,}\s*", "。", text)


def _mixed_marks(match: re.Match[str]) -> str:
    run = match.group(0)
    has_question, has_bang = any(c in "?？" for c in run), any(c in "!！" for c in run)
    return "？！" if has_question and has_bang else ("？" if has_question else "！")


def _repeated_punctuation(text: str) -> str:
    text = re.sub(r"\.{3,}|…+", "。", text)
    text = re.sub(r"[。．]{2,}", "。", text)
    text = re.sub(r"[，,]{2,}", "，", text)
    return re.sub(r"[!?！？]{2,}", _mixed_marks, text)


def _ensure_terminal(text: str) -> str:
    """Append "。" unless the last character before any closers is punctuation."""
    end = len(text.rstrip())
    while end > 0 and text[end - 1] in _CLOSERS:
        end -= 1
    if not text or (end > 0 and unicodedata.category(text[end - 1]).startswith("P")):
        return text
    return text + "。"


# ---------------------------------------------------------------------------------------------
# Number reading. Covers, in zh or en text only: integers (0 .. 10^16-1 zh, 0 .. 10^12-1 en,
# optional 1,234 grouping), decimals (3.14), and percentages (50%, 2.5％). A 4-digit number
# before 年 and any number with a leading zero or too many digits is read digit by digit; a
# lone 2 before a measure word becomes 两 (not after 第). Left alone: signs, currency, ranges,
# dates, times, versions, ordinals and anything glued to letters (those need real semantic TN).
# ---------------------------------------------------------------------------------------------
_NUMBER = re.compile(
    r"(?<![A-Za-z0-9_.,:/+\-$€£¥￥#@])([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.([0-9]+))?([%％]?)"
    r"(?![A-Za-z0-9_%％]|[.,:/\-][0-9])"
)
_ZH_DIGITS = "零一二三四五六七八九"
_ZH_MEASURES = frozenset("个位只条次天本张件种名岁年周页人家台辆块点分秒")  # not 月: 2月 is 二月
_EN_ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
            "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_EN_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_EN_SCALES = ("", " thousand", " million", " billion")


def _read_numbers(text: str, language: str) -> str:
    if language not in ("zh", "en"):
        return text

    def repl(match: re.Match[str]) -> str:
        integer, fraction, percent = match.group(1).replace(",", ""), match.group(2), match.group(3)
        start, end = match.span()
        before, after = match.string[start - 1:start], match.string[end:end + 1]
        if language == "zh":
            if not fraction and not percent and (len(integer) == 4 and after == "年"):
                spoken = _zh_digits(integer)
            elif integer == "2" and not fraction and not percent and after in _ZH_MEASURES and before != "第":
                spoken = "两"
            else:
                spoken = _zh_number(integer) + ("点" + _zh_digits(fraction) if fraction else "")
            return "百分之" + spoken if percent else spoken
        spoken = _en_number(integer) + (" point " + _en_digits(fraction) if fraction else "")
        return spoken + " percent" if percent else spoken

    return _NUMBER.sub(repl, text)


def _zh_digits(digits: str) -> str:
    return "".join(_ZH_DIGITS[int(d)] for d in digits)


def _zh_below_10k(value: int) -> str:
    out, pending_zero = [], False
    for unit_value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        digit = value // unit_value % 10
        if digit == 0:
            pending_zero = pending_zero or bool(out)
            continue
        if pending_zero:
            out.append("零")
            pending_zero = False
        out.append(("两" if digit == 2 and unit == "千" else _ZH_DIGITS[digit]) + unit)  # 两千, not 二千
    return "".join(out)


def _zh_number(digits: str) -> str:
    if (len(digits) > 1 and digits[0] == "0") or len(digits) > 16:
        return _zh_digits(digits)
    value = int(digits)
    if value == 0:
        return "零"
    groups, out, skipped = [], "", False
    while value:
        value, group = divmod(value, 10_000)
        groups.append(group)
    for index in range(len(groups) - 1, -1, -1):
        group = groups[index]
        if group == 0:
            skipped = bool(out)
            continue
        if out and (skipped or group < 1000):
            out += "零"
        spoken = "两" if group == 2 and index > 0 else _zh_below_10k(group)  # 两万, 两亿
        out += spoken + ("", "万", "亿", "万亿")[index]
        skipped = False
    return out[1:] if out.startswith("一十") else out  # 10-19 read 十X, not 一十X


def _en_digits(digits: str) -> str:
    return " ".join(_EN_ONES[int(d)] for d in digits)


def _en_below_1000(value: int) -> str:
    words = [f"{_EN_ONES[value // 100]} hundred"] if value >= 100 else []
    rest = value % 100
    if rest >= 20:
        words.append(_EN_TENS[rest // 10] + (f"-{_EN_ONES[rest % 10]}" if rest % 10 else ""))
    elif rest:
        words.append(_EN_ONES[rest])
    return " ".join(words)


def _en_number(digits: str) -> str:
    if (len(digits) > 1 and digits[0] == "0") or len(digits) > 12:
        return _en_digits(digits)
    value, parts, scale = int(digits), [], 0
    if value == 0:
        return "zero"
    while value:
        value, group = divmod(value, 1000)
        if group:
            parts.append(_en_below_1000(group) + _EN_SCALES[scale])
        scale += 1
    return " ".join(reversed(parts))


# ---------------------------------------------------------------------------------------------
# Language, validation, chunking
# ---------------------------------------------------------------------------------------------
def detect_language(text: str, voice_language: str | None = None) -> str:
    """The upstream WeText rule (§4.6) plus kana -> "ja" and hangul -> "ko".

    Kana anywhere -> "ja"; else any U+3400-U+9FFF ideograph -> "zh"; else hangul -> "ko"; else
    any ASCII letter -> "en"; else the voice's language if given, else "zh" (upstream default).
    """
    has_han = has_hangul = has_ascii_letter = False
    for ch in text:
        if "\u3040" <= ch <= "\u30ff":
            return "ja"
        if "\u3400" <= ch <= "\u9fff":
            has_han = True
        elif "\uac00" <= ch <= "\ud7af" or "\u1100" <= ch <= "\u11ff" or "\u3130" <= ch <= "\u318f":
            has_hangul = True
        elif ch.isascii() and ch.isalpha():
            has_ascii_letter = True
    if has_han:
        return "zh"
    if has_hangul:
        return "ko"
    if has_ascii_letter:
        return "en"
    return voice_language or "zh"


def is_speakable(text: str) -> bool:
    """True when the text has at least one letter or digit (any script)."""
    return any(unicodedata.category(ch)[0] in "LN" for ch in text)


def check_text(text: object, max_chars: int) -> str:
    """Validate user text; returns it stripped. Raises InvalidRequestError(param="text")."""
    if not isinstance(text, str):
        raise InvalidRequestError(f"text must be a string, got {type(text).__name__}", param="text")
    stripped = text.strip()
    if not stripped:
        raise InvalidRequestError("text is empty: type something to say", param="text", code="empty_text")
    if len(stripped) > max_chars:
        raise PayloadTooLargeError(
            f"text is too long: {len(stripped)} characters, the limit is {max_chars}; "
            "split it into several requests",
            param="text",
            code="text_too_long",
        )
    if not is_speakable(stripped):
        raise InvalidRequestError(
            "text has nothing to say: it contains only punctuation, symbols or emoji",
            param="text",
            code="nothing_to_say",
        )
    return stripped


def pause_after_chunk_s(chunk: str) -> float:
    """Silence after a chunk (§4.7): 0.40 s for ≤ 4 whitespace words (all CJK chunks), else 0.24 s."""
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
        return text if text[-1] in _SENTENCE_END else text + "。"
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
            while index < len(text) and text[index] in _CHUNK_CLOSERS:
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
    boundaries = _CLAUSE_END | _SENTENCE_END | {" "}
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
    """Split long text into chunks of at most `max_tokens` tokens (§4.7, HF/ONNX algorithm).

    Sentences (after .!?。！？；; plus closers), then clauses (,，、；;：:) for sentences over budget,
    then a greedy cut; pieces are packed greedily (joined with "" next to CJK, else " "). A single
    resulting chunk is the original (stripped) text. `max_tokens <= 0` disables splitting.
    Deviation: a join whose re-tokenised count exceeds the budget starts a new chunk instead.
    """
    original = text.strip()
    if not original:
        return []
    if max_tokens <= 0:
        return [original]
    prepared = _prepare_for_chunking(original)
    pieces: list[tuple[int, str]] = []
    for sentence in _split_after(prepared, _SENTENCE_END):
        count = count_tokens(sentence)
        if count <= max_tokens:
            pieces.append((count, sentence))
            continue
        for clause in _split_after(sentence, _CLAUSE_END):
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
