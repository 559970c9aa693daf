// The audition board's playback: loudness matching of the cards (their first, live play by an
// estimate, livegain.js; replays exactly), Play all (cards one after another with a short gap) and
// the board's keys (1-8 a card, Space play/stop, arrows the next or previous card). The player
// (player.js) owns the runs; this module only decides what to replay and at what gain, through the
// `replay(result, label)` and `stop()` it is given.

import { LiveEstimator, priorFor, rememberLoudness } from './livegain.js';
import { matchGain, measure, TARGET_LUFS } from './loudness.js';
import { engineBuild, makeLink, readLink } from './permalink.js';
import { notifyParent } from './shell.js';

export const PLAY_ALL_GAP_MS = 400;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class BoardPlayback {
  constructor({ replay, stop, isPlaying, render, play, healthUrl, cards }) {
    Object.assign(this, { replay, stop, isPlaying, render, play, healthUrl, cards });
    document.getElementById('play-all').onclick = () => this.playAll(this.cards());
    document.getElementById('copy-link').onclick = () => this.copyLink(this.cards());
    this.linkOpened = false;
    this.match = true;       // "Match loudness" (the audition tab's toggle, through bridge.js)
    this.target = TARGET_LUFS;
    this.cursor = -1;        // the card the keys move from
    this.allSeq = 0;         // bumped to end a Play all
  }

  setOptions(options) {
    if (typeof options.matchLoudness === 'boolean') this.match = options.matchLoudness;
    this.render();
  }

  /** The gain `result` replays at: 1 unless matching, else what brings it to the target. Measured
   *  once per result (its PCM does not change), kept on it for the card's figure. */
  gainFor(result) {
    if (!result.loudness && result.frames > 0) result.loudness = measure(result.chunks, result.rate);
    if (!this.match || !result.loudness) return 1;
    const { gain, reached } = matchGain(result.loudness, this.target);
    result.matchedLufs = reached;
    return gain;
  }

  /** Scale `all` (a replay's PCM, a copy) to the target when matching and `onBoard`. */
  applyGain(all, result, onBoard) {
    const gain = onBoard ? this.gainFor(result) : 1;
    if (onBoard) result.level = this.match ? 'matched' : 'as generated';
    if (gain !== 1) for (let i = 0; i < all.length; i++) all[i] *= gain;
  }

  /** The first, live play of card `result` begins (audio at `rate`): with matching on, an estimator
   *  for its gain, starting from what this browser remembers of the voice. */
  startLive(result, rate) {
    const voice = voiceKey(result);
    result.live = this.match ? new LiveEstimator(rate, { target: this.target, prior: voice && priorFor(voice) }) : null;
    result.level = this.match ? 'matched (estimated)' : 'as generated';
  }

  /** The worklet's message for the live card's next `chunk` (before it is posted), or null. */
  liveGain(result, chunk) {
    const next = result.live ? result.live.observe(chunk) : null;
    return next && { type: 'gain', gain: next.gain };
  }

  /** The live card's stream is complete: its loudness is now known, so the rest of the live play
   *  glides to the exact gain (the replays'), and its voice's loudness is remembered for the next
   *  card of that voice. Returns the worklet's message, or null. */
  liveComplete(result) {
    if (!result.live || !(result.frames > 0)) return null;
    result.live = null;
    const voice = voiceKey(result);
    result.loudness = measure(result.chunks, result.rate);
    if (voice !== null) rememberLoudness(voice, result.loudness.lufs);
    return Number.isFinite(result.loudness.lufs) ? { type: 'gain', gain: matchGain(result.loudness, this.target).gain } : null;
  }

  /** "Keep this take": the page's seed box gets this take's seed (bridge.js). */
  keepTake(result) {
    const seed = result.request && result.request.seed;
    if (Number.isInteger(seed)) notifyParent({ type: 'moss-player:keep-seed', seed });
    result.kept = true;
    this.render();
  }

  /** The embedding page's URL (same origin), or ours when opened directly. */
  static pageUrl() {
    try { return window.parent !== window ? window.parent.location.href : location.href; } catch (_) { return location.href; }
  }

  /** "Copy link": a permalink to these cards, shown in #permalink and put on the clipboard. */
  async copyLink(cards) {
    const link = makeLink(BoardPlayback.pageUrl(), cards, await engineBuild(this.healthUrl));
    const box = document.getElementById('permalink');
    Object.assign(box, { value: link, hidden: false });
    box.select();
    navigator.clipboard.writeText(link).catch(() => {});
  }

  /** Once the model is ready: play the page URL's permalink, if any, saying when the build differs. */
  async openLink() {
    const link = this.linkOpened ? null : readLink(new URL(BoardPlayback.pageUrl()).search);
    this.linkOpened = true;
    if (!link) return;
    const build = await engineBuild(this.healthUrl);
    const note = document.getElementById('link-note');
    note.hidden = !(link.build && build && link.build !== build);
    note.textContent = note.hidden ? '' : `This link was made on another engine build (${link.build}; this server `
      + `runs ${build}): the same seeds may give different audio.`;
    this.play({ items: link.items });
  }

  /** The note beside the board's tools. */
  note() {
    return this.match ? `Cards matched to ${this.target} LUFS: the first play by an estimate (its loudness is `
      + 'known only once it is made), replays exactly' : 'Loudness as generated (Match loudness is off)';
  }

  async playCard(board, index) {
    if (index < 0 || index >= board.length || !(board[index].frames > 0)) return null;
    this.cursor = index;
    return this.replay(board[index], `${board[index].label} (replay)`);
  }

  /** Every card with audio, in order, PLAY_ALL_GAP_MS apart; a stop or another play ends it. */
  async playAll(board) {
    const seq = ++this.allSeq;
    for (let i = 0; i < board.length && seq === this.allSeq; i++) {
      if (!(board[i].frames > 0)) continue;
      const how = await this.playCard(board, i);
      if (how !== 'finished' || seq !== this.allSeq) return false;
      if (i < board.length - 1) await sleep(PLAY_ALL_GAP_MS);
    }
    return seq === this.allSeq;
  }

  /** The board's keys; true when the key was the board's. */
  onKey(event, board) {
    if (board.length < 2 || event.ctrlKey || event.metaKey || event.altKey) return false;
    const target = event.target;
    if (target && (target.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(target.tagName))) return false;
    const digit = /^[1-8]$/.test(event.key) ? Number(event.key) - 1 : null;
    if (digit !== null) { this.allSeq += 1; this.playCard(board, digit); return true; }
    if (event.key === 'ArrowRight' || event.key === 'ArrowLeft') {
      const step = event.key === 'ArrowRight' ? 1 : -1;
      this.allSeq += 1;
      this.playCard(board, Math.min(board.length - 1, Math.max(0, this.cursor + step)));
      return true;
    }
    if (event.key === ' ' && !(target && target.tagName === 'BUTTON')) {
      if (this.isPlaying()) { this.allSeq += 1; this.stop(); } else this.playCard(board, Math.max(0, this.cursor));
      return true;
    }
    return false;
  }
}

/** What a card's loudness is remembered under: its voice (a preset's name or a saved voice's id);
 *  null for a clip uploaded to clone (no voice to remember it by). */
function voiceKey(result) {
  const request = result.request || {};
  if (request.voice) return request.voice;
  return request.ref_audio || request.ref_audio_id ? null : '(default voice)';
}
