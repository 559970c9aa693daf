"""Over-long text is cut where a reader would: a sentence end, else a word, never mid-word."""

from __future__ import annotations

import pytest

from studio.ui.text_limits import split_at_boundary


def test_text_within_the_limit_is_kept_whole():
    assert split_at_boundary("Short text.", 100) == ("Short text.", "")


def test_cut_at_the_last_sentence_end_that_fits():
    text = "First sentence here. Second one is here. Third sentence is much longer than the rest."
    head, rest = split_at_boundary(text, 50)
    assert head == "First sentence here. Second one is here."
    assert rest == "Third sentence is much longer than the rest."


def test_cut_at_a_word_when_the_last_sentence_end_is_too_early():
    text = "Hi. " + "word " * 30
    head, rest = split_at_boundary(text, 60)
    assert len(head) <= 60 and head.endswith("word") and rest.startswith("word")
    assert (head + " " + rest).split() == text.split()  # nothing lost, nothing cut mid-word


@pytest.mark.parametrize("limit", [10, 11, 12, 13])
def test_chinese_is_cut_after_a_full_stop(limit):
    text = "今天天气很好。我们一起去公园散步吧。"
    head, rest = split_at_boundary(text, limit)
    assert head == "今天天气很好。" and rest == "我们一起去公园散步吧。"


def test_a_text_without_any_break_is_cut_at_the_limit():
    assert split_at_boundary("a" * 30, 10) == ("a" * 10, "a" * 20)


def test_5600_characters_keep_at_most_4096_and_end_on_a_sentence():
    sentence = "This sentence is exactly like the others and ends with a full stop. "
    text = sentence * (5600 // len(sentence) + 1)
    head, rest = split_at_boundary(text, 4096)
    assert len(head) <= 4096 and head.endswith("full stop.")
    assert len(head) > 4096 - len(sentence)
    assert head + " " + rest == text.strip()
