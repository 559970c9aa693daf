// The visitor's favourite voices and notes on them, kept in this browser (localStorage), keyed by
// what the API takes as `voice`: a preset's name or a saved voice's id (voice_<24 hex>).
//
// Stored as {v: 1, marks: {voice: {star, note, at}}} under a versioned key: at most MAX_MARKS voices
// (the least recently changed go first), notes cut to NOTE_MAX characters, a voice with neither a
// star nor a note is dropped. Storage that is corrupt, full or off reads as no marks and is never
// fatal. The Gradio page reads the same key (bridge.js, then studio/ui/marks.py labels the
// voice pickers); the player's audition cards edit it (marks-ui.js). Either side hears the other's
// changes through the `storage` event.

export const KEY = 'moss-tts-voice-marks-v1';
export const NOTE_MAX = 140;
export const MAX_MARKS = 200;
const SAVED_ID = /^voice_[0-9a-f]{24}$/;

/** Only well-formed entries of a parsed store (anything else, including a non-object, is dropped). */
export function clean(data) {
  const marks = {};
  const raw = data && typeof data === 'object' && data.v === 1 && data.marks && typeof data.marks === 'object'
    ? data.marks : {};
  for (const [voice, m] of Object.entries(raw)) {
    if (!voice || voice.length > 100 || !m || typeof m !== 'object') continue;
    const star = m.star === true;
    const note = typeof m.note === 'string' ? m.note.trim().slice(0, NOTE_MAX) : '';
    if (star || note) marks[voice] = { star, note, at: Number.isFinite(m.at) ? m.at : 0 };
  }
  return marks;
}

/** Every mark: {voice: {star, note, at}}. */
export function loadMarks(storage = globalThis.localStorage) {
  try { return clean(JSON.parse(storage.getItem(KEY) || 'null')); } catch (_) { return {}; }
}

function save(marks, storage) {
  const kept = Object.entries(marks).sort((a, b) => b[1].at - a[1].at).slice(0, MAX_MARKS);
  try { storage.setItem(KEY, JSON.stringify({ v: 1, marks: Object.fromEntries(kept) })); return true; } catch (_) {
    return false;   // full or off: the change lives until the page is left
  }
}

/** The mark of `voice` ({star: false, note: ''} when it has none). */
export function markOf(voice, marks = loadMarks()) {
  return marks[voice] || { star: false, note: '', at: 0 };
}

/** Change `voice`'s star and/or note; returns the new mark (and whether it was stored). */
export function setMark(voice, change, storage = globalThis.localStorage) {
  const marks = loadMarks(storage);
  const old = markOf(voice, marks);
  const star = typeof change.star === 'boolean' ? change.star : old.star;
  const note = typeof change.note === 'string' ? change.note.trim().slice(0, NOTE_MAX) : old.note;
  const newest = Math.max(0, ...Object.values(marks).map((m) => m.at));   // strictly newer: a fair bound
  if (star || note) marks[voice] = { star, note, at: Math.max(Date.now(), newest + 1) }; else delete marks[voice];
  return { star, note, stored: save(marks, storage) };
}

/** Drop the marks of saved voices that are no longer in `savedIds` (deleted on the server). */
export function pruneSaved(savedIds, storage = globalThis.localStorage) {
  const marks = loadMarks(storage), alive = new Set(savedIds);
  const gone = Object.keys(marks).filter((voice) => SAVED_ID.test(voice) && !alive.has(voice));
  for (const voice of gone) delete marks[voice];
  if (gone.length) save(marks, storage);
  return gone;
}

/** Call `onChange()` when another page or frame of this site changes the marks. */
export function watchMarks(onChange) {
  window.addEventListener('storage', (e) => { if (e.key === KEY || e.key === null) onChange(); });
}
