"""The page's pure choices: which voice it starts with, how saved voices are listed, speed support."""

from __future__ import annotations

from types import SimpleNamespace

from studio.api.requests import StreamBody
from studio.ui.examples import DEFAULT_TEXT, EXAMPLES
from studio.ui.handlers import page_default_voice, saved_choices, speed_supported


def preset(name: str, language: str):
    return SimpleNamespace(name=name, language=language)


def test_an_english_page_starts_with_an_english_voice():
    presets = [preset("Cedar", "zh"), preset("Quill", "en"), preset("Nova", "en")]
    assert page_default_voice(presets, "Cedar") == "Quill"  # the server's default speaks Chinese
    assert page_default_voice(presets, "Nova") == "Nova"  # the server's own default when it is English
    assert page_default_voice([preset("Cedar", "zh")], "Cedar") == "Cedar"  # no English voice at all
    assert EXAMPLES[0][2] == "English" and EXAMPLES[0][1] == DEFAULT_TEXT  # and the prefilled text is English


def test_saved_voices_are_listed_by_name_with_their_language():
    saved = [{"id": "voice_ab12", "name": "Grandma", "language": "en"}, {"id": "voice_cd34", "name": ""}]
    assert saved_choices(saved) == [("Grandma · English", "voice_ab12"), ("voice_cd34", "voice_cd34")]


def test_speed_is_offered_exactly_when_the_stream_body_takes_it():
    assert speed_supported() == ("speed" in StreamBody.model_fields)


def test_the_header_says_in_a_few_words_which_precision_runs():
    from studio.ui.handlers import engine_summary

    reason = "auto: fp16, the most faithful mode that runs in real time here (RTF 0.45)"
    assert engine_summary({"device": "cpu", "dtype": "float32", "quantize": "fp16", "precision": reason}) == "cpu · fp16"
    assert engine_summary({"device": "cpu", "dtype": "float32", "quantize": None, "precision": "fp32"}) == "cpu · fp32"
    assert engine_summary({"device": "cuda:0", "dtype": "bfloat16", "precision": "cuda: LM bf16"}) == "cuda:0 · bf16"
