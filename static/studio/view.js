// What the player shows: the one status line (an ARIA live region), figures, the buffer bar, the
// read-along line, the comparison board and the history. DOM only; player.js decides what.

import { segmentAt } from './captions.js';
import { FORMATS, resultUrl } from './history.js';

const $ = (id) => document.getElementById(id);
const BAR_MAX_MS = 3000;

export const STATE_TEXT = {
  loading: 'Loading the model…', ready: 'Ready', failed: 'The model could not be loaded',
  connecting: 'Generating…', buffering: 'Buffering…', playing: 'Playing',
  finishing: 'Playing (generation done)', finished: 'Done', stopped: 'Stopped', error: 'Failed',
};

/** The status line for a player state; `waitS` is the expected wait while buffering. */
export function statusText(state, { waitS = null, modelStatus = '', error = '' } = {}) {
  if (state === 'buffering' && waitS != null && waitS >= 0.5) return `Buffering — about ${Math.ceil(waitS)} s`;
  if (state === 'loading' && modelStatus) return `Loading the model — ${modelStatus}`;
  if (state === 'error' && error) return `Failed: ${error}`;
  return STATE_TEXT[state] || state;
}

export function showStatus(state, text, label) {
  $('dot').className = `dot ${state}`;
  if ($('state').textContent !== text) $('state').textContent = text;   // a live region: only real changes
  $('label').textContent = label || '';
}

export function setMessage(text, kind) {
  $('message').textContent = text || '';
  $('message').classList.toggle('info', kind === 'info');
}

/** What the stream travels as, and the link's speed ("Opus 160 kb/s · link ≈ 1.1 Mb/s"). */
export function setWire(text) {
  $('wire').textContent = text || '';
}

export function setButtons(on) {
  for (const [id, enabled] of Object.entries(on)) $(id).disabled = !enabled;
}

function value(id, text, cls) {
  const el = $(id);
  el.textContent = text;
  el.className = `value ${cls || ''}`;
}

export function rtfClass(rtf) {
  return rtf == null ? '' : rtf < 0.8 ? 'good' : rtf < 1 ? 'warn' : 'bad';
}

/** The RTF in words ("generated 5.2× faster than real time"); '' before there is one. */
export function realTimeText(rtf) {
  if (rtf == null || !(rtf > 0)) return '';
  return rtf <= 1 ? `generated ${(1 / rtf).toFixed(1)}× faster than real time`
    : `generated ${rtf.toFixed(1)}× slower than real time`;
}

export function renderFigures(s) {
  value('m-ttfp', s.ttfpMs == null ? '–' : `${Math.round(s.ttfpMs)} ms`);
  value('m-rtf', s.rtf == null ? '–' : s.rtf.toFixed(2), rtfClass(s.rtf));
  value('m-audio', s.audioSeconds ? `${s.audioSeconds.toFixed(1)} s` : '–');
  // 1/RTF, said as what it is: "speed" on this page means the speech rate only
  $('m-xrt').textContent = realTimeText(s.rtf);
  value('m-underruns', s.underruns == null ? '–' : String(s.underruns), s.underruns ? 'bad' : 'good');
  const ms = Math.round(s.bufferedMs || 0);
  $('buf-fill').style.width = `${Math.min(100, (ms / BAR_MAX_MS) * 100)}%`;
  $('buf-text').textContent = `${ms} ms`;
  const bar = $('buffer-bar');
  bar.setAttribute('aria-valuenow', String(Math.min(ms, BAR_MAX_MS)));
  bar.setAttribute('aria-valuetext', `${ms} ms buffered`);
  const parts = [];
  if (s.sampleRate) parts.push(`output ${s.sampleRate / 1000} kHz × ${s.outputChannels || 2} ch`);
  if (s.resampling) parts.push(`resampled from ${s.streamSampleRate / 1000} kHz`);
  if (s.requestId) parts.push(`request ${s.requestId}`);
  if (s.networkReads) parts.push(`${s.networkReads} network reads`);
  $('details').textContent = parts.join(' · ');
}

// ---- read-along ---------------------------------------------------------------------------------

let shownSegments = null;

/** The segments' text, the one heard at `t` seconds highlighted; hidden without segments. */
export function renderReadAlong(segments, t) {
  const box = $('readalong');
  if (!segments || segments.length === 0) {
    box.hidden = true;
    box.replaceChildren();
    shownSegments = null;
    return;
  }
  box.hidden = false;
  if (shownSegments !== segments || box.childElementCount !== segments.length) {
    box.replaceChildren(...segments.map((s) => {
      const span = document.createElement('span');
      span.className = 'segment';
      span.textContent = `${s.text} `;
      return span;
    }));
    shownSegments = segments;
  }
  const current = t == null ? null : segmentAt(segments, t);
  segments.forEach((s, i) => {
    const span = box.children[i];
    const on = s === current;
    if (span.classList.contains('current') !== on) {
      span.classList.toggle('current', on);
      if (on) span.setAttribute('aria-current', 'true'); else span.removeAttribute('aria-current');
    }
  });
}

// ---- downloads ----------------------------------------------------------------------------------

function link(id, href, name) {
  const a = $(id);
  if (href) {
    a.href = href;
    a.removeAttribute('aria-disabled');
    if (name) a.download = name; else a.removeAttribute('download');
  } else {
    a.removeAttribute('href');
    a.removeAttribute('download');
    a.setAttribute('aria-disabled', 'true');
  }
}

/** Point the download links at `files`: {mp3, flac, wav, srt, vtt} -> {href, name} or null. */
export function setDownloads(files) {
  for (const key of [...FORMATS, 'srt', 'vtt']) {
    const f = files && files[key];
    link(`dl-${key}`, f && f.href, f && f.name);
  }
}

// ---- the comparison board -----------------------------------------------------------------------

function button(text, label, onClick) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = text;
  b.setAttribute('aria-label', label);
  b.onclick = onClick;
  return b;
}

function figure(name, text, cls) {
  const span = document.createElement('span');
  span.className = 'figure';
  const n = document.createElement('span');
  n.className = 'name';
  n.textContent = name;
  const v = document.createElement('span');
  v.className = `value ${cls || ''}`;
  v.textContent = text;
  span.append(n, ' ', v);
  return span;
}

/**
 * One card per voice: name, state, TTFP / RTF / length, its own play and downloads.
 * @param {Array} results  [{label, state, figures, requestId, stem, frames}]
 * @param {{play: (index) => void, keep: (index) => void, decorate?: (result, index, parts) => void,
 *          base: string, playing: number|null}} actions
 */
export function renderBoard(results, actions) {
  const board = $('board');
  board.hidden = results.length < 2;
  if (board.hidden) return;
  $('cards').replaceChildren(...results.map((r, i) => {
    const li = document.createElement('li');
    li.className = `card ${r.state}${actions.playing === i ? ' playing' : ''}`;
    li.dataset.index = String(i);
    const head = document.createElement('div');
    head.className = 'card-head';
    const name = document.createElement('strong');
    name.textContent = r.label;
    const state = document.createElement('span');
    state.className = 'card-state';
    state.textContent = STATE_TEXT[r.state] || r.state;
    head.append(name, state);
    const f = r.figures || {};
    const figures = document.createElement('div');
    figures.className = 'card-figures';
    figures.append(
      figure('TTFP', f.ttfpMs == null ? '–' : `${Math.round(f.ttfpMs)} ms`),
      figure('RTF', f.rtf == null ? '–' : f.rtf.toFixed(2), rtfClass(f.rtf)),
      figure('Audio', f.audioS ? `${f.audioS.toFixed(1)} s` : '–'),
    );
    if (r.loudness && Number.isFinite(r.loudness.lufs)) {   // measured once it is complete (board.js)
      figures.append(figure('Loudness', `${r.loudness.lufs.toFixed(1)} LUFS`));
    }
    if (r.level) figures.append(figure('Level', r.level));   // how its last play was levelled
    const tools = document.createElement('div');
    tools.className = 'card-tools';
    const play = button('▶ Play', `Play ${r.label}`, () => actions.play(i));
    play.className = 'card-play';
    play.disabled = !(r.frames > 0) || r.state === 'connecting' || r.state === 'buffering' || r.state === 'playing';
    tools.append(play);
    if (r.take && r.frames > 0) {   // a take: pin its seed in the page (board.js keepTake)
      const keep = button(r.kept ? '✓ Seed kept' : 'Keep this take', `Keep ${r.label} (seed ${r.request.seed})`,
        () => actions.keep(i));
      keep.className = 'card-keep';
      tools.append(keep);
    }
    if (r.requestId && r.frames > 0 && !r.pushed) {   // the server keeps what it streamed, not pushed audio
      tools.append(...downloadLinks(actions.base, r.requestId, r.stem, r.label));
    }
    li.append(head, figures, tools);
    if (actions.decorate) actions.decorate(r, i, { li, head, tools });   // the voice's star and note
    return li;
  }));
}

// One link per download format of a result the server keeps.
function downloadLinks(base, requestId, stem, label) {
  return FORMATS.map((fmt) => {
    const a = document.createElement('a');
    a.className = 'button';
    a.textContent = fmt.toUpperCase();
    a.href = resultUrl(base, requestId, fmt, stem);
    a.setAttribute('aria-label', `Download ${label} as ${fmt.toUpperCase()}`);
    return a;
  });
}

// ---- history ------------------------------------------------------------------------------------

export function renderHistory(entries, actions) {
  $('history-title').textContent = entries.length ? `History (${entries.length})` : 'History';
  $('clear-history').hidden = entries.length === 0;
  $('history').replaceChildren(...entries.map((e) => {
    const li = document.createElement('li');
    li.className = 'entry';
    const text = document.createElement('span');
    text.className = 'entry-text';
    text.textContent = e.text.length > 90 ? `${e.text.slice(0, 90)}…` : e.text;
    const meta = document.createElement('span');
    meta.className = 'entry-meta';
    const f = e.figures || {};
    meta.textContent = [e.label, f.audioS ? `${f.audioS.toFixed(1)} s` : null,
      f.ttfpMs != null ? `TTFP ${Math.round(f.ttfpMs)} ms` : null, f.rtf != null ? `RTF ${f.rtf.toFixed(2)}` : null,
      new Date(e.at).toLocaleTimeString()].filter(Boolean).join(' · ');
    const tools = document.createElement('span');
    tools.className = 'card-tools';
    tools.append(button('▶ Replay', `Replay: ${e.label}, ${text.textContent}`, () => actions.replay(e)));
    tools.append(...downloadLinks(actions.base, e.requestId, e.stem, e.label));
    li.append(text, meta, tools);
    return li;
  }));
}

/** The code that reproduces the last request; with a `note` instead, no code (a blind card's). */
export function setSnippets(curl, python, note = null) {
  $('snippet-curl').textContent = note ? '' : curl;
  $('snippet-python').textContent = note ? '' : python;
  for (const id of ['snippet-curl', 'snippet-python']) $(id).closest('.snippet').hidden = !!note;
  $('snippet-note').textContent = note || '';
  $('snippet-note').hidden = !note;
}

/** The player's status line and figures for `stats` (redrawn at most once a frame); `run()` is the
 *  run being played, `model()` the model's state, `notify(state)` tells the page of a new state. */
export function statusRenderer(stats, run, model, notify) {
  let queued = false;
  function refreshStatus() {
    const state = stats.state === 'idle' ? model().state : stats.state;
    const text = statusText(state, { waitS: stats.waitS, modelStatus: model().status, error: stats.error });
    const n = stats.items > 1 ? ` (${stats.item + 1}/${stats.items})` : '';
    showStatus(state, text, stats.label ? `${stats.label}${n}` : '');
  }
  function render() {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      renderFigures(stats);
      const current = run(), result = current && current.result;
      const playing = ['buffering', 'playing', 'finishing'].includes(stats.state);
      renderReadAlong(result ? result.segments : null, playing || stats.state === 'finished' ? current.heardS : null);
    });
  }
  function setState(state) {
    stats.state = state;
    if (stats.statesSeen && stats.statesSeen[stats.statesSeen.length - 1] !== state) stats.statesSeen.push(state);
    const current = run();
    if (current && current.result && ['connecting', 'buffering', 'playing', 'finishing'].includes(state)) {
      current.result.state = state === 'finishing' ? 'playing' : state;
    }
    refreshStatus();
    render();
    notify(state);
  }
  return { setState, refreshStatus, render };
}
