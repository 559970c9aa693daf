// StreamPlayer: plays a source (source.js: the stream route, pushed audio, memory, or any async
// iterable of the same messages) through the 'pcm-player' AudioWorklet (worklet.js), one at a time,
// gaplessly, 48 kHz stereo. docs/PLAYER.md ("Embedding the player") shows it on a page of its own.
//
//   import { StreamPlayer, StreamSource } from '/player/player/stream-player.js';
//   const player = new StreamPlayer();
//   button.onclick = async () => {
//     player.unlock();                                            // inside the click: audio may start
//     const outcome = await player.play(new StreamSource('/api/tts/stream', { text: 'Hello.' }));
//   };                                                            // 'finished' | 'stopped' | 'error'
//
// Events (CustomEvent, `detail` as given): 'state' (idle, connecting, buffering, playing, finishing,
// finished, stopped, error), 'start' (the source's start message), 'pcm' ({data, rate}: interleaved
// stereo about to be played; a listener may copy it, not keep it), 'speechevent' (a caption or
// speech.done, docs/PROTOCOL.md §2.4), 'firstsound' ({ms}: from `t0` to the first audible sample),
// 'underrun' ({count}), 'stats' (the figures, `player.stats`), 'arrived' (all audio is here: the
// last moment to set a gain before the tail plays), 'end' ({outcome, error, run}). It imports nothing of
// the studio's features.

import { AudioOut } from './audio.js';
import { upmix } from './framing.js';
import { clearRunStats, copyWorkletStats, createStats, updateRates, watchContext } from './stats.js';
import { describe } from './transport.js';

const MAX_ARRIVALS = 400;
const RING_SECONDS = 20;   // the worklet's ring; audio further ahead waits here (a fast generator)

/** Until the browser lets audio start: resume on the visitor's next click or key anywhere. */
function nextGesture(resume) {
  return new Promise((resolve) => {
    const go = () => { resume().then(resolve, resolve); };
    document.addEventListener('pointerdown', go, { once: true });
    document.addEventListener('keydown', go, { once: true });
  });
}

export class StreamPlayer extends EventTarget {
  /**
   * @param {object} [options]
   * @param {number} [options.rate]  the AudioContext rate to ask for (the worklet resamples if refused)
   * @param {number} [options.prebufferMs]  the short start when generation is fast (buffering.js)
   * @param {object} [options.stats]  an object to keep the figures on (default: a new one)
   * @param {number} [options.ringSeconds]  how far ahead of playback the worklet may hold audio
   * @param {(resume: () => Promise<void>) => Promise<void>} [options.askForClick]  called when the
   *   browser holds audio back until a gesture: resolve once `resume()` ran inside one
   */
  constructor({ rate = 48000, prebufferMs = 200, stats = null, askForClick = nextGesture,
    ringSeconds = RING_SECONDS } = {}) {
    super();
    this.audio = new AudioOut(rate, (m) => this.onWorklet(m), ringSeconds);
    this.ringSeconds = ringSeconds;
    this.prebufferMs = prebufferMs;
    this.askForClick = askForClick;
    this.stats = Object.assign(stats || {}, createStats(rate));
    this.run = null;
    this.runs = 0;
    this.ready = this.audio.init().then(() => watchContext(this.stats, this.audio.ctx));
    this.ready.catch(() => {});   // play() reports it
  }

  /** The AudioContext, and the worklet's node (its output goes to the speakers; taps may listen). */
  get context() { return this.audio.ctx; }
  get output() { return this.audio.node; }

  /** Whether a run is under way (requested, buffering or playing). */
  get playing() { return !!this.run && !this.run.settled; }

  /** Seconds of the current run heard so far. */
  get heardS() {
    if (!this.audio.ctx) return 0;
    return Math.max(0, this.stats.framesRendered / this.audio.ctx.sampleRate - this.audio.latencyS);
  }

  /** Call inside a user gesture (a click here or in a parent page): lets the context start. */
  unlock() { this.audio.unlock(); }

  /**
   * Play `source` to its end; stops what was playing first.
   * @param {AsyncIterable<object>} source  source.js's messages (optionally with `abort()`)
   * @param {{t0?: number, prebufferMs?: number}} [options]  t0: performance.now() the first sound is
   *   timed from (the click); prebufferMs: this run's short start (0 for audio already here)
   * @returns {Promise<'finished'|'stopped'|'error'>}
   */
  async play(source, { t0 = performance.now(), prebufferMs = this.prebufferMs } = {}) {
    this.cancel();
    const run = { id: ++this.runs, t0, source, settled: null, underruns: 0, rate: 48000,
      queue: [], queued: 0, posted: 0, taken: 0, buffered: 0, ending: false };
    run.outcome = new Promise((resolve) => {
      run.settle = (how) => { if (!run.settled) { run.settled = how; resolve(how); } };
    });
    this.run = run;
    clearRunStats(this.stats, run.id);
    this.stats.runs = this.runs;
    this.setState('connecting');
    const it = source[Symbol.asyncIterator]();
    let rate = 48000, channels = 2;
    try {
      run.sentAt = performance.now();
      const first = it.next();   // a fetch goes out now, while the context starts
      first.catch(() => {});
      await this.audio.resume(this.askForClick);
      for (let step = await first; !step.done && !run.settled; step = await it.next()) {
        const m = step.value;
        if (m.type === 'start') {
          ({ rate, channels } = m);
          run.rate = rate;
          this.started(run, m, prebufferMs);
        } else if (m.type === 'read') {
          this.stats.networkReads += 1;
          this.stats.streamBytes += m.bytes;
        } else if (m.type === 'pcm') {
          this.stats.bytesReceived += m.data.byteLength;
          this.push(run, channels === 2 ? m.data : upmix(m.data), rate);
        } else if (m.type === 'event') {
          this.emit('speechevent', m.event);
        } else if (m.type === 'end') {
          this.stats.trailingBytes = m.trailingBytes;
        }
      }
    } catch (err) {
      return this.failed(run, err);
    } finally {
      if (run.settled && it.return) it.return().catch(() => {});   // stopped mid-way: release the source
    }
    if (run.settled) return this.ended(run);
    this.stats.elapsedMs = performance.now() - run.sentAt;
    updateRates(this.stats);
    this.emit('arrived', null);
    run.ending = true;
    this.feed(run);   // 'end' follows the last of the audio held back
    if (this.stats.state !== 'connecting') this.setState(this.stats.framesRendered > 0 ? 'finishing' : this.stats.state);
    if (await run.outcome === 'finished' && this.run === run) this.setState('finished');
    return this.ended(run);
  }

  /** Stop what plays (fading out) and cancel its source; true if something was playing. */
  stop() {
    if (!this.cancel()) return false;
    this.setState('stopped');
    return true;
  }

  /** Glide the current run's gain to `gain` (linear) as it plays (gainglide.js). */
  setGain(gain) { this.audio.post({ type: 'gain', gain }); }

  // ---- inside -------------------------------------------------------------------------------------

  cancel() {
    const run = this.run;
    if (!run || run.settled) return false;
    if (run.source.abort) run.source.abort();   // a fetch: the server sees the disconnect and cancels
    this.audio.post({ type: 'stop' });            // the worklet fades out, then posts 'stopped'
    run.settle('stopped');
    return true;
  }

  started(run, m, prebufferMs) {
    const s = this.stats;
    s.ttfbMs = performance.now() - run.t0;
    Object.assign(s, { streamSampleRate: m.rate, streamChannels: m.channels, streamFormat: m.format ?? null,
      requestId: m.requestId ?? null, estimatedS: m.estimatedS ?? null, transport: m.transport ?? null,
      wire: describe(m.transport, m.bitRate) });
    this.audio.post({ type: 'start', id: run.id, inputRate: m.rate, prebufferMs, estimatedS: m.estimatedS ?? null });
    this.emit('start', m);
    this.setState('buffering');
  }

  push(run, stereo, rate) {
    const s = this.stats, frames = stereo.length >> 1;
    s.framesReceived += frames;
    s.audioSeconds = s.framesReceived / rate;
    if (s.arrivals.length < MAX_ARRIVALS) {   // [ms since the request, frames so far]: diagnosing underruns
      s.arrivals.push([Math.round(performance.now() - run.sentAt), s.framesReceived]);
    }
    s.elapsedMs = performance.now() - run.sentAt;
    updateRates(s);
    this.emit('pcm', { data: stereo, rate });   // before it goes: a listener may set a gain for it
    const most = Math.max(1, Math.floor(this.ringFrames(run) / 2));
    for (let at = 0; at < frames; at += most) {   // a long replay in pieces the ring can take
      const piece = frames <= most ? stereo : stereo.slice(2 * at, 2 * Math.min(frames, at + most));
      run.queue.push(piece);
      run.queued += piece.length >> 1;
    }
    this.feed(run);
  }

  /** Input frames the worklet's ring holds. */
  ringFrames(run) { return Math.floor(0.98 * this.ringSeconds * run.rate); }

  /** Post what the ring has room for, by the worklet's last counters (audio only leaves the ring
   *  between two of them, so the room is never overestimated); then 'end', once all is posted. */
  feed(run) {
    if (run !== this.run || run.settled) return;
    const ctxRate = this.audio.ctx.sampleRate, room = this.ringFrames(run);
    while (run.queue.length) {
      const piece = run.queue[0], frames = piece.length >> 1;
      const used = (run.posted - run.taken) + run.buffered * (run.rate / ctxRate);
      if (used + frames > room) break;
      run.queue.shift();
      run.queued -= frames;
      run.posted += frames;
      this.audio.post({ type: 'pcm', data: piece }, [piece.buffer]);
      this.stats.chunksPosted += 1;
    }
    this.stats.heldBackFrames = Math.max(this.stats.heldBackFrames, run.queued);
    if (run.ending && !run.queue.length) {
      run.ending = false;
      this.audio.post({ type: 'end' });
    }
  }

  failed(run, err) {
    if ((err && err.name === 'AbortError') || run.settled) {   // stopped (or replaced by another run)
      run.settle('stopped');
      return this.ended(run);
    }
    run.settle('error');
    if (this.run === run) {
      this.audio.post({ type: 'stop' });
      this.stats.error = err.message || String(err);
      this.setState('error');
    }
    return this.ended(run, err);
  }

  ended(run, error = null) {
    this.emit('end', { outcome: run.settled, error, run: run.id });
    return run.settled;
  }

  onWorklet(m) {
    const run = this.run;
    if (!run || m.id !== run.id) return;
    const s = this.stats;
    if (m.type === 'first-audio') {
      // The first sample was rendered at context time m.time; it is heard one output latency later,
      // back-dated on the audio clock, which a busy machine can make run ahead of the page's clock:
      // a sample is never heard before the response's first byte arrived.
      const now = performance.now();
      const sinceRenderMs = Math.max(0, (this.audio.ctx.currentTime - m.time) * 1000);
      s.ttfpMs = Math.max(now - sinceRenderMs + this.audio.latencyS * 1000 - run.t0, s.ttfbMs ?? 0);
      s.ttfpMsgMs = now - run.t0;
      s.firstAudioFrame = m.frame;
      if (s.state === 'buffering') this.setState('playing');
      this.emit('firstsound', { ms: s.ttfpMs });
      return;
    }
    if (m.stats) this.workletStats(run, m.stats);
    if (m.type === 'finished') run.settle('finished');
    else if (m.type === 'stopped') run.settle('stopped');
  }

  workletStats(run, w) {
    const s = this.stats;
    copyWorkletStats(s, w);
    run.taken = w.framesReceived;
    run.buffered = w.buffered;
    this.feed(run);
    s.outputLatency = this.audio.ctx.outputLatency ?? null;
    const waiting = w.state === 'prebuffering' || w.state === 'starved';
    s.waitS = waiting && w.plan ? w.plan.waitS : null;
    if (!run.settled) {
      if (waiting && s.framesReceived > 0 && ['playing', 'finishing'].includes(s.state)) this.setState('buffering');
      else if (w.state === 'playing' && s.state === 'buffering') this.setState('playing');
    }
    if (w.underruns > run.underruns) {
      run.underruns = w.underruns;
      this.emit('underrun', { count: w.underruns });
    }
    this.emit('stats', s);
  }

  setState(state) {
    const s = this.stats;
    s.state = state;
    if (s.statesSeen && s.statesSeen[s.statesSeen.length - 1] !== state) s.statesSeen.push(state);
    this.emit('state', state);
  }

  emit(type, detail) { this.dispatchEvent(new CustomEvent(type, { detail })); }
}

export { memorySource, PushSource, StreamSource } from './source.js';
