// The streaming player: a source (fetch of POST /api/tts/stream, or audio pushed by the parent page)
// -> whole stereo frames -> the 'pcm-player' AudioWorklet, which decides when to start (buffering.js).
//
// Embedded in the Gradio page (player.html?embed=1) it is driven by postMessage (bridge.js):
//   {type:'moss-tts:play', payload:{items:[{label, request}]}, clickedAt}  clickedAt = epoch ms of the click
//   {type:'moss-tts:stop'}, {type:'moss-tts:theme', theme:'dark'|'light'}
//   {type:'tts:start'|'tts:pcm'|'tts:event'|'tts:end'|'tts:error', requestId, ...}  (docs/PROTOCOL.md §3.2)
// Opened directly it shows its own form (standalone.js). Every figure it shows is also on
// window.playerStats (read by the end-to-end tests). URL parameters: embed=1, theme, prebufferMs
// (the short start, default 200), ctxRate (another context rate, to exercise the resampler),
// transport=s16 (16-bit PCM even where Opus decodes: tests and benchmarks).

import { AudioOut } from '../player/audio.js';
import { BlindPanel } from './blind.js';
import { BoardPlayback } from './board.js';
import { clearHistory } from './history.js';
import { CardMarks } from './marks-ui.js';
import { newResult, Results } from './results.js';
import { askForClick, notifyParent, reportHeight, setTheme, watchModel, wireCopyButtons } from './shell.js';
import { upmix } from '../player/framing.js';
import { fetchSource, PushSource } from '../player/source.js';
import { chooseTransport, describe } from '../player/transport.js';
import { clearRunStats, copyWorkletStats, createStats, updateFigures, watchContext } from '../player/stats.js';
import * as view from './view.js';

const params = new URLSearchParams(location.search);
const EMBEDDED = params.get('embed') === '1';
const WANT_RATE = Number(params.get('ctxRate')) || 48000;
// The short start: 200 ms is three 80 ms frames, enough cushion on a loaded CPU when generation is
// fast. Slower generation waits longer, as the worklet plans from the server's length estimate.
const PREBUFFER_MS = Number(params.get('prebufferMs')) || 200;
const STREAM_URL = new URL('../../api/tts/stream', location.href).href;   // relative: any mount prefix
const HEALTH_URL = new URL('../../health', location.href).href;
const VOICES_URL = new URL('../../api/voices', location.href).href;
const AUDITION_GAP_MS = 350;
const $ = (id) => document.getElementById(id);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const audio = new AudioOut(WANT_RATE, onWorkletMessage);
let current = null;      // the run being played: {id, controller, t0, result, settle, outcome, ...}
let playSeq = 0;         // bumped by every play/stop so a stale playlist loop exits
let runCounter = 0;
let unlockedAt = null;   // performance.now() of the last click that unlocked audio (TTFP of pushed audio)
const results = new Results(location.href);
const pushed = new Map();   // requestId -> PushSource
let model = { state: 'loading', status: '' };

const stats = (window.playerStats = createStats(WANT_RATE));
const resetStats = (run, label, index, count) => clearRunStats(stats, run.id, label, index, count);
const unlockByClick = (resume) => askForClick(resume, view.setMessage);

// ---- the worklet's messages ---------------------------------------------------------------------

function onWorkletMessage(m) {
  const run = current;
  if (!run || m.id !== run.id) return;
  if (m.type === 'first-audio') {
    // The first sample was rendered at context time m.time; it is heard one output latency later.
    const now = performance.now();
    const sinceRenderMs = Math.max(0, (audio.ctx.currentTime - m.time) * 1000);
    // Back-dated on the audio clock, which a busy machine can make run ahead of the page's clock:
    // a sample is never heard before the response's first byte arrived.
    stats.ttfpMs = Math.max(now - sinceRenderMs + audio.latencyS * 1000 - run.t0, stats.ttfbMs ?? 0);
    stats.ttfpMsgMs = now - run.t0;
    run.result.figures.ttfpMs = stats.ttfpMs;
    if (stats.state === 'buffering') setState('playing');
    return;
  }
  if (m.stats) applyWorkletStats(run, m.stats);
  if (m.type === 'finished') run.settle('finished');
  else if (m.type === 'stopped') run.settle('stopped');
}

function applyWorkletStats(run, s) {
  copyWorkletStats(stats, s);
  stats.outputLatency = audio.ctx.outputLatency ?? null;
  run.result.figures.underruns = s.underruns;
  const waiting = s.state === 'prebuffering' || s.state === 'starved';
  stats.waitS = waiting && s.plan ? s.plan.waitS : null;
  if (waiting && stats.framesReceived > 0 && ['playing', 'finishing'].includes(stats.state)) setState('buffering');
  else if (s.state === 'playing' && stats.state === 'buffering') setState('playing');
  else if (stats.state === 'buffering') refreshStatus();
  run.heardS = Math.max(0, s.framesRendered / audio.ctx.sampleRate - audio.latencyS);
  render();
}

// ---- playing ------------------------------------------------------------------------------------

function newRun(t0, result) {
  const run = { id: ++runCounter, controller: new AbortController(), t0, result, heardS: 0 };
  run.outcome = new Promise((resolve) => {
    run.settle = (how) => { if (!run.settled) { run.settled = how; resolve(how); } };
  });
  current = run;
  stats.runs += 1;
  return run;
}

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
  stopCurrent();
  const t0 = clickTime(clickedAt);
  const items = (payload && payload.items) || [];
  stats.completed = [];
  const made = items.map((item) => newResult(item.label || '', item.request, { voice: item.voice, take: item.take }));
  results.board = made.length > 1 ? made : [];
  marks.reset();
  blind.start(results.board, (items[0] && items[0].request && items[0].request.text) || '');
  for (let i = 0; i < items.length && seq === playSeq; i++) {
    if (i > 0) { await sleep(AUDITION_GAP_MS); if (seq !== playSeq) break; }
    const ok = await playItem(items[i], made[i], i, items.length, i === 0 ? t0 : performance.now());
    if (!ok) break;
  }
  for (const r of results.board) if (r.state === 'connecting') r.state = 'stopped';
  renderBoard();
}

async function playItem(item, result, index, count, t0, source = null) {
  const run = newRun(t0, result);
  resetStats(run, result.label, index, count);
  view.setMessage('');
  setState('connecting');
  view.setButtons({ stop: true, replay: false });
  renderBoard();
  let rate = 48000, channels = 2;
  try {
    run.sentAt = performance.now();
    if (source) {
      run.push = source;
      run.controller.signal.addEventListener('abort', () => source.abort());
      await audio.resume(unlockByClick);
    } else {   // Opus where WebCodecs decodes it, else 16-bit PCM (transport.js)
      const transport = await chooseTransport(params.get('transport'));
      source = fetchSource(STREAM_URL, item.request, {
        signal: run.controller.signal, beforeRead: () => audio.resume(unlockByClick), transport });
    }
    for await (const m of source) {
      if (m.type === 'start') {
        ({ rate, channels } = m);
        stats.ttfbMs = performance.now() - t0;
        Object.assign(stats, { streamSampleRate: rate, streamChannels: channels, streamFormat: m.format,
          requestId: m.requestId, estimatedS: m.estimatedS, transport: m.transport });
        Object.assign(result, { requestId: m.requestId, rate });
        view.setWire((stats.wire = describe(m.transport, m.bitRate)));
        audio.post({ type: 'start', id: run.id, inputRate: rate, prebufferMs: PREBUFFER_MS, estimatedS: m.estimatedS });
        if (results.board.includes(result)) board.startLive(result, rate);   // matched while it plays
        setState('buffering');
      } else if (m.type === 'read') {
        stats.networkReads += 1;
        stats.streamBytes += m.bytes;
      } else if (m.type === 'pcm') {
        stats.bytesReceived += m.data.byteLength;
        pushFrames(run, channels === 2 ? m.data : upmix(m.data), rate);
        stats.elapsedMs = performance.now() - run.sentAt;
        updateFigures(stats, result);
        render();
      } else if (m.type === 'event') {
        onEvent(result, m.event);
      } else if (m.type === 'end') {
        stats.trailingBytes = m.trailingBytes;
      }
    }
  } catch (err) {
    return failed(run, err);
  }
  stats.elapsedMs = performance.now() - run.sentAt;
  updateFigures(stats, result);
  const exact = board.liveComplete(result);   // a live card: the rest plays at the exact gain
  if (exact) audio.post(exact);
  audio.post({ type: 'end' });
  if (stats.state !== 'connecting') setState(stats.framesRendered > 0 ? 'finishing' : stats.state);
  const how = await run.outcome;
  results.keep(result);
  if (how !== 'finished') {   // stopped while playing out: the whole result can still be replayed
    result.state = 'stopped';
    if (current === run) view.setButtons({ stop: false, replay: !!results.last });
    renderBoard();
    return false;
  }
  result.state = 'finished';
  stats.completed.push({
    label: result.label, ttfpMs: stats.ttfpMs, rtf: stats.rtf, frames: stats.framesReceived,
    framesRendered: stats.framesRendered, underruns: stats.underruns, requestId: stats.requestId,
  });
  results.remember(result, replayEntry);
  setState('finished');
  view.setButtons({ stop: false, replay: true });
  renderBoard();
  return true;
}

function onEvent(result, event) {
  if (!event || event.type !== 'speech.segment') return;
  result.segments = [...result.segments, { index: event.index, text: event.text, start: event.start, end: event.end }];
  stats.segments = result.segments.length;
}

function pushFrames(run, stereo, rate, keepIt = true) {
  const frames = stereo.length >> 1;
  let sl = 0, sr = 0;
  for (let i = 0; i < stereo.length; i += 2) { sl += stereo[i] * stereo[i]; sr += stereo[i + 1] * stereo[i + 1]; }
  stats.srcSumSqL += sl; stats.srcSumSqR += sr;
  stats.framesReceived += frames;
  stats.audioSeconds = stats.framesReceived / rate;
  if (stats.arrivals.length < 400) {   // [ms since the request, frames so far]: for diagnosing underruns
    stats.arrivals.push([Math.round(performance.now() - (run.sentAt ?? run.t0)), stats.framesReceived]);
  }
  if (keepIt) { run.result.chunks.push(stereo.slice()); run.result.frames += frames; }   // the original is transferred
  const gain = keepIt && board.liveGain(run.result, stereo);   // the worklet scales it as it plays
  if (gain) audio.post(gain);
  audio.post({ type: 'pcm', data: stereo }, [stereo.buffer]);
  stats.chunksPosted += 1;
}

function failed(run, err) {
  const aborted = err && err.name === 'AbortError';
  run.settle(aborted ? 'stopped' : 'error');
  run.result.live = null;   // an incomplete card: not remembered
  run.result.state = aborted ? 'stopped' : 'error';
  results.keep(run.result);
  renderBoard();
  if (aborted) {   // Stop (or a new request): what was heard stays available for replay and download
    if (current === run) view.setButtons({ stop: false, replay: !!results.last });
    return false;
  }
  if (current === run) audio.post({ type: 'stop' });
  stats.error = err.message || String(err);
  setState('error');
  view.setButtons({ stop: false, replay: !!results.last });
  notifyParent({ type: 'moss-player:error', message: stats.error });
  return false;
}

function stopCurrent() {
  const run = current;
  if (!run || run.settled) return false;
  run.controller.abort();                  // the server sees the disconnect and cancels the request
  audio.post({ type: 'stop' });            // the worklet fades out, then posts 'stopped'
  setTimeout(() => run.settle('stopped'), 200);   // in case the worklet was not playing this run
  return true;
}

function stop() {
  playSeq += 1;
  if (stopCurrent()) {
    setState('stopped');
    view.setButtons({ stop: false, replay: !!results.last });
  }
}

/** Play a kept result again: from memory, no request. */
async function replay(result = results.last, label = null) {
  if (!result) return;
  const seq = ++playSeq;
  stopCurrent();
  const run = newRun(performance.now(), result), kept = result.state;
  resetStats(run, label || `${result.label || ''} (replay)`, 0, 1);
  view.setButtons({ stop: true, replay: false });
  try { await audio.resume(unlockByClick); } catch (err) { return failed(run, err); }
  if (seq !== playSeq) return;
  audio.post({ type: 'start', id: run.id, inputRate: result.rate, prebufferMs: 0 });
  setState('buffering');
  const all = new Float32Array(result.frames * 2);   // one message: nothing to wait for mid-way
  let offset = 0;
  for (const chunk of result.chunks) { all.set(chunk, offset); offset += chunk.length; }
  board.applyGain(all, result, results.board.includes(result) || result.onBoard);   // the kept PCM stays as made
  pushFrames(run, all, result.rate, false);
  audio.post({ type: 'end' });
  results.show(result);
  renderBoard();
  const how = await run.outcome;
  result.state = kept;   // a replay leaves the result as it was (setState marked it playing)
  if (how === 'finished') setState('finished');
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
    stopCurrent();
    const t0 = m.clickedAt ? clickTime(m.clickedAt) : (unlockedAt ?? performance.now());
    const request = { text: m.text || '', ...(typeof m.voice === 'string' ? { voice: m.voice } : {}) };
    const result = newResult(m.label || 'speech', request, { pushed: true });
    const item = m.item || 0, items = m.items || 1;
    if (item === 0) { stats.completed = []; results.board = []; }
    if (items > 1) results.board[item] = result;   // an audition pushed voice by voice
    source.deliver(m);
    playItem(null, result, item, items, t0, source)
      .finally(() => { if (seq === playSeq) pushed.delete(m.requestId); });
    return;
  }
  const source = pushed.get(m.requestId);
  if (source) source.deliver(m);
}

// ---- view ---------------------------------------------------------------------------------------

const { setState, refreshStatus, render } = view.statusRenderer(stats, () => current, () => model,
  (state) => notifyParent({ type: 'moss-player:state', state }));

function renderBoard() {
  results.renderBoard(current && !current.settled ? current.result : null, {
    play: (result) => board.playCard(results.board, results.board.indexOf(result)),
    keep: (result) => board.keepTake(result), decorate: (...card) => marks.decorate(...card) });
  $('loudness-note').textContent = board.note();
}
const board = new BoardPlayback({ replay, stop: stopByVisitor, isPlaying: () => !!current && !current.settled,
  render: renderBoard, play, healthUrl: HEALTH_URL, cards: () => results.board });
const blind = new BlindPanel($('blind'), $('blind-results'), {   // X plays as a copy: no card lights up
  play: (card, label) => replay({ ...card, label, onBoard: true, of: card }, `${label} (replay)`),
  changed: () => { renderBoard(); results.showSnippet(); } });
const marks = new CardMarks({ changed: renderBoard });

// ---- wiring -------------------------------------------------------------------------------------

function unlock() {   // bridge.js calls this synchronously inside the page's click handler
  unlockedAt = performance.now();
  audio.unlock();
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
  if (e.key === 'Escape' && current && !current.settled) stopByVisitor();
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

audio.init().then(() => watchContext(stats, audio.ctx))   // pre-warm: context + worklet before the first click
  .catch((err) => view.setMessage(err.message));
window.mossPlayer = { unlock, play, stop, replay, stats, setMessage: view.setMessage, setTheme };
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
