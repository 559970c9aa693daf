"""How the page's voice lists show the visitor's favourites and notes (studio/ui/marks.py,
handlers.voice_choices / saved_choices); the store itself is tested in tests/e2e/test_voice_marks.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

from studio.ui.handlers import saved_choices, voice_choices
from studio.ui.marks import MAX_MARKS, NOTE_MAX, VoiceMark, marked_choices, parse_marks


def preset(name: str, language: str, gender: str = "female"):
    return SimpleNamespace(name=name, language=language, gender=gender)


PRESETS = [preset("Cedar", "zh", "male"), preset("Quill", "en"), preset("Nova", "en"), preset("Hoshi", "ja")]


def test_marks_from_the_browser_are_client_input_and_read_defensively() -> None:
    assert parse_marks(None) == parse_marks("") == parse_marks("not json") == parse_marks("[1, 2]") == {}
    assert parse_marks("[" * 100_000) == {}  # nested past the parser's depth: no marks, no error
    text = json.dumps({"Quill": {"star": True, "note": "  warm,\n good  for audiobooks "}, "Nova": {"star": "yes"},
                       "Cedar": {"note": 7}, "Hoshi": "star", "": {"star": True}, "x" * 101: {"star": True},
                       "voice_0123456789abcdef01234567": {"note": "n" * 500}})
    marks = parse_marks(text)
    assert marks == {"Quill": VoiceMark(True, "warm, good for audiobooks"),
                     "voice_0123456789abcdef01234567": VoiceMark(False, "n" * NOTE_MAX)}
    many = {f"v{i}": {"star": True} for i in range(MAX_MARKS + 50)}
    assert len(parse_marks(json.dumps(many))) == MAX_MARKS


def test_pickers_list_favourites_first_with_their_notes() -> None:
    marks = {"Nova": VoiceMark(True, ""), "Hoshi": VoiceMark(True, "calm; " + "x" * 60), "Cedar": VoiceMark(False, "deep")}
    labels = [label for label, _ in voice_choices(PRESETS, "All", marks)]
    assert labels[:2] == ["★ English · Nova (female)", "★ Japanese · Hoshi (female) — calm; " + "x" * 41 + "…"]
    assert labels[2:] == ["Chinese · Cedar (male) — deep", "English · Quill (female)"]  # the rest as before
    assert [value for _, value in voice_choices(PRESETS, "All", marks)] == ["Nova", "Hoshi", "Cedar", "Quill"]
    assert voice_choices(PRESETS, "English", marks) == [("★ English · Nova (female)", "Nova"),
                                                         ("English · Quill (female)", "Quill")]
    assert voice_choices(PRESETS) == voice_choices(PRESETS, "All", {})  # no marks: the plain list
    assert marked_choices([("a", "a"), ("b", "b")], {"b": VoiceMark(True)}) == [("★ b", "b"), ("a", "a")]


def test_a_deleted_saved_voice_takes_its_mark_with_it() -> None:
    marks = parse_marks(json.dumps({"voice_aaaaaaaaaaaaaaaaaaaaaaaa": {"star": True, "note": "mine"},
                                    "voice_bbbbbbbbbbbbbbbbbbbbbbbb": {"star": True}}))
    saved = [{"id": "voice_aaaaaaaaaaaaaaaaaaaaaaaa", "name": "Grandma", "language": "en"}]
    assert saved_choices(saved, marks) == [("★ Grandma · English — mine", "voice_aaaaaaaaaaaaaaaaaaaaaaaa")]
