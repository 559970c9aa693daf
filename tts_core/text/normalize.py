"""Text cleanup (docs/spec/LM.md §4.6), language guess and validation of user text.

Pure functions, no state. `normalize_text` is our own implementation of the upstream
non-semantic cleanup (`normalize_tts_text`); WeTextProcessing is not used. In its place
`read_numbers=True` spells out a small, safe set of numbers (`numbers.spell_numbers`).
"""

from __future__ import annotations

import re
import unicodedata

from ..errors import InvalidRequestError, PayloadTooLargeError
from .numbers import spell_numbers

# Scripts written without spaces between words (ideographs + kana), per the upstream rules.
_CJK = "[\u3400-\u4dbf\u4e00-\u9fff\u3040-\u30ff]"
# Each protected span (URL, e-mail, file name...) is swapped for one private-use character while
# the other rules run. Private-use input characters are dropped first, so these cannot collide.
_PROT_BASE, _PROT_MAX = 0xE000, 0xF8FF - 0xE000
_PROT = "[\ue000-\uf8ff]"
_TOK = r"A-Za-z0-9./+:\-"  # characters of "Latin-ish" tokens (versions, paths, words)

_ZERO_WIDTH = re.compile("[\u200b-\u200d\u2060\ufeff]")
_ASCII_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f]")  # all but \t and \n
_ASCII_LETTER = re.compile("[A-Za-z]")
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
    # Candidate file/version token, checked in _protect: a maximal run holding a . / + : or - (a run
    # without one is never protected, so plain words are not matched at all).
    re.compile(rf"(?<![{_TOK}_])[{_TOK}_]*[./+:\-][{_TOK}_]*"),
)
_TRAILING_JUNK = ".,;:!?'\"-_/+"
_URL_TRAILING = ".,;:!?'\""
_CLOSERS = frozenset("\"')]}）】》〉」』”’")


def normalize_text(text: str, *, read_numbers: bool = True, language: str | None = None) -> str:
    """Non-semantic cleanup of docs/spec/LM.md §4.6 (+ optional number reading). Never raises on a str.

    Args:
        text: raw user text (any Unicode).
        read_numbers: spell out plain integers, decimals and percentages in Chinese or English
            text (Japanese/other text keeps its digits), see `numbers.spell_numbers`; in Chinese text also
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
        text = spell_numbers(text, language)
    text = _restore(text, spans).strip()
    return _ensure_terminal(text)


def _base_cleanup(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\u3000", " ")
    if text.isascii():  # the only "C*" characters of ASCII are its controls
        return _ASCII_CONTROLS.sub("", text)
    text = _ZERO_WIDTH.sub("", text)
    # Drop every "C*" character (controls, format, surrogates, private use, unassigned).
    return "".join(ch for ch in text if ch in "\n\t" or not unicodedata.category(ch).startswith("C"))


def _markdown_and_lines(text: str) -> str:
    text = _MD_LINK.sub(r"\1 \2", text)
    lines = []
    for raw in text.split("\n"):
        line = raw.strip()
        for prefix in _MD_PREFIXES:  # heading, quote, bullet, number: each stripped once, in order,
            stripped = prefix.sub("", line)  # unless it was all there was to say ("1. :")
            if is_speakable(stripped) or not is_speakable(line):
                line = stripped
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
    if text.isascii():  # no CJK, no full-width marks, no protected span: only these rules can match
        text = re.sub(r"\s+", " ", text)
        return re.sub(" {2,}", " ", re.sub(r" +([,.;!?])", r"\1", text)).strip()
    return _normalize_spaces_all(text)


def _normalize_spaces_all(text: str) -> str:
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
    if text.isascii():  # the CJK bracket and title-mark rules cannot match
        text = re.sub(r"\[\s*([^\[\]]+?)\s*\]", r'"\1"', text)
        text = re.sub(r"\{\s*([^{}]+?)\s*\}", r'"\1"', text)
        return re.sub(r"\s*[—–―-]{2,}\s*", "。", _ARROW.sub("，", text))
    return _structural_punctuation_all(text)


def _structural_punctuation_all(text: str) -> str:
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


def detect_language(text: str, voice_language: str | None = None) -> str:
    """The upstream WeText rule (docs/spec/LM.md §4.6) plus kana and hangul: kana anywhere -> "ja";
    else any U+3400-U+9FFF ideograph -> "zh"; else hangul -> "ko"; else any ASCII letter -> "en";
    else the voice's language if given, else "zh" (upstream default)."""
    if text.isascii():  # the common case, without a loop over the characters
        return "en" if _ASCII_LETTER.search(text) else voice_language or "zh"
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
