// The studio's player page: a StreamPlayer (static/player/) with the studio's features around it —
// results and downloads, captions, history, the comparison board, blind tests, favourites.
//
// Embedded in the Gradio page (player.html?embed=1) it is driven by postMessage (bridge.js):
//   {type:'moss-tts:play', payload:{items:[{label, request}]}, clickedAt}  clickedAt = epoch ms of the click
//   {type:'moss-tts:stop'}, {type:'moss-tts:theme', theme:'dark'|'light'}
//   {type:'tts:start'|'tts:pcm'|'tts:event'|'tts:end'|'tts:error', requestId, ...}  (docs/PROTOCOL.md §3.2)
// Opened directly it shows its own form (standalone.js). Every figure it shows is also on
// window.playerStats (read by the end-to-end tests). URL parameters: embed=1, theme, prebufferMs
// (the short start, default 200), ctxRate (another context rate, to exercise the resampler),
// transport=s16 (16-bit PCM even where Opus decodes: tests and benchmarks).

import { memorySource, PushSource, StreamSource } from '../player/source.js';
import { StreamPlayer } from '../player/stream-player.js';
import { BlindPanel } from './blind.js';
import { BoardPlayback } from './board.js';
import { clearHistory } from './history.js';
import { CardMarks } from './marks-ui.js';
import { newResult, Results } from './results.js';
import { askForClick, notifyParent, reportHeight, setTheme, watchModel, wireCopyButtons } from './shell.js';
import * as view from './view.js';

const params = new URLSearchParams(location.search);
const EMBEDDED = params.get('embed') === '1';
// The short start: 200 ms is three 80 ms frames, enough cushion on a loaded CPU when generation is
// fast. Slower generation waits longer, as the worklet plans from the server's length estimate.
const PREBUFFER_MS = Number(params.get('prebufferMs')) || 200;
const ROOT = new URL('../../', location.href).href;   // the app's root, relative: any mount prefix
const STREAM_URL = new URL('api/tts/stream', ROOT).href;
const HEALTH_URL = new URL('health', ROOT).href;
const VOICES_URL = new URL('api/voices', ROOT).href;
const AUDITION_GAP_MS = 350;
const $ = (id) => document.getElementById(id);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const stats = (window.playerStats = { completed: [], model: 'loading' });
const player = new StreamPlayer({ rate: Number(params.get('ctxRate')) || 48000, prebufferMs: PREBUFFER_MS, stats,
  askForClick: (resume) => askForClick(resume, view.setMessage) });
let current = null;      // what is being played: {result, keep (a new result, not a replay), arrived}
let playSeq = 0;         // bumped by every play/stop so a stale playlist loop exits
let unlockedAt = null;   // performance.now() of the last click that unlocked audio (TTFP of pushed audio)
const results = new Results(ROOT);
const pushed = new Map();   // requestId -> PushSource
let model = { state: 'loading', status: '' };

// ---- the player's events ------------------------------------------------------------------------

player.addEventListener('state', (e) => setState(e.detail));
player.addEventListener('stats', () => {
  if (current) current.result.figures.underruns = stats.underruns;
  if (stats.state === 'buffering') refreshStatus();
  render();
});
player.addEventListener('firstsound', (e) => { if (current) current.result.figures.ttfpMs = e.detail.ms; });
player.addEventListener('start', (e) => {
  const { result, keep } = current;
  if (!keep) return;   // a replay: the result is as it was made
  view.setWire(stats.wire);
  Object.assign(result, { requestId: e.detail.requestId, rate: e.detail.rate });
  if (results.board.includes(result)) board.startLive(result, e.detail.rate);   // matched while it plays
});
player.addEventListener('pcm', (e) => {
  const { result, keep } = current, { data } = e.detail;
  if (keep) {
    result.chunks.push(data.slice());   // the original is handed to the worklet
    result.frames += data.length >> 1;
    const gain = board.liveGain(result, data);   // the worklet scales it as it plays
    if (gain) player.setGain(gain.gain);
  }
  figures(result);
  render();
});
player.addEventListener('speechevent', (e) => {
  const event = e.detail, { result } = current;
  if (!event || event.type !== 'speech.segment') return;
  result.segments = [...result.segments, { index: event.index, text: event.text, start: event.start, end: event.end }];
  stats.segments = result.segments.length;
});
player.addEventListener('arrived', () => {
  current.arrived = true;
  figures(current.result);
  const exact = current.keep && board.liveComplete(current.result);   // a live card: the rest plays at the exact gain
  if (exact) player.setGain(exact.gain);
});

function figures(result) {
  Object.assign(result.figures, { rtf: stats.rtf, audioS: stats.audioSeconds, ttfpMs: stats.ttfpMs });
}

// ---- playing ------------------------------------------------------------------------------------

function clickTime(clickedAt) {
  let t0 = performance.now();
  if (clickedAt) {   // the click happened in the parent page: its epoch time in our clock
    const t = clickedAt - performance.timeOrigin;
    if (t <= t0 && t0 - t < 60000) t0 = t;
  }
  return t0;
}

async function play(payload, clickedAt) {
  const seq = ++playSeq;
  player.cancel();
  const t0 = clickTime(clickedAt);
  const items = (payload && payload.items) || [];
  stats.completed = [];
  const made = items.map((item) => newResult(item.label || '', item.request, { voice: item.voice, take: item.take }));
  results.board = made.length > 1 ? made : [];
  marks.reset();
  blind.start(results.board, (items[0] && items[0].request && items[0].request.text) || '');
  for (let i = 0; i < items.length && seq === playSeq; i++) {
    if (i > 0) { await sleep(AUDITION_GAP_MS); if (seq !== playSeq) break; }
    const source = new StreamSource(STREAM_URL, items[i].request, { transport: params.get('transport') });
    const ok = await playItem(source, made[i], i, items.length, i === 0 ? t0 : performance.now());
    if (!ok) break;
  }
  for (const r of results.board) if (r.state === 'connecting') r.state = 'stopped';
  renderBoard();
}

/** One item of a play (fetched or pushed) as a new result; false when it did not finish. */
async function playItem(source, result, index, count, t0) {
  Object.assign(stats, { label: result.label, item: index, items: count, segments: 0 });
  const entry = current = { result, keep: true, arrived: false };
  view.setMessage('');
  view.setButtons({ stop: true, replay: false });
  const outcome = player.play(source, { t0 });
  renderBoard();
  const how = await outcome;
  figures(result);
  if (how !== 'finished') {   // what was heard stays available for replay and download
    if (!entry.arrived) result.live = null;   // an incomplete card: not remembered
    result.state = how;
    results.keep(result);
    if (current === entry) view.setButtons({ stop: false, replay: !!results.last });
    renderBoard();
    if (how === 'error') notifyParent({ type: 'moss-player:error', message: stats.error });
    return false;
  }
  results.keep(result);
  result.state = 'finished';
  stats.completed.push({
    label: result.label, ttfpMs: stats.ttfpMs, rtf: stats.rtf, frames: stats.framesReceived,
    framesRendered: stats.framesRendered, underruns: stats.underruns, requestId: stats.requestId,
  });
  results.remember(result, replayEntry);
  view.setButtons({ stop: false, replay: true });
  renderBoard();
  return true;
}

function stop() {
  playSeq += 1;
  if (player.stop()) view.setButtons({ stop: false, replay: !!results.last });
}

/** Play a kept result again: from memory, no request. */
async function replay(result = results.last, label = null) {
  if (!result) return;
  ++playSeq;
  player.cancel();
  Object.assign(stats, { label: label || `${result.label || ''} (replay)`, item: 0, items: 1, segments: 0 });
  const kept = result.state;
  current = { result, keep: false };
  view.setButtons({ stop: true, replay: false });
  const all = new Float32Array(result.frames * 2);   // one message: nothing to wait for mid-way
  let offset = 0;
  for (const chunk of result.chunks) { all.set(chunk, offset); offset += chunk.length; }
  board.applyGain(all, result, results.board.includes(result) || result.onBoard);   // the kept PCM stays as made
  const outcome = player.play(memorySource(all, result.rate), { prebufferMs: 0 });
  results.show(result);
  renderBoard();
  const how = await outcome;
  result.state = kept;   // a replay leaves the result as it was (the player's states marked it playing)
  view.setButtons({ stop: false, replay: true });
  renderBoard();
  return how;
}

/** A history entry: from memory when this page still has it, else the server's kept copy. */
async function replayEntry(entry) {
  const result = await results.fetch(entry);
  if (result) await replay(result);
  else view.setMessage('This result is no longer kept on the server; generate it again.');
}

// ---- pushed audio (docs/PROTOCOL.md §3.2) ------------------------------------------------------

function onPush(m) {
  if (m.type === 'tts:start') {   // {requestId, sampleRate, channels, estimatedDuration, label?, text?, item?, items?, clickedAt?}
    const source = new PushSource(m.requestId);
    pushed.set(m.requestId, source);
    const seq = ++playSeq;
    player.cancel();
    const t0 = m.clickedAt ? clickTime(m.clickedAt) : (unlockedAt ?? performance.now());
    const request = { text: m.text || '', ...(typeof m.voice === 'string' ? { voice: m.voice } : {}) };
    const result = newResult(m.label || 'speech', request, { pushed: true });
    const item = m.item || 0, items = m.items || 1;
    if (item === 0) { stats.completed = []; results.board = []; }
    if (items > 1) results.board[item] = result;   // an audition pushed voice by voice
    source.deliver(m);
    playItem(source, result, item, items, t0)
      .finally(() => { if (seq === playSeq) pushed.delete(m.requestId); });
    return;
  }
  const source = pushed.get(m.requestId);
  if (source) source.deliver(m);
}

// ---- view ---------------------------------------------------------------------------------------

const { setState, refreshStatus, render } = view.statusRenderer(stats,
  () => current && { result: current.result, heardS: player.heardS }, () => model,
  (state) => notifyParent({ type: 'moss-player:state', state }));

function renderBoard() {
  results.renderBoard(current && player.playing ? current.result : null, {
    play: (result) => board.playCard(results.board, results.board.indexOf(result)),
    keep: (result) => board.keepTake(result), decorate: (...card) => marks.decorate(...card) });
  $('loudness-note').textContent = board.note();
}
const board = new BoardPlayback({ replay, stop: stopByVisitor, isPlaying: () => player.playing,
  render: renderBoard, play, healthUrl: HEALTH_URL, cards: () => results.board });
const blind = new BlindPanel($('blind'), $('blind-results'), {   // X plays as a copy: no card lights up
  play: (card, label) => replay({ ...card, label, onBoard: true, of: card }, `${label} (replay)`),
  changed: () => { renderBoard(); results.showSnippet(); } });
const marks = new CardMarks({ changed: renderBoard });

// ---- wiring -------------------------------------------------------------------------------------

function unlock() {   // bridge.js calls this synchronously inside the page's click handler
  unlockedAt = performance.now();
  player.unlock();
}

window.addEventListener('message', (e) => {
  if (e.origin !== location.origin || !e.data) return;
  const m = e.data;
  if (m.type === 'moss-tts:play') play(m.payload, m.clickedAt);
  else if (m.type === 'moss-tts:stop') stop();
  else if (m.type === 'moss-tts:theme') setTheme(m.theme);
  else if (m.type === 'moss-tts:options') board.setOptions(m.options || {});
  else if (typeof m.type === 'string' && m.type.startsWith('tts:')) onPush(m);
});
function stopByVisitor() {   // the page hears of it too: its stop events may cancel work on the server
  stop();
  notifyParent({ type: 'moss-player:stop' });
}

document.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && player.playing) stopByVisitor();
  else if (board.onKey(e, results.board)) e.preventDefault();
  else if (e.key === 'Enter' && (e.ctrlKey || e.metaKey) && EMBEDDED) {   // the page's shortcut, from in here
    unlock();
    notifyParent({ type: 'moss-player:generate' });
  }
});
$('stop').onclick = stopByVisitor;
$('replay').onclick = () => replay();
$('clear-history').onclick = () => results.renderHistory(replayEntry, clearHistory());
wireCopyButtons();
reportHeight();

player.ready.catch((err) => view.setMessage(err.message));   // pre-warmed: context + worklet before the first click
window.mossPlayer = { unlock, play, stop, replay, stats, setMessage: view.setMessage, setTheme, player };
if (!EMBEDDED) $('standalone').hidden = false;   // standalone.js drives the form
document.body.classList.toggle('embedded', EMBEDDED);
view.setDownloads(null);
results.renderHistory(replayEntry);
refreshStatus();
watchModel(HEALTH_URL, (m) => {
  model = m;
  stats.model = m.state;
  if (m.state === 'ready') { board.openLink(); CardMarks.pruneDeleted(VOICES_URL); }
  if (stats.state === 'idle') refreshStatus();
});
render();
