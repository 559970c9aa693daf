// Streaming player: POST /api/tts/stream -> whole stereo frames -> AudioWorklet 'pcm-player'.
//
// Embedded in the Gradio page (player.html?embed=1) it is driven by postMessage from bridge.js:
//   {type:'moss-tts:play', payload:{items:[{label, request}]}, clickedAt}  clickedAt = epoch ms of the click
//   {type:'moss-tts:stop'}
// Opened directly it shows its own text box and voice picker. Every figure it shows is also on
// window.playerStats (read by the end-to-end tests).
// URL parameters: embed=1 (no form), prebufferMs (default 200), ctxRate (ask the AudioContext for
// another rate, to exercise the worklet's resampler), and seed / max_frames for the standalone form.
'use strict';

(() => {
  const params = new URLSearchParams(location.search);
  const EMBEDDED = params.get('embed') === '1';
  const WANT_RATE = Number(params.get('ctxRate')) || 48000;   // tests force another rate to exercise the resampler
  // Audio buffered before playback starts. The first chunks are single 80 ms frames, so 200 ms means
  // three frames: on a loaded CPU that cushion is what keeps the start gapless, and it costs only the
  // generation time of one more frame (~25 ms at RTF 0.3) over two.
  const PREBUFFER_MS = Number(params.get('prebufferMs')) || 200;
  const STREAM_URL = new URL('../api/tts/stream', location.href).href;   // relative: works under any mount prefix
  const AUDITION_GAP_MS = 350;

  const $ = (id) => document.getElementById(id);
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  let ctx = null;
  let node = null;
  let audioReady = null;
  let current = null;      // the stream being played: {id, controller, t0, sentAt, chunks, frames, ...}
  let playSeq = 0;         // bumped by every play/stop so a stale playlist loop exits
  let streamCounter = 0;
  let last = null;         // the last result, for replay and download: {chunks, rate, frames, label, requestId}

  const stats = (window.playerStats = {
    state: 'idle', workletLoaded: false, sampleRate: null, requestedRate: WANT_RATE, baseLatency: null,
    outputLatency: null, destinationChannels: null, runs: 0, completed: [],
  });

  function resetStats(run, label, index, count) {
    Object.assign(stats, {
      runId: run.id, label, item: index, items: count, error: null, requestId: null,
      streamSampleRate: null, streamChannels: null, streamFormat: null,
      bytesReceived: 0, networkReads: 0, chunksPosted: 0, framesReceived: 0, trailingBytes: 0,
      srcSumSqL: 0, srcSumSqR: 0, audioSeconds: 0, arrivals: [], underrunsAt: [],
      framesRendered: 0, underruns: 0, underrunFrames: 0, bufferedFrames: 0, bufferedMs: 0,
      rms: 0, rmsL: 0, rmsR: 0, rmsDiff: 0, maxStep: 0, peak: 0, sumSqL: 0, sumSqR: 0,
      outputChannels: null, resampling: false,
      ttfbMs: null, ttfpMs: null, ttfpMsgMs: null, rtf: null, xRealtime: null, elapsedMs: 0,
    });
  }

  // ---- audio graph -------------------------------------------------------------------------------

  function initAudio() {
    if (audioReady) return audioReady;
    if (!window.AudioContext || !window.isSecureContext) {
      audioReady = Promise.reject(new Error(
        'This browser cannot play the stream here: AudioWorklet needs HTTPS or localhost.'));
      return audioReady;
    }
    try {
      ctx = new AudioContext({ sampleRate: WANT_RATE, latencyHint: 'interactive' });
    } catch (err) {   // a browser may refuse the rate: take its own, the worklet resamples
      ctx = new AudioContext({ latencyHint: 'interactive' });
    }
    stats.audioState = ctx.state;   // 'suspended' until a user gesture where autoplay is restricted
    ctx.onstatechange = () => { stats.audioState = ctx.state; };
    Object.assign(stats, {
      sampleRate: ctx.sampleRate, baseLatency: ctx.baseLatency ?? null,
      destinationChannels: ctx.destination.channelCount, maxChannelCount: ctx.destination.maxChannelCount,
    });
    audioReady = ctx.audioWorklet.addModule(new URL('worklet.js', location.href).href).then(() => {
      node = new AudioWorkletNode(ctx, 'pcm-player', {
        numberOfInputs: 0, numberOfOutputs: 1, outputChannelCount: [2],
      });
      node.port.onmessage = (e) => onWorkletMessage(e.data);
      node.connect(ctx.destination);
      stats.workletLoaded = true;
    });
    return audioReady;
  }

  // Resume inside a user gesture when possible; if the browser still holds audio back, ask for a click.
  async function resumeAudio() {
    await initAudio();
    if (ctx.state === 'running') return;
    await Promise.race([ctx.resume(), sleep(400)]);
    if (ctx.state === 'running') return;
    const button = $('unlock');
    button.hidden = false;
    setMessage('The browser is holding audio back until you click.', 'info');
    await new Promise((resolve) => {
      button.onclick = () => ctx.resume().then(resolve);
    });
    button.hidden = true;
    setMessage('');
  }

  function unlock() {   // called by bridge.js synchronously inside the page's click handler
    initAudio().catch(() => {});
    if (ctx && ctx.state !== 'running') ctx.resume().catch(() => {});
  }

  function onWorkletMessage(m) {
    const run = current;
    if (!run || m.id !== run.id) return;
    if (m.type === 'first-audio') {
      // The first sample was rendered at context time m.time; it is heard one output latency later.
      // (Going back by the context clock removes the delay of this message itself.)
      const now = performance.now();
      const sinceRenderMs = Math.max(0, (ctx.currentTime - m.time) * 1000);
      const latencyMs = Math.min(500, (ctx.outputLatency || ctx.baseLatency || 0) * 1000);
      stats.ttfpMs = now - sinceRenderMs + latencyMs - run.t0;
      stats.ttfpMsgMs = now - run.t0;
      if (stats.state === 'buffering') setState('playing');
      return;
    }
    if (m.stats) applyWorkletStats(m.stats);
    if (m.type === 'finished') run.settle('finished');
    else if (m.type === 'stopped') run.settle('stopped');
  }

  function applyWorkletStats(s) {
    Object.assign(stats, {
      framesRendered: s.framesRendered, underruns: s.underruns, underrunFrames: s.underrunFrames,
      bufferedFrames: s.buffered, bufferedMs: s.bufferedMs, rms: s.rms, rmsL: s.rmsL, rmsR: s.rmsR,
      rmsDiff: s.rmsDiff, maxStep: s.maxStep, peak: s.peak, sumSqL: s.sumSqL, sumSqR: s.sumSqR,
      outputChannels: s.outChannels, resampling: s.resampling, workletFramesReceived: s.framesReceived,
      underrunsAt: s.underrunsAt,
      workletState: s.state,
    });
    stats.outputLatency = ctx.outputLatency ?? null;
    render();
  }

  // ---- playing -----------------------------------------------------------------------------------

  function newRun(t0) {
    const run = { id: ++streamCounter, controller: new AbortController(), t0, chunks: [], frames: 0 };
    run.outcome = new Promise((resolve) => {
      run.settle = (how) => { if (!run.settled) { run.settled = how; resolve(how); } };
    });
    current = run;
    stats.runs += 1;
    return run;
  }

  async function play(payload, clickedAt) {
    const seq = ++playSeq;
    stopCurrent();
    let t0 = performance.now();
    if (clickedAt) {   // the click happened in the parent page: convert its epoch time to ours
      const t = clickedAt - performance.timeOrigin;
      if (t <= t0 && t0 - t < 60000) t0 = t;
    }
    const items = (payload && payload.items) || [];
    stats.completed = [];
    for (let i = 0; i < items.length && seq === playSeq; i++) {
      if (i > 0) { await sleep(AUDITION_GAP_MS); if (seq !== playSeq) break; }
      const ok = await playItem(items[i], i, items.length, i === 0 ? t0 : performance.now());
      if (!ok) break;
    }
  }

  async function playItem(item, index, count, t0) {
    const run = newRun(t0);
    resetStats(run, item.label || '', index, count);
    setMessage('');
    setState('connecting');
    setButtons({ stop: true, replay: false, download: false });
    let resp;
    try {
      run.sentAt = performance.now();
      const request = fetch(STREAM_URL, {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, cache: 'no-store',
        body: JSON.stringify(item.request), signal: run.controller.signal,
      });
      await resumeAudio();
      resp = await request;
    } catch (err) {
      return failed(run, err);
    }
    stats.ttfbMs = performance.now() - t0;
    if (!resp.ok) return failed(run, new Error(await errorMessage(resp)));

    const rate = Number(resp.headers.get('X-Sample-Rate')) || 48000;
    const channels = Number(resp.headers.get('X-Channels')) || 2;
    const format = resp.headers.get('X-Sample-Format') || 'f32le';
    Object.assign(stats, {
      streamSampleRate: rate, streamChannels: channels, streamFormat: format,
      requestId: resp.headers.get('X-Request-Id'),
    });
    if (format !== 'f32le' || channels < 1 || channels > 2) {
      run.controller.abort();
      return failed(run, new Error(`unsupported stream format ${format} × ${channels} channels`));
    }
    node.port.postMessage({ type: 'start', id: run.id, inputRate: rate, prebufferMs: PREBUFFER_MS });
    setState('buffering');

    const frameBytes = 4 * channels;
    const reader = resp.body.getReader();
    let carry = null;   // bytes of an incomplete frame left over from the previous read
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        stats.networkReads += 1;
        stats.bytesReceived += value.byteLength;
        let bytes = value;
        if (carry) {
          bytes = new Uint8Array(carry.length + value.length);
          bytes.set(carry);
          bytes.set(value, carry.length);
        }
        const usable = bytes.length - (bytes.length % frameBytes);
        carry = usable < bytes.length ? bytes.slice(usable) : null;
        if (usable === 0) continue;
        // Copy into a fresh, 4-byte-aligned buffer (a network read may start at any offset).
        const samples = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + usable));
        const stereo = channels === 2 ? samples : upmix(samples);
        pushFrames(run, stereo, rate);
        stats.elapsedMs = performance.now() - run.sentAt;
        stats.rtf = stats.elapsedMs / 1000 / stats.audioSeconds;
        stats.xRealtime = 1 / stats.rtf;
        render();
      }
    } catch (err) {
      return failed(run, err.name === 'AbortError' ? err : new Error(`the stream broke off (${err.message})`));
    }
    stats.trailingBytes = carry ? carry.length : 0;
    stats.elapsedMs = performance.now() - run.sentAt;
    if (stats.audioSeconds > 0) {
      stats.rtf = stats.elapsedMs / 1000 / stats.audioSeconds;
      stats.xRealtime = 1 / stats.rtf;
    }
    node.port.postMessage({ type: 'end' });
    if (stats.state !== 'connecting') setState(stats.framesRendered > 0 ? 'finishing' : stats.state);
    const how = await run.outcome;
    keepResult(run, rate, item.label);
    if (how !== 'finished') {   // stopped while playing out: the whole result can still be replayed
      if (current === run) setButtons({ stop: false, replay: !!last, download: !!last });
      return false;
    }
    stats.completed.push({
      label: item.label, ttfpMs: stats.ttfpMs, rtf: stats.rtf, frames: stats.framesReceived,
      framesRendered: stats.framesRendered, underruns: stats.underruns, requestId: stats.requestId,
    });
    setState('finished');
    setButtons({ stop: false, replay: true, download: true });
    return true;
  }

  function pushFrames(run, stereo, rate, keep = true) {
    const frames = stereo.length >> 1;
    let sl = 0, sr = 0;
    for (let i = 0; i < stereo.length; i += 2) { sl += stereo[i] * stereo[i]; sr += stereo[i + 1] * stereo[i + 1]; }
    stats.srcSumSqL += sl; stats.srcSumSqR += sr;
    stats.framesReceived += frames;
    stats.audioSeconds = stats.framesReceived / rate;
    if (stats.arrivals.length < 400) {   // [ms since the request, frames so far]: for diagnosing underruns
      stats.arrivals.push([Math.round(performance.now() - (run.sentAt ?? run.t0)), stats.framesReceived]);
    }
    if (keep) run.chunks.push(stereo.slice());   // kept for replay/download; the original is transferred
    run.frames += frames;
    node.port.postMessage({ type: 'pcm', data: stereo }, [stereo.buffer]);
    stats.chunksPosted += 1;
  }

  function upmix(mono) {
    const out = new Float32Array(mono.length * 2);
    for (let i = 0; i < mono.length; i++) { out[2 * i] = mono[i]; out[2 * i + 1] = mono[i]; }
    return out;
  }

  function keepResult(run, rate, label) {
    if (run.frames > 0) {
      last = { chunks: run.chunks, rate, frames: run.frames, label, requestId: stats.requestId };
    }
  }

  function failed(run, err) {
    const aborted = err && err.name === 'AbortError';
    run.settle(aborted ? 'stopped' : 'error');
    if (run.frames > 0) keepResult(run, stats.streamSampleRate || 48000, stats.label);
    if (aborted) {   // Stop (or a new request): keep what was heard available for replay/download
      if (current === run) setButtons({ stop: false, replay: !!last, download: !!last });
      return false;
    }
    if (current === run && node) node.port.postMessage({ type: 'stop' });
    stats.error = err.message || String(err);
    setState('error');
    setMessage(stats.error);
    setButtons({ stop: false, replay: !!last, download: !!last });
    notifyParent({ type: 'moss-player:error', message: stats.error });
    return false;
  }

  async function errorMessage(resp) {
    try {
      const body = await resp.json();
      const e = body.error || {};
      const field = e.param ? ` (field: ${e.param})` : '';
      return `${e.message || resp.statusText}${field}`;
    } catch (_) {
      return `the server answered ${resp.status} ${resp.statusText}`;
    }
  }

  function stopCurrent() {
    const run = current;
    if (!run || run.settled) return false;
    run.controller.abort();                       // the server sees the disconnect and cancels the request
    if (node) node.port.postMessage({ type: 'stop' });   // the worklet fades out, then posts 'stopped'
    setTimeout(() => run.settle('stopped'), 200);        // in case the worklet was not playing this run
    return true;
  }

  function stop() {
    playSeq += 1;
    pushed = null;
    if (stopCurrent()) {
      setState('stopped');
      setButtons({ stop: false, replay: !!last, download: !!last });
    }
  }

  async function replay() {
    if (!last) return;
    const seq = ++playSeq;
    stopCurrent();
    const result = last;
    const run = newRun(performance.now());
    resetStats(run, `${result.label || ''} (replay)`, 0, 1);
    setButtons({ stop: true, replay: false, download: true });
    try { await resumeAudio(); } catch (err) { return failed(run, err); }
    if (seq !== playSeq) return;
    node.port.postMessage({ type: 'start', id: run.id, inputRate: result.rate, prebufferMs: 0 });
    setState('buffering');
    const all = new Float32Array(result.frames * 2);   // one message: nothing to wait for mid-way
    let offset = 0;
    for (const chunk of result.chunks) { all.set(chunk, offset); offset += chunk.length; }
    pushFrames(run, all, result.rate, false);
    run.chunks = result.chunks;
    node.port.postMessage({ type: 'end' });
    const how = await run.outcome;
    if (how === 'finished') setState('finished');
    setButtons({ stop: false, replay: true, download: true });
  }

  // ---- push source (CONTRACTS D): the parent page posts the audio (ZeroGPU mode) ------------------
  // {type:'tts:start', requestId, sampleRate, channels, estimatedDuration, label?, item?, items?, clickedAt?},
  // {type:'tts:pcm', requestId, data: Float32Array interleaved}, {type:'tts:end', requestId},
  // {type:'tts:error', requestId, message}. Same stats as a fetched stream.

  let pushed = null;   // {run, requestId, rate, channels, ready, backlog: [message, ...]}

  async function pushStart(m) {
    playSeq += 1;
    stopCurrent();
    let t0 = performance.now();
    if (m.clickedAt) {
      const t = m.clickedAt - performance.timeOrigin;
      if (t <= t0 && t0 - t < 60000) t0 = t;
    }
    const run = newRun(t0);
    run.sentAt = t0;
    const channels = m.channels || 2;
    const rate = m.sampleRate || 48000;
    const item = m.item || 0;
    resetStats(run, m.label || '', item, m.items || 1);
    if (item === 0) stats.completed = [];
    Object.assign(stats, { streamSampleRate: rate, streamChannels: channels, streamFormat: 'f32le',
      requestId: m.requestId, ttfbMs: performance.now() - t0 });
    const state = { run, requestId: m.requestId, rate, channels, ready: false, backlog: [] };
    pushed = state;
    setMessage('');
    setState('connecting');
    setButtons({ stop: true, replay: false, download: false });
    try { await resumeAudio(); } catch (err) { pushed = null; failed(run, err); return; }
    if (pushed !== state) return;
    node.port.postMessage({ type: 'start', id: run.id, inputRate: rate, prebufferMs: PREBUFFER_MS });
    setState('buffering');
    state.ready = true;
    for (const queued of state.backlog.splice(0)) pushMessage(state, queued);
  }

  function pushMessage(state, m) {
    const run = state.run;
    if (m.type === 'tts:pcm') {
      const samples = m.data instanceof Float32Array ? m.data : new Float32Array(m.data);
      stats.networkReads += 1;
      stats.bytesReceived += samples.byteLength;
      pushFrames(run, state.channels === 2 ? samples : upmix(samples), state.rate);
      stats.elapsedMs = performance.now() - run.sentAt;
      stats.rtf = stats.elapsedMs / 1000 / stats.audioSeconds;
      stats.xRealtime = 1 / stats.rtf;
      render();
    } else if (m.type === 'tts:end') {
      pushed = null;
      pushEnd(state);
    } else if (m.type === 'tts:error') {
      pushed = null;
      failed(run, new Error(m.message || 'the audio source failed'));
    }
  }

  async function pushEnd(state) {
    const run = state.run;
    stats.elapsedMs = performance.now() - run.sentAt;
    if (stats.audioSeconds > 0) {
      stats.rtf = stats.elapsedMs / 1000 / stats.audioSeconds;
      stats.xRealtime = 1 / stats.rtf;
    }
    node.port.postMessage({ type: 'end' });
    if (stats.state !== 'connecting') setState(stats.framesRendered > 0 ? 'finishing' : stats.state);
    const how = await run.outcome;
    keepResult(run, state.rate, stats.label);
    if (how !== 'finished') {
      if (current === run) setButtons({ stop: false, replay: !!last, download: !!last });
      return;
    }
    stats.completed.push({
      label: stats.label, ttfpMs: stats.ttfpMs, rtf: stats.rtf, frames: stats.framesReceived,
      framesRendered: stats.framesRendered, underruns: stats.underruns, requestId: stats.requestId,
    });
    setState('finished');
    setButtons({ stop: false, replay: true, download: true });
  }

  function onPush(m) {
    if (m.type === 'tts:start') { pushStart(m); return; }
    const state = pushed;
    if (!state || m.requestId !== state.requestId || state.run !== current || state.run.settled) return;
    if (state.ready) pushMessage(state, m);
    else state.backlog.push(m);
  }

  // ---- WAV download (wav.js builds the file from the received samples) ---------------------------

  function download() {
    if (!last) return;
    const url = URL.createObjectURL(window.mossWav.floatWavBlob(last.chunks, last.rate, 2));
    const a = document.createElement('a');
    a.href = url;
    a.download = `moss-tts-${last.requestId || 'audio'}.wav`;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 30000);
  }

  // ---- view --------------------------------------------------------------------------------------

  const STATE_TEXT = {
    idle: 'Ready', connecting: 'Connecting…', buffering: 'Buffering…', playing: 'Playing',
    finishing: 'Playing (stream complete)', finished: 'Done', stopped: 'Stopped', error: 'Error',
  };

  function setState(state) {
    stats.state = state;
    $('dot').className = `dot ${state}`;
    $('state').textContent = STATE_TEXT[state] || state;
    const n = stats.items > 1 ? ` (${stats.item + 1}/${stats.items})` : '';
    $('label').textContent = stats.label ? `${stats.label}${n}` : '';
    render();
    notifyParent({ type: 'moss-player:state', state });
  }

  function setButtons(on) {
    for (const [id, enabled] of Object.entries(on)) $(id).disabled = !enabled;
  }

  function setMessage(text, kind) {
    $('message').textContent = text || '';
    $('message').style.color = kind === 'info' ? 'inherit' : '';
  }

  function show(id, text, cls) {
    const el = $(id);
    el.textContent = text;
    el.className = `value ${cls || ''}`;
  }

  let renderQueued = false;
  function render() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(() => {
      renderQueued = false;
      const s = stats;
      show('m-ttfp', s.ttfpMs == null ? '–' : `${Math.round(s.ttfpMs)} ms`);
      show('m-rtf', s.rtf == null ? '–' : s.rtf.toFixed(2), s.rtf == null ? '' : s.rtf < 0.8 ? 'good' : s.rtf < 1 ? 'warn' : 'bad');
      show('m-audio', s.audioSeconds ? `${s.audioSeconds.toFixed(1)} s` : '–');
      show('m-speed', s.xRealtime == null ? '–' : `${s.xRealtime.toFixed(1)}×`);
      show('m-underruns', s.underruns == null ? '–' : String(s.underruns), s.underruns ? 'bad' : 'good');
      const ms = s.bufferedMs || 0;
      $('buf-fill').style.width = `${Math.min(100, (ms / 3000) * 100)}%`;
      $('buf-text').textContent = `${Math.round(ms)} ms`;
      const parts = [];
      if (s.sampleRate) parts.push(`output ${s.sampleRate / 1000} kHz × ${s.outputChannels || 2} ch`);
      if (s.resampling) parts.push(`resampled from ${s.streamSampleRate / 1000} kHz`);
      if (s.requestId) parts.push(`request ${s.requestId}`);
      if (s.networkReads) parts.push(`${s.networkReads} network reads`);
      $('details').textContent = parts.join(' · ');
    });
  }

  function notifyParent(message) {
    if (window.parent !== window) window.parent.postMessage(message, location.origin);
  }

  // ---- wiring ------------------------------------------------------------------------------------

  window.addEventListener('message', (e) => {
    if (e.origin !== location.origin || !e.data) return;
    if (e.data.type === 'moss-tts:play') play(e.data.payload, e.data.clickedAt);
    else if (e.data.type === 'moss-tts:stop') stop();
    else if (typeof e.data.type === 'string' && e.data.type.startsWith('tts:')) onPush(e.data);
  });
  $('stop').onclick = stop;
  $('replay').onclick = replay;
  $('download').onclick = download;

  if ('ResizeObserver' in window && window.parent !== window) {   // let the page size the iframe to fit
    const main = $('player');
    new ResizeObserver(() => notifyParent({ type: 'moss-player:height', height: main.offsetHeight + 4 }))
      .observe(main);
  }

  initAudio().catch((err) => setMessage(err.message));   // pre-warm: context + worklet before the first click
  window.mossPlayer = { unlock, play, stop, replay, download, stats, setMessage, errorMessage };
  if (!EMBEDDED) $('standalone').hidden = false;   // standalone.js drives the form
  document.body.classList.toggle('embedded', EMBEDDED);
  render();
})();
