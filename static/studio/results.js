// What was generated, kept for the visitor: each result's PCM in memory (replay without a request),
// the download links (the server's kept copy, or a WAV written here for pushed audio), captions,
// the code snippet, and the history in localStorage (replayed from memory or the server's copy).

import { toSrt, toVtt } from './captions.js';
import { addToHistory, fileStem, FORMATS, loadHistory, resultUrl } from './history.js';
import { curlSnippet, pythonSnippet } from './snippet.js';
import * as view from './view.js';
import { decodeWav16, wav16Blob } from './wav.js';

/** A result being made or kept: {label, request, text, requestId, rate, chunks, frames, segments, ...}. */
export function newResult(label, request, extra = {}) {
  return { label, request, text: (request && request.text) || '', requestId: null, rate: 48000, chunks: [],
    frames: 0, segments: [], state: 'connecting', figures: {}, stem: fileStem(label, request && request.text),
    ...extra };
}

/** A blind card (or X, a copy of one: `of`) before the reveal. */
const hidden = (result) => !!(result.of || result).blindHidden;

export class Results {
  constructor(base) {
    this.base = base;         // the player's URL: links are relative to it (any mount prefix)
    this.kept = new Map();    // requestId -> result
    this.last = null;         // the result that Replay and the download links act on
    this.board = [];          // the results of the last audition (one card per voice)
    this.links = [];          // blob URLs to release when replaced
  }

  /** `result` is (partly) heard: Replay, downloads and the snippet act on it from now on. */
  keep(result) {
    if (result.frames === 0) return;
    this.last = result;
    if (result.requestId) this.kept.set(result.requestId, result);
    this.show(result);
  }

  show(result) {
    this.last = result;
    this.showDownloads(result);
    this.showSnippet();
  }

  /** "Use from code" for the last result. A blind card's request names its voice, and X's would say
   *  which card it is: until the reveal the panel says so instead of showing them. */
  showSnippet(result = this.last) {
    if (!result || !result.request || !result.request.text) return;
    if (hidden(result)) {
      view.setSnippets(null, null, `${result.label}: blind — the request, with its voice, is shown after the reveal.`);
    } else {
      view.setSnippets(curlSnippet(location.origin, result.request), pythonSnippet(location.origin, result.request));
    }
  }

  showDownloads(result) {
    if (result.of && hidden(result)) { view.setDownloads(null); return; }   // X's links would name its card
    for (const url of this.links.splice(0)) URL.revokeObjectURL(url);
    const blob = (data, name) => { const href = URL.createObjectURL(data); this.links.push(href); return { href, name }; };
    const files = {};
    if (result.requestId && !result.pushed) {
      for (const fmt of FORMATS) files[fmt] = { href: resultUrl(this.base, result.requestId, fmt, result.stem) };
    } else {   // pushed audio: the server keeps none of it, the browser writes the WAV
      files.wav = blob(wav16Blob(result.chunks, result.rate), `${result.stem}.wav`);
    }
    if (result.segments.length) {
      files.srt = blob(new Blob([toSrt(result.segments)], { type: 'application/x-subrip' }), `${result.stem}.srt`);
      files.vtt = blob(new Blob([toVtt(result.segments)], { type: 'text/vtt' }), `${result.stem}.vtt`);
    }
    view.setDownloads(files);
  }

  /** A finished result joins the history (only what the server keeps: it can be downloaded later). */
  remember(result, onReplay) {
    if (!result.requestId || result.pushed) return;
    addToHistory({ requestId: result.requestId, text: result.text, label: result.label, stem: result.stem,
      figures: result.figures, request: result.request, at: Date.now() });
    this.renderHistory(onReplay);
  }

  renderHistory(onReplay, entries = loadHistory()) {
    view.renderHistory(entries, { replay: onReplay, base: this.base });
  }

  /** A history entry's result: from memory when this page has it, else the server's copy; null if gone. */
  async fetch(entry) {
    const known = this.kept.get(entry.requestId);
    if (known) return known;
    const resp = await fetch(resultUrl(this.base, entry.requestId, 'wav'));
    if (!resp.ok) return null;
    const wav = decodeWav16(await resp.arrayBuffer());
    const result = newResult(entry.label, entry.request || { text: entry.text }, {
      requestId: entry.requestId, rate: wav.rate, chunks: [wav.data], frames: wav.data.length / 2,
      state: 'finished', figures: entry.figures || {} });
    this.kept.set(entry.requestId, result);
    return result;
  }

  renderBoard(playingResult, { play, keep, decorate }) {
    const playing = this.board.indexOf(playingResult);
    view.renderBoard(this.board, { play: (i) => play(this.board[i]), keep: (i) => keep(this.board[i]), decorate,
      base: this.base, playing: playing >= 0 ? playing : null });
  }
}
