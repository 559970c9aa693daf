"""Favourite voices and notes: the browser's store (static/voicemarks.js, in Chromium's JS engine) and
how the page's pickers show them (tts_core/web/ui/marks.py, handlers.voice_choices/saved_choices)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tts_core.web.ui.handlers import saved_choices, voice_choices
from tts_core.web.ui.marks import MAX_MARKS, NOTE_MAX, VoiceMark, marked_choices, parse_marks

pytest_plugins = ["e2e_helpers"]


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


STORE = """async () => {
  const m = await import('/voicemarks.js');
  localStorage.clear();
  const out = {};
  out.empty = m.loadMarks();
  out.set = m.setMark('Quill', {star: true});
  m.setMark('Quill', {note: '  warm, good for audiobooks  '});
  m.setMark('voice_0123456789abcdef01234567', {note: 'n'.repeat(500)});
  m.setMark('voice_aaaaaaaaaaaaaaaaaaaaaaaa', {star: true});
  m.setMark('Nova', {star: true});
  m.setMark('Nova', {star: false});   // neither star nor note: gone
  out.marks = m.loadMarks();
  out.raw = JSON.parse(localStorage.getItem(m.KEY));
  out.pruned = m.pruneSaved(['voice_aaaaaaaaaaaaaaaaaaaaaaaa']);
  out.afterPrune = Object.keys(m.loadMarks()).sort();
  localStorage.setItem(m.KEY, '{"v": 1, "marks": {"Quill": ');   // corrupt
  out.corrupt = m.loadMarks();
  out.recovered = m.setMark('Quill', {star: true}).stored && m.markOf('Quill').star;
  localStorage.setItem(m.KEY, JSON.stringify({v: 2, marks: {Quill: {star: true}}}));   // another version
  out.otherVersion = m.loadMarks();
  for (let i = 0; i < m.MAX_MARKS + 20; i++) m.setMark(`v${i}`, {star: true});
  const kept = Object.keys(m.loadMarks());
  out.bounded = [kept.length, kept.includes('v0'), kept.includes(`v${m.MAX_MARKS + 19}`)];
  const full = {getItem: () => null, setItem: () => { throw new DOMException('full', 'QuotaExceededError'); }};
  out.full = m.setMark('Quill', {star: true}, full);
  const broken = {getItem: () => { throw new Error('denied'); }, setItem: () => { throw new Error('denied'); }};
  out.denied = [m.loadMarks(broken), m.setMark('Quill', {star: true}, broken).stored];
  return out;
}"""


@pytest.mark.e2e
def test_the_browser_store_is_versioned_bounded_and_tolerant(static_page) -> None:
    out = static_page.evaluate(STORE)
    assert out["empty"] == {} and out["set"] == {"star": True, "note": "", "stored": True}
    marks = out["marks"]
    assert set(marks) == {"Quill", "voice_0123456789abcdef01234567", "voice_aaaaaaaaaaaaaaaaaaaaaaaa"}
    assert marks["Quill"]["star"] and marks["Quill"]["note"] == "warm, good for audiobooks"
    assert len(marks["voice_0123456789abcdef01234567"]["note"]) == NOTE_MAX
    assert out["raw"]["v"] == 1 and set(out["raw"]["marks"]) == set(marks)
    # A saved voice the server no longer lists loses its mark; presets and listed voices keep theirs.
    assert out["pruned"] == ["voice_0123456789abcdef01234567"]
    assert out["afterPrune"] == ["Quill", "voice_aaaaaaaaaaaaaaaaaaaaaaaa"]
    assert out["corrupt"] == {} and out["recovered"] is True and out["otherVersion"] == {}
    assert out["bounded"] == [200, False, True]  # the least recently changed went first
    assert out["full"] == {"star": True, "note": "", "stored": False}
    assert out["denied"] == [{}, False]
