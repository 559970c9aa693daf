// AudioWorkletProcessor 'pcm-player': plays streamed stereo float32 PCM gaplessly.
//
// Messages in (port):
//   {type:'start', id, inputRate, prebufferMs, estimatedS}  new stream: clear the ring and counters
//                                           (id is echoed); estimatedS: the likely total length, if known
//   {type:'estimate', seconds}              the estimate, when it comes after 'start'
//   {type:'gain', gain}                     scale this stream as it plays, gliding to `gain` (an
//                                           audition card's live loudness matching: gainglide.js)
//   {type:'pcm', data: Float32Array}        interleaved stereo frames at inputRate (transferred)
//   {type:'end'}                            no more data: play out what is buffered, then 'finished'
//   {type:'stop'}                           fade out over STOP_FADE_MS, clear, then 'stopped'
// Messages out: 'first-audio' (frame + context time of the first audible sample), 'stats' (~every
// 50 ms while active), 'finished' and 'stopped' (both carry final stats).
//
// Playback starts once `prebufferMs` of audio is buffered (or the stream has ended); with an
// estimate of the total length, once the rest can play through at the rate audio is arriving
// (buffering.js plans it, here on the audio clock, so tests drive it quantum by quantum). A shortfall
// before 'end' is an underrun: the last samples before the gap fade out, silence is counted, and
// playback resumes with a fade-in after a rebuffer (planned the same way, or growing without an
// estimate). Fades happen only there, at stop and over
// the stream's last 2 ms, so every normal chunk join is bit-exact. If the context does not run at
// inputRate, the input is resampled here (Catmull-Rom cubic, streaming).

import { planStart, recentRate, RECENT_WINDOW_S } from './buffering.js';
import { GainGlide } from './gainglide.js';

const FADE_FRAMES = 96;        // 2 ms at 48 kHz: short enough to be inaudible, long enough to kill the click
const STOP_FADE_MS = 12;
const STATS_EVERY_S = 0.05;
const MAX_REBUFFER_MS = 1000;

class StreamResampler {
  constructor(ratio) {          // ratio = input frames per output frame
    this.ratio = ratio;
    this.pos = 0;               // position of the next output frame, in input frames, relative to hist[0]
    this.histL = new Float32Array(0);
    this.histR = new Float32Array(0);
    this.started = false;
  }

  // interleaved stereo in -> {L, R} at the output rate. `flush` pads the tail so every input frame is used.
  push(data, flush) {
    const n = data.length >> 1;
    const h = this.histL.length;
    const L = new Float32Array(h + n + (flush ? 2 : 0));
    const R = new Float32Array(L.length);
    L.set(this.histL); R.set(this.histR);
    for (let i = 0; i < n; i++) { L[h + i] = data[2 * i]; R[h + i] = data[2 * i + 1]; }
    if (flush && h + n > 0) {    // repeat the last frame so the final positions can be interpolated
      L[h + n] = L[h + n + 1] = L[h + n - 1];
      R[h + n] = R[h + n + 1] = R[h + n - 1];
    }
    if (!this.started && L.length > 0) { this.pos = 0; this.started = true; }
    const end = flush ? h + n : L.length - 2;   // need samples up to i+2
    const outL = [], outR = [];
    while (this.pos < end) {
      const i = Math.floor(this.pos), t = this.pos - i;
      outL.push(cubic(L, i, t)); outR.push(cubic(R, i, t));
      this.pos += this.ratio;
    }
    const keep = Math.max(0, Math.floor(this.pos) - 1);  // keep x[i-1] for the next call
    this.histL = L.slice(keep, flush ? keep : L.length);
    this.histR = R.slice(keep, flush ? keep : R.length);
    this.pos -= keep;
    return { L: Float32Array.from(outL), R: Float32Array.from(outR) };
  }
}

function cubic(x, i, t) {
  const xm1 = x[i > 0 ? i - 1 : 0], x0 = x[i], x1 = x[i + 1] ?? x0, x2 = x[i + 2] ?? x1;
  return x0 + 0.5 * t * (x1 - xm1 + t * (2 * xm1 - 5 * x0 + 4 * x1 - x2 + t * (3 * (x0 - x1) + x2 - xm1)));
}

class PcmPlayer extends AudioWorkletProcessor {
  constructor() {
    super();
    this.capacity = sampleRate * 20;           // grows when a fast producer gets far ahead
    this.L = new Float32Array(this.capacity);
    this.R = new Float32Array(this.capacity);
    this.reset(sampleRate, 200);
    this.state = 'idle';
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  reset(inputRate, prebufferMs, estimatedS = null) {
    this.readIdx = 0; this.writeIdx = 0; this.avail = 0;
    this.shortStartS = prebufferMs / 1000;
    this.estimatedS = estimatedS > 0 ? estimatedS : null;
    this.arrival = { started: currentTime, first: null, last: null, count: 0, firstS: 0, largestS: 0 };
    this.history = [];   // [time, seconds received] per arrival, the last few seconds (recentRate)
    this.plan = null;
    this.inputRate = inputRate;
    this.resampler = inputRate === sampleRate ? null : new StreamResampler(inputRate / sampleRate);
    this.prebufferFrames = Math.round(prebufferMs * sampleRate / 1000);
    this.rebufferFrames = this.prebufferFrames;
    this.ended = false; this.firstAudio = false; this.fadeIn = 0;
    this.stopLeft = 0;
    this.glide = null;   // only a stream sent 'gain' is scaled: every other plays bit for bit
    this.s = {
      framesReceived: 0, framesQueued: 0, framesRendered: 0, underruns: 0, underrunFrames: 0,
      sumSqL: 0, sumSqR: 0, sumSqDiff: 0, peak: 0, maxStep: 0, outChannels: 0,
      underrunsAt: [],   // framesRendered when each underrun began (first 20)
      startBufferedFrames: null,   // frames buffered when playback first began
    };
    this.prevL = null; this.prevR = null;
    this.lastStats = -1;
  }

  onMessage(m) {
    if (m.type === 'start') {
      this.id = m.id;
      this.reset(m.inputRate || sampleRate, m.prebufferMs ?? 200, m.estimatedS ?? null);
      this.state = 'prebuffering';
    } else if (m.type === 'estimate') {
      this.estimatedS = m.seconds > 0 ? m.seconds : null;
    } else if (m.type === 'gain') {
      if (!this.glide) this.glide = new GainGlide(sampleRate);
      this.glide.set(m.gain);
    } else if (m.type === 'pcm') {
      if (this.state === 'idle' || this.state === 'stopping') return;
      this.arrived(m.data.length >> 1);
      this.s.framesReceived += m.data.length >> 1;
      if (this.resampler) { const r = this.resampler.push(m.data, false); this.write(r.L, r.R); }
      else this.writeInterleaved(m.data);
    } else if (m.type === 'end') {
      if (this.resampler) { const r = this.resampler.push(new Float32Array(0), true); this.write(r.L, r.R); }
      this.ended = true;
      this.fadeOutTail();   // the stream stops here: its last samples go to silence without a click
    } else if (m.type === 'stop') {
      if (this.state !== 'playing') {   // nothing audible yet (or a gap): stop at once
        this.state = 'idle'; this.avail = 0; this.readIdx = this.writeIdx = 0;
        this.post('stopped');
        return;
      }
      this.state = 'stopping';
      this.stopTotal = this.stopLeft = Math.round(STOP_FADE_MS * sampleRate / 1000);
    }
  }

  arrived(frames) {
    const a = this.arrival, seconds = frames / this.inputRate;
    if (a.first === null) { a.first = currentTime; a.count = 1; }
    if (currentTime === a.first) a.firstS += seconds;   // chunks read at once count as one first lump
    else a.count += 1;
    a.last = currentTime;
    const received = (this.s.framesReceived + frames) / this.inputRate, h = this.history;
    if (h.length && h[h.length - 1][0] === currentTime) h[h.length - 1][1] = received;
    else h.push([currentTime, received]);
    while (h.length > 2 && currentTime - h[1][0] > 2 * RECENT_WINDOW_S) h.shift();
    a.largestS = Math.max(a.largestS, currentTime === a.first ? a.firstS : seconds);
  }

  // Whether a stream waiting in 'prebuffering' or 'starved' may play now.
  ready() {
    const starved = this.state === 'starved';
    if (this.estimatedS === null) {   // nothing to plan with: a fixed prebuffer, growing per underrun
      this.plan = null;
      const target = starved ? this.rebufferFrames : this.prebufferFrames;
      return (this.avail > 0 && this.avail >= target) || (this.ended && this.avail > 0);
    }
    const a = this.arrival;
    this.plan = planStart({
      now: currentTime, startedAt: a.started, firstArrival: a.first, lastArrival: a.last, arrivals: a.count, firstChunkS: a.firstS,
      receivedS: this.s.framesReceived / this.inputRate, bufferedS: this.avail / sampleRate,
      estimatedS: this.estimatedS, largestChunkS: a.largestS, ended: this.ended, rebuffering: starved,
      shortStartS: this.shortStartS,
      recentRate: starved ? recentRate(this.history, currentTime) : null,
    });
    return this.plan.start;
  }

  ensure(n) {
    if (this.avail + n <= this.capacity) return;
    let cap = this.capacity;
    while (this.avail + n > cap) cap *= 2;
    const L = new Float32Array(cap), R = new Float32Array(cap);
    for (let i = 0; i < this.avail; i++) {
      const j = (this.readIdx + i) % this.capacity;
      L[i] = this.L[j]; R[i] = this.R[j];
    }
    this.L = L; this.R = R; this.capacity = cap; this.readIdx = 0; this.writeIdx = this.avail;
  }

  writeInterleaved(d) {
    const n = d.length >> 1;
    this.ensure(n);
    let w = this.writeIdx;
    for (let i = 0; i < n; i++) {
      this.L[w] = d[2 * i]; this.R[w] = d[2 * i + 1];
      if (++w === this.capacity) w = 0;
    }
    this.writeIdx = w; this.avail += n; this.s.framesQueued += n;
  }

  write(l, r) {
    const n = l.length;
    this.ensure(n);
    let w = this.writeIdx;
    for (let i = 0; i < n; i++) {
      this.L[w] = l[i]; this.R[w] = r[i];
      if (++w === this.capacity) w = 0;
    }
    this.writeIdx = w; this.avail += n; this.s.framesQueued += n;
  }

  fadeOutTail() {
    const f = Math.min(this.avail, FADE_FRAMES);
    for (let i = 0; i < f; i++) {
      const j = (this.writeIdx - f + i + this.capacity) % this.capacity;
      const g = (f - i) / (f + 1);
      this.L[j] *= g; this.R[j] *= g;
    }
  }

  // Copy k buffered frames into the outputs starting at `offset`; returns nothing, advances the ring.
  readInto(oL, oR, offset, k) {
    let r = this.readIdx;
    for (let i = 0; i < k; i++) {
      oL[offset + i] = this.L[r]; oR[offset + i] = this.R[r];
      if (++r === this.capacity) r = 0;
    }
    this.readIdx = r; this.avail -= k;
  }

  process(_inputs, outputs) {
    const out = outputs[0];
    const oL = out[0], oR = out[1] || out[0];
    const n = oL.length;
    this.s.outChannels = out.length;
    if (this.state === 'idle') return true;

    if (this.state === 'stopping') {
      const k = Math.min(n, this.avail, this.stopLeft);
      this.readInto(oL, oR, 0, k);
      if (this.glide) this.glide.apply(oL, oR, k);
      for (let i = 0; i < k; i++) {
        const g = (this.stopLeft - i) / this.stopTotal;
        oL[i] *= g; oR[i] *= g;
      }
      this.stopLeft -= k;
      if (k < n || this.stopLeft <= 0) {
        for (let i = k; i < n; i++) { oL[i] = 0; oR[i] = 0; }
        this.state = 'idle'; this.avail = 0; this.readIdx = this.writeIdx = 0;
        this.post('stopped');
      }
      return true;
    }

    if (this.state === 'prebuffering' || this.state === 'starved') {
      if (this.ready()) {
        if (this.state === 'starved') this.fadeIn = FADE_FRAMES;
        if (this.s.startBufferedFrames === null) this.s.startBufferedFrames = this.avail;
        this.state = 'playing';
      } else if (this.ended) {
        this.finish();
        return true;
      } else {
        if (this.state === 'starved') this.s.underrunFrames += n;
        this.maybeStats();
        return true;
      }
    }

    // playing
    if (!this.firstAudio) {
      this.firstAudio = true;
      this.port.postMessage({ type: 'first-audio', id: this.id, frame: currentFrame, time: currentTime });
    }
    const k = Math.min(n, this.avail);
    this.readInto(oL, oR, 0, k);
    if (this.glide) this.glide.apply(oL, oR, k);
    if (k < n) { oL.fill(0, k); oR.fill(0, k); }
    if (this.fadeIn > 0) {
      for (let i = 0; i < k && this.fadeIn > 0; i++, this.fadeIn--) {
        const g = 1 - this.fadeIn / FADE_FRAMES;
        oL[i] *= g; oR[i] *= g;
      }
    }
    if (k < n && !this.ended) {
      // Out of data inside this quantum (an underrun): fade the tail so the gap does not click.
      const f = Math.min(k, FADE_FRAMES);
      for (let i = 0; i < f; i++) {
        const g = (f - i) / (f + 1);
        oL[k - f + i] *= g; oR[k - f + i] *= g;
      }
    }
    this.account(oL, oR, k);
    if (k < n) {
      if (this.ended) {
        this.finish();
      } else {
        this.state = 'starved';
        this.s.underruns += 1;
        if (this.s.underrunsAt.length < 20) this.s.underrunsAt.push(this.s.framesRendered);
        this.s.underrunFrames += n - k;
        // Wait for more before resuming (at least 50 ms, doubling per underrun): fewer, longer gaps
        // are less annoying than a stutter when the stream runs at about real time.
        const floor = Math.round(0.05 * sampleRate), ceiling = Math.round(MAX_REBUFFER_MS * sampleRate / 1000);
        this.rebufferFrames = Math.min(Math.max(this.rebufferFrames * 2, floor), ceiling);
      }
    } else if (this.avail === 0 && this.ended) {
      this.finish();
    }
    this.maybeStats();
    return true;
  }

  account(oL, oR, k) {
    const s = this.s;
    let pl = this.prevL, pr = this.prevR;
    for (let i = 0; i < k; i++) {
      const l = oL[i], r = oR[i];
      s.sumSqL += l * l; s.sumSqR += r * r; s.sumSqDiff += (l - r) * (l - r);
      const a = Math.max(Math.abs(l), Math.abs(r));
      if (a > s.peak) s.peak = a;
      if (pl !== null) {
        const step = Math.max(Math.abs(l - pl), Math.abs(r - pr));
        if (step > s.maxStep) s.maxStep = step;
      }
      pl = l; pr = r;
    }
    this.prevL = pl; this.prevR = pr;
    s.framesRendered += k;
  }

  finish() {
    this.state = 'idle';
    this.post('finished');
  }

  snapshot() {
    const s = this.s, n = Math.max(1, s.framesRendered);
    return {
      ...s,
      state: this.state,
      buffered: this.avail,
      bufferedMs: (this.avail / sampleRate) * 1000,
      rmsL: Math.sqrt(s.sumSqL / n), rmsR: Math.sqrt(s.sumSqR / n),
      rms: Math.sqrt((s.sumSqL + s.sumSqR) / (2 * n)), rmsDiff: Math.sqrt(s.sumSqDiff / n),
      contextRate: sampleRate, inputRate: this.inputRate, resampling: this.resampler !== null,
      prebufferFrames: this.prebufferFrames, rebufferFrames: this.rebufferFrames,
      estimatedS: this.estimatedS, plan: this.plan, gainDb: this.glide ? this.glide.gainDb : null,
      currentTime,
    };
  }

  post(type) {
    this.port.postMessage({ type, id: this.id, stats: this.snapshot() });
  }

  maybeStats() {
    if (currentTime - this.lastStats >= STATS_EVERY_S) {
      this.lastStats = currentTime;
      this.post('stats');
    }
  }
}

registerProcessor('pcm-player', PcmPlayer);
