"""The visitor's favourite voices and notes as the browser keeps them (static/studio/voicemarks.js, in
Chromium's JS engine): versioned, bounded, tolerant of corrupt, full or refused storage; how the
page's lists show them is tested in tests/web/test_ui_marks.py."""

from __future__ import annotations

from studio.ui.marks import MAX_MARKS, NOTE_MAX

STORE = """async () => {
  const m = await import('/studio/voicemarks.js');
  localStorage.clear();
  const out = {constants: [m.NOTE_MAX, m.MAX_MARKS]};
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


def test_the_browser_store_is_versioned_bounded_and_tolerant(static_page) -> None:
    out = static_page.evaluate(STORE)
    assert out["constants"] == [NOTE_MAX, MAX_MARKS]  # the page's lists read them with the same bounds
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
    assert out["bounded"] == [MAX_MARKS, False, True]  # the least recently changed went first
    assert out["full"] == {"star": True, "note": "", "stored": False}
    assert out["denied"] == [{}, False]
