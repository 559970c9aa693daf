"""Spelling out numbers in Chinese or English text (the `read_numbers` step of `normalize_text`).

Covers, in zh or en text only: integers (0 .. 10^16-1 zh, 0 .. 10^12-1 en, optional 1,234
grouping), decimals (3.14), and percentages (50%, 2.5％). A 4-digit number before 年 and any
number with a leading zero or too many digits is read digit by digit; a lone 2 before a measure
word becomes 两 (not after 第). Left alone: signs, currency, ranges, dates, times, versions,
ordinals and anything glued to letters (those need real semantic TN). Pure functions.
"""

from __future__ import annotations

import re

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


def spell_numbers(text: str, language: str) -> str:
    """Numbers of `text` in words of `language` ("zh" or "en"); other languages are left as they are."""
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
