// Favourites and notes on the audition cards: a star to toggle and a note to write for the card's
// voice (voicemarks.js keeps them in this browser; the Gradio page's pickers show them too). One note
// editor below the cards serves every card, so the board's frequent redraws never take the text
// being typed away. A blind card shows neither until the reveal: a star or a note names the voice.

import { loadMarks, markOf, NOTE_MAX, pruneSaved, setMark, watchMarks } from './voicemarks.js';

const $ = (id) => document.getElementById(id);

const button = (text, props) => Object.assign(document.createElement('button'), { type: 'button', textContent: text },
  props);

export class CardMarks {
  /** `changed()`: redraw the board (a mark changed, here or in another document of this site). */
  constructor({ changed }) {
    this.changed = changed;
    this.marks = loadMarks();
    this.editing = null;   // {voice, index}: the card whose note is in the editor
    const input = $('note-input');
    input.maxLength = NOTE_MAX;
    $('note-save').onclick = () => this.saveNote();
    $('note-cancel').onclick = () => this.closeEditor();
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') { e.preventDefault(); this.saveNote(); }
      else if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); this.closeEditor(); }
    });
    watchMarks(() => { this.marks = loadMarks(); this.changed(); });
  }

  /** The voice a card's marks belong to: its request's voice (a preset or a saved voice's id), none
   *  while it is blind or for a clip uploaded to clone. */
  static voiceOf(card) {
    return !card.blindHidden && card.request && typeof card.request.voice === 'string' ? card.request.voice : null;
  }

  /** Add the star, the note and the note button to card `index` (`li`, its `head` and `tools`). */
  decorate(card, index, { li, head, tools }) {
    const voice = CardMarks.voiceOf(card);
    if (!voice) return;
    const mark = markOf(voice, this.marks);
    const star = button(mark.star ? '★' : '☆', {
      className: `card-star${mark.star ? ' on' : ''}`, onclick: () => this.toggleStar(voice),
      title: mark.star ? 'A favourite: click to unmark' : 'Mark as a favourite' });
    star.setAttribute('aria-pressed', String(mark.star));
    star.setAttribute('aria-label', `Favourite: ${voice}`);
    head.prepend(star);
    if (mark.note) {
      const note = Object.assign(document.createElement('p'), { className: 'card-note', textContent: mark.note });
      head.after(note);
    }
    const edit = button('Note', {   // its name begins with the text shown (WCAG 2.5.3)
      className: 'card-note-edit', onclick: () => this.openEditor(voice, index) });
    edit.setAttribute('aria-label', `Note on ${voice}`);
    edit.setAttribute('aria-controls', 'note-editor');
    edit.setAttribute('aria-expanded', String(!!this.editing && this.editing.index === index));
    tools.append(edit);
    li.dataset.voice = voice;
  }

  toggleStar(voice) {
    setMark(voice, { star: !markOf(voice, this.marks).star });
    this.marks = loadMarks();
    this.changed();
  }

  openEditor(voice, index) {
    this.editing = { voice, index };
    $('note-label').textContent = `Your note on ${voice}`;
    Object.assign($('note-input'), { value: markOf(voice, this.marks).note });
    $('note-editor').hidden = false;
    this.changed();
    $('note-input').focus();
  }

  saveNote() {
    if (!this.editing) return;
    setMark(this.editing.voice, { note: $('note-input').value });
    this.marks = loadMarks();
    this.closeEditor();
  }

  closeEditor() {
    const was = this.editing;
    this.editing = null;
    $('note-editor').hidden = true;
    this.changed();
    if (was) document.querySelector(`#cards .card[data-index="${was.index}"] .card-note-edit`)?.focus();
  }

  /** A new board: an open editor belonged to the last one. */
  reset() {
    if (this.editing) { this.editing = null; $('note-editor').hidden = true; }
  }

  /** Drop the marks of saved voices the server no longer has (GET /api/voices lists those it keeps). */
  static async pruneDeleted(voicesUrl) {
    try {
      const body = await (await fetch(voicesUrl, { cache: 'no-store' })).json();
      if (Array.isArray(body.saved)) pruneSaved(body.saved.map((v) => v.id));
    } catch (_) { /* the server cannot say: keep them */ }
  }
}
