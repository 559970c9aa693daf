"""Text front-end: cleanup rules, number reading, language guess, validation, chunking, pauses."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tts_core.errors import InvalidRequestError, PayloadTooLargeError
from tts_core.text import (
    check_text,
    detect_language,
    is_speakable,
    normalize,
    normalize_text,
    pause_after_chunk_s,
    split_text,
)
from tts_core.text.chunking import _prepare_for_chunking

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def clean(text: str) -> str:
    return normalize_text(text, read_numbers=False)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # whitespace and invisible characters
        ("Good   morning,\tall", "Good morning, all。"),
        ("早 上　好 ， 朋 友", "早上好，朋友。"),
        ("zero\u200bwidth\ufeff and\x00 nul\x07", "zerowidth and nul。"),
        # line structure and markdown
        ("第一段\r\n\r\n第二段", "第一段。第二段。"),
        ("# Release notes\n- faster start\n- smaller model", "Release notes。faster start。smaller model。"),
        ("> 引用一句话", "引用一句话。"),
        ("1. 打开设置\n2) 选择声音", "打开设置。选择声音。"),
        ("see [the docs](https://example.org/a_b)", "see the docs https://example.org/a_b。"),
        # arrows, dashes, ellipses, repeated marks
        ("上传 -> 编码 => 缓存", "上传，编码，缓存。"),
        ("输入→输出", "输入，输出。"),
        ("先这样——再那样", "先这样。再那样。"),
        ("one -- two", "one。two。"),
        ("嗯……好吧", "嗯。好吧。"),
        ("Well... fine", "Well。fine。"),
        ("真的吗？？？", "真的吗？"),
        ("What?!?!", "What？！"),
        ("好！！！", "好！"),
        ("对，，，", "对，"),
        # brackets and titles
        ("【通知】明天放假", '"通知"明天放假。'),
        ("按下 [Enter] 键", '按下 "Enter" 键。'),
        ("模仿 {laugh} 的样子", '模仿 "laugh" 的样子。'),
        ("『外『内』层』", '"外"内"层"。'),
        ("我在读《三体》这本书", "我在读《三体》这本书。"),
        ("《新闻联播》", "新闻联播。"),
        # protected tokens keep underscores and dots; plain snake_case loses underscores
        ("打开 config_file.yaml 和 .env", "打开 config_file.yaml 和 .env。"),
        ("mail dev_team+tts@example.com now", "mail dev_team+tts@example.com now。"),
        ("感谢@open_moss的支持", "感谢 @open_moss 的支持。"),
        ("看看r/speech_tech", "看看 r/speech_tech。"),
        ("话题#tts_demo很火", "话题 #tts_demo很火。"),
        ("snake_case_name", "snake case name。"),
        ("升级到v1.2.3了", "升级到 v1.2.3 了。"),
        # CJK / Latin spacing
        ("我用Python写", "我用 Python 写。"),
        ("共 3 个", "共3个。"),
        ("这是 GPU 服务器", "这是 GPU 服务器。"),
        # terminal punctuation respects closers
        ('他说“好”', "他说“好”。"),
        ("(done.)", "(done.)"),
        ("已经结束。", "已经结束。"),
    ],
)
def test_normalize_rules(raw: str, expected: str) -> None:
    assert clean(raw) == expected


@pytest.mark.parametrize(
    "text",
    ["我用Python写", "【通知】明天放假", "mail dev_team+tts@example.com now", "嗯……好吧", "Good   morning"],
)
def test_normalize_is_idempotent_on_examples(text: str) -> None:
    once = clean(text)
    assert clean(once) == once


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("我买了2本书和15支笔", "我买了两本书和十五支笔。"),
        ("共105人，增长10005", "共一百零五人，增长一万零五。"),
        ("成立于1998年", "成立于一九九八年。"),
        ("占比12.5%", "占比百分之十二点五。"),
        ("第20名", "第二十名。"),
        ("第2名在2月出发", "第二名在二月出发。"),
        ("一共100000000", "一共一亿。"),
        ("约22000人，其中200人", "约两万两千人，其中二百人。"),
        ("I have 3 cats", "I have three cats。"),
        ("It costs 1,250 dollars", "It costs one thousand two hundred fifty dollars。"),
        ("Growth was 4.05% this year", "Growth was four point zero five percent this year。"),
        ("Room 0042", "Room zero zero four two。"),
        ("We sold 21 of 1000", "We sold twenty-one of one thousand。"),
        # left alone: versions, dates, times, signs, currency, ordinals, codes, Japanese
        ("v2.3.1 released", "v2.3.1 released。"),
        ("on 2024-05-01 at 20:00", "on 2024-05-01 at 20:00。"),
        ("x = -5 or +86", "x = -5 or +86。"),
        ("only $5", "only $5。"),
        ("the 1st one", "the 1st one。"),
        ("GPU A100", "GPU A100。"),
        ("価格は300円です", "価格は300円です。"),
    ],
)
def test_number_reading(raw: str, expected: str) -> None:
    assert normalize_text(raw) == expected


def test_number_reading_can_be_disabled_or_follow_the_voice() -> None:
    assert normalize_text("我有2个", read_numbers=False) == "我有2个。"
    assert normalize_text("2024") == "两千零二十四。"  # no letters: the upstream default is zh
    assert normalize_text("2024", language=detect_language("2024", "en")) == "two thousand twenty-four。"


def test_chinese_hyphen_between_cjk_becomes_pause() -> None:
    assert normalize_text("接入-判定") == "接入，判定。"


@pytest.mark.parametrize(
    ("text", "voice_language", "expected"),
    [
        ("你好", None, "zh"),
        ("今日は晴れです", None, "ja"),  # kanji + kana -> Japanese
        ("カタカナ", None, "ja"),
        ("안녕하세요", None, "ko"),
        ("hello 世界", None, "zh"),
        ("hello", None, "en"),
        ("Ça va?", None, "en"),
        ("12345", None, "zh"),
        ("12345", "en", "en"),
        ("Привет", "en", "en"),
        ("", None, "zh"),
    ],
)
def test_detect_language(text: str, voice_language: str | None, expected: str) -> None:
    assert detect_language(text, voice_language) == expected


def test_check_text_accepts_and_strips() -> None:
    assert check_text("  hello  ", max_chars=10) == "hello"
    assert check_text("数字 42", max_chars=10) == "数字 42"


@pytest.mark.parametrize(
    ("value", "code"),
    [(None, None), (42, None), ("", "empty_text"), (" \n\t", "empty_text"), ("?!…。", "nothing_to_say"),
     ("👍🎉", "nothing_to_say"), ("—— ** ##", "nothing_to_say")],
)
def test_check_text_rejects(value: object, code: str | None) -> None:
    with pytest.raises(InvalidRequestError) as info:
        check_text(value, max_chars=100)
    assert info.value.param == "text"
    assert info.value.code == code


def test_check_text_too_long_says_limit_and_length() -> None:
    with pytest.raises(PayloadTooLargeError) as info:
        check_text("a" * 101, max_chars=100)
    assert info.value.param == "text"
    assert "101" in info.value.message and "100" in info.value.message


@pytest.mark.parametrize(
    ("chunk", "pause"),
    [("短句。", 0.40), ("One two three four.", 0.40), ("One two three four five.", 0.24), ("", 0.40)],
)
def test_pause_after_chunk(chunk: str, pause: float) -> None:
    assert pause_after_chunk_s(chunk) == pause


# ------------------------------- chunking --------------------------------------------------------
def words(text: str) -> int:
    """A monotone stand-in tokenizer: one token per word or CJK character, one per mark."""
    return len(re.findall(r"[A-Za-z0-9']+|[^\sA-Za-z0-9']", text))


def test_short_text_is_one_chunk_and_unchanged() -> None:
    text = "  hello there\nfriend  "
    assert split_text(text, words, 75) == ["hello there\nfriend"]
    assert split_text("   ", words, 75) == []
    assert split_text("a. b. c.", words, 0) == ["a. b. c."]


def test_sentences_are_packed_greedily() -> None:
    text = "One two three. Four five six. Seven eight nine."
    assert split_text(text, words, 8) == ["One two three. Four five six.", "Seven eight nine."]


def test_closers_stay_with_their_sentence() -> None:
    text = '他说：“走吧。”我们就走了。然后呢？'
    assert split_text(text, len, 10) == ['他说：“走吧。”', "我们就走了。然后呢？"]


def test_cjk_chunks_join_without_space_and_get_terminal_mark() -> None:
    text = "第一句话说完了。第二句话也说完了。第三句"
    chunks = split_text(text, len, 12)
    assert chunks == ["第一句话说完了。", "第二句话也说完了。", "第三句。"]


def test_long_sentence_splits_at_clauses_then_cuts() -> None:
    text = "alpha beta gamma, delta epsilon zeta, " + "word " * 30 + "end"
    chunks = split_text(text, words, 8)
    assert chunks[0] == "Alpha beta gamma, delta epsilon zeta,"
    assert chunks[1] == "word " * 7 + "word"
    assert all(words(chunk) <= 8 for chunk in chunks)
    assert chunks[-1].endswith("end.")


def test_greedy_cut_prefers_a_space_in_the_look_back() -> None:
    text = "abcdefghij klmnopqrstuvwxyz"  # no punctuation; budget is 15 characters
    assert split_text(text, len, 15) == ["Abcdefghij", "klmnopqrstuvwxy", "z."]


def test_unsplittable_piece_is_emitted_alone() -> None:
    def heavy(text: str) -> int:
        return sum(10 if ch == "X" else 1 for ch in text)

    chunks = split_text("aa X bb. cc dd.", heavy, 5)
    assert "X" in chunks
    assert all(heavy(c) <= 5 for c in chunks if c != "X")


def test_demo_texts_chunk_within_budget_with_real_tokenizer(data_dir) -> None:
    import json

    import sentencepiece as spm

    processor = spm.SentencePieceProcessor()
    processor.Load(str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"))

    def count(text: str) -> int:
        return len(processor.EncodeAsIds(text))

    rows = [json.loads(line) for line in (data_dir / "presets" / "demo.jsonl").read_text().splitlines()]
    num_split = 0
    for row in rows:
        chunks = split_text(normalize_text(row["text"]), count, 75)
        assert chunks, row["name"]
        if len(chunks) > 1:
            num_split += 1
            assert all(count(chunk) <= 75 for chunk in chunks), row["name"]
    assert num_split >= 5  # the long demo texts really are split


# ------------------------------- properties ------------------------------------------------------
def _no_space(text: str) -> str:
    return re.sub(r"\s", "", text)


any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=200)
mixed_text = st.text(
    st.sampled_from([*"abc XYZ 123 中文字。，！？；;:.,!?\"'”）】」\n-—…_/@#[]{}《》→", "\u200b", "\x00"]),
    max_size=200,
)


# ASCII pieces, arrows, dashes, brackets and spaced punctuation included, joined.
ascii_text = st.lists(st.one_of(st.characters(max_codepoint=127),
                                st.sampled_from(["->", "<=>", "--", "[", "]", "{", "}", " ,", " .", "  "])),
                      max_size=80).map("".join)


@FUZZ
@given(ascii_text)
def test_ascii_fast_paths_equal_the_full_rules(text: str) -> None:
    """ASCII text skips the CJK / full-width rules: they could not have matched."""
    assert normalize._normalize_spaces(text) == normalize._normalize_spaces_all(text)
    assert normalize._structural_punctuation(text) == normalize._structural_punctuation_all(text)


def test_a_list_number_with_nothing_after_it_is_said():
    assert is_speakable(normalize_text("1. :")) and normalize_text("1. Hello").startswith("Hello")


@FUZZ
@given(st.one_of(any_text, mixed_text))
def test_normalize_never_crashes_and_keeps_something_speakable(text: str) -> None:
    out = normalize_text(text)
    assert isinstance(out, str)
    out.encode("utf-8")  # no lone surrogates survive
    assert not any(unicodedata.category(ch) in ("Cc", "Cs", "Co") for ch in out)
    if is_speakable(text):
        assert is_speakable(out), (text, out)


@FUZZ
@given(st.one_of(any_text, mixed_text), st.integers(min_value=1, max_value=40))
def test_split_properties(text: str, budget: int) -> None:
    chunks = split_text(text, len, budget)
    if not text.strip():
        assert chunks == []
        return
    assert all(chunk.strip() == chunk and chunk for chunk in chunks)
    if len(chunks) == 1:
        assert chunks == [text.strip()]
        return
    # len() splits anywhere, so every chunk fits; order of non-space characters is kept.
    assert all(len(chunk) <= budget for chunk in chunks)
    assert _no_space("".join(chunks)) == _no_space(_prepare_for_chunking(text))


@FUZZ
@given(mixed_text, st.integers(min_value=1, max_value=20))
def test_split_with_word_tokenizer_respects_budget(text: str, budget: int) -> None:
    chunks = split_text(text, words, budget)
    if len(chunks) > 1:
        # a piece may exceed the budget only if it is a single token that cannot be split
        assert all(words(chunk) <= budget or words(chunk) == 1 for chunk in chunks)
        assert _no_space("".join(chunks)) == _no_space(_prepare_for_chunking(text))
