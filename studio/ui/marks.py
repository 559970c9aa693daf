"""The visitor's favourite voices and notes, as the page's voice pickers show them.

The marks live in the visitor's browser (localStorage, `static/studio/voicemarks.js`), never on the server:
the events that fill a picker read them there (`MARKS_JS`) and pass them in as JSON, and the choices
come back with their labels marked — favourites first with a ★, a note after the name — while the
values stay the voices' names and ids. Gradio renders the labels itself (search included: typing
part of a note finds the voice), so nothing rewrites Gradio's DOM. Whatever arrives is client input:
`parse_marks` keeps only well-formed entries, at most `MAX_MARKS`, notes cut to `NOTE_MAX`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

NOTE_MAX = 140  # as static/studio/voicemarks.js
MAX_MARKS = 200
LABEL_NOTE_CHARS = 48  # the note as a picker shows it; the whole note is in the editor and on the card
STAR = "★"
# Before a Python handler that takes the marks as its first input: the marks from this browser (bridge.js).
MARKS_JS = "async (...a) => [window.mossTTS && window.mossTTS.marks ? await window.mossTTS.marks() : '', ...a.slice(1)]"


@dataclass(frozen=True, slots=True)
class VoiceMark:
    star: bool = False
    note: str = ""


NO_MARK = VoiceMark()


def parse_marks(text: str | None) -> dict[str, VoiceMark]:
    """The marks in `text` ({voice: {star, note}} as JSON); anything malformed reads as no mark."""
    try:
        data = json.loads(text) if text else {}
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    marks: dict[str, VoiceMark] = {}
    for voice, entry in list(data.items())[:MAX_MARKS]:
        if not isinstance(entry, dict) or not voice or len(voice) > 100:
            continue
        star = entry.get("star") is True
        note = entry.get("note") if isinstance(entry.get("note"), str) else ""
        note = " ".join(note.split())[:NOTE_MAX]
        if star or note:
            marks[voice] = VoiceMark(star, note)
    return marks


def marked_label(label: str, mark: VoiceMark) -> str:
    """`label` with the voice's star in front and its note (shortened) after it."""
    if mark.star:
        label = f"{STAR} {label}"
    if mark.note:
        note = mark.note if len(mark.note) <= LABEL_NOTE_CHARS else mark.note[: LABEL_NOTE_CHARS - 1].rstrip() + "…"
        label = f"{label} — {note}"
    return label


def marked_choices(choices: list[tuple[str, str]], marks: dict[str, VoiceMark]) -> list[tuple[str, str]]:
    """(label, value) choices with their marks; favourites first, each group in its given order."""
    out = [(marked_label(label, marks.get(value, NO_MARK)), value) for label, value in choices]
    return sorted(out, key=lambda choice: not marks.get(choice[1], NO_MARK).star)
