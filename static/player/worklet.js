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
// Messages out, each {type, id, ...}: 'first-audio' (frame + context time of the first audible
// sample), and {type, id, stats} for 'stats' (~every 50 ms while active), 'finished' and 'stopped'.
//
// Playback starts once `prebufferMs` of audio is buffered (or the stream has ended); with an
// estimate of the total length, once the rest can play through at the rate audio is arriving
// (buffering.js plans it, here on the audio clock, so tests drive it quantum by quantum). A shortfall
// before 'end' is an underrun: the last samples before the gap fade out, silence is counted, and
// playback resumes with a fade-in after a rebuffer (planned the same way, or growing without an
// estimate). Fades happen only there, at stop and over the stream's last 2 ms, so every normal chunk
// join is bit-exact. If the context does not run at inputRate, the input is resampled here
// (Catmull-Rom cubic, streaming).
//
// The audio thread allocates nothing per quantum or per chunk: the ring (processorOptions.ringSeconds),
// the resampler's window, the arrival history, the plan and the outgoing messages are made once and
// updated in place. The producer (stream-player.js) posts no more than the ring has room for, read
// from the 'stats' counters; a frame that would not fit is dropped and counted (`overflowFrames`),
// never grown into. What the output sounds like is measured outside, by a tap on the node.

import { planStart, recentRate, RECENT_WINDOW_S } from './buffering.js';
import { GainGlide } from './gainglide.js';

const FADE_FRAMES = 96;        // 2 ms at 48 kHz: short enough to be inaudible, long enough to kill the click
const STOP_FADE_MS = 12;
const STATS_EVERY_S = 0.05;
const MAX_REBUFFER_MS = 1000;
const RING_SECONDS = 20;       // stream-player.js passes its own
const FULL_SHARE = 0.9;        // a ring this full plays, whatever the plan wanted: nothing more fits
const HISTORY = 256;           // arrivals kept for recentRate (a circular buffer)
const UNDERRUNS_KEPT = 20;
const WINDOW = 16;             // input frames the resampler keeps (a power of two)
const MASK = WINDOW - 1;

function cubic(xm1, x0, x1, x2, t) {
  return x0 + 0.5 * t * (x1 - xm1 + t * (2 * xm1 - 5 * x0 + 4 * x1 - x2 + t * (3 * (x0 - x1) + x2 - xm1)));
}

/** inputRate -> the context's rate, frame by frame into `sink.writeFrame(l, r)`; the same outputs
 *  however the input is cut. */
class StreamResampler {
  constructor() {
    this.L = new Float32Array(WINDOW);
    this.R = new Float32Array(WINDOW);
    this.reset(1);
  }

  reset(ratio) {               // ratio = input frames per output frame
    this.ratio = ratio;
    this.n = 0;                 // input frames seen; frame k sits at k & MASK
    this.idx = 0;               // the next output frame's position: idx + frac input frames
    this.frac = 0;
  }

  push(data, sink) {
    for (let k = 0; k + 1 < data.length; k += 2) {
      const j = this.n & MASK;
      this.L[j] = data[k]; this.R[j] = data[k + 1];
      this.n += 1;
      this.drain(sink, this.n - 3);   // a position needs its frame and the two after it
    }
  }

  /** The stream ended: the last frame repeats past the end, and every position before it is made. */
  flush(sink) {
    if (this.n === 0) return;
    const last = (this.n - 1) & MASK;
    for (let pad = 0; pad < 2; pad++) {
      this.L[(this.n + pad) & MASK] = this.L[last]; this.R[(this.n + pad) & MASK] = this.R[last];
    }
    this.drain(sink, this.n - 1);
  }

  drain(sink, lastIdx) {
    const L = this.L, R = this.R;
    while (this.idx <= lastIdx) {
      const i = this.idx, t = this.frac, m = (i > 0 ? i - 1 : 0) & MASK;
      const a = i & MASK, b = (i + 1) & MASK, c = (i + 2) & MASK;
      sink.writeFrame(cubic(L[m], L[a], L[b], L[c], t), cubic(R[m], R[a], R[b], R[c], t));
      this.frac += this.ratio;
      const whole = Math.floor(this.frac);
      this.idx += whole; this.frac -= whole;
    }
  }
}

class PcmPlayer extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const seconds = (options && options.processorOptions && options.processorOptions.ringSeconds) || RING_SECONDS;
    this.capacity = Math.ceil(sampleRate * seconds);
    this.L = new Float32Array(this.capacity);
    this.R = new Float32Array(this.capacity);
    this.resampler = new StreamResampler();
    this.glide = new GainGlide(sampleRate);
    this.histT = new Float64Array(HISTORY);   // [time, seconds received by then] per arrival
    this.histS = new Float64Array(HISTORY);
    this.history = { t: this.histT, s: this.histS, start: 0, count: 0, size: HISTORY };
    this.arrival = { started: 0, first: null, last: null, count: 0, firstS: 0, largestS: 0 };
    this.plan = { start: false, targetS: null, waitS: null, rate: null };
    this.planInput = {
      now: 0, startedAt: 0, firstArrival: null, lastArrival: null, arrivals: 0, firstChunkS: 0, receivedS: 0,
      bufferedS: 0, estimatedS: null, largestChunkS: 0, ended: false, rebuffering: false, shortStartS: 0.2,
      recentRate: null,
    };
    this.s = {   // the counters, sent as they are in every stats message
      framesReceived: 0, framesQueued: 0, framesRendered: 0, underruns: 0, underrunFrames: 0,
      underrunsAt: new Float64Array(UNDERRUNS_KEPT), startBufferedFrames: null, overflowFrames: 0,
      outChannels: 0, state: 'idle', buffered: 0, capacity: this.capacity, contextRate: sampleRate,
      inputRate: sampleRate, resampling: false, estimatedS: null, plan: null, gainDb: null, currentTime: 0,
    };
    this.message = { type: 'stats', id: null, stats: this.s };
    this.firstMessage = { type: 'first-audio', id: null, frame: 0, time: 0 };
    this.id = null;
    this.reset(sampleRate, 200);
    this.state = 'idle';
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  reset(inputRate, prebufferMs, estimatedS = null) {
    this.readIdx = 0; this.writeIdx = 0; this.avail = 0;
    this.shortStartS = prebufferMs / 1000;
    this.estimatedS = estimatedS > 0 ? estimatedS : null;
    const a = this.arrival;
    a.started = currentTime; a.first = null; a.last = null; a.count = 0; a.firstS = 0; a.largestS = 0;
    this.history.start = 0; this.history.count = 0;
    this.planned = false;
    this.inputRate = inputRate;
    this.resampling = inputRate !== sampleRate;
    this.resampler.reset(inputRate / sampleRate);
    this.prebufferFrames = Math.round(prebufferMs * sampleRate / 1000);
    this.rebufferFrames = this.prebufferFrames;
    this.ended = false; this.firstAudio = false; this.fadeIn = 0;
    this.stopLeft = 0;
    this.gained = false;   // only a stream sent 'gain' is scaled: every other plays bit for bit
    this.glide.reset();
    const s = this.s;
    s.framesReceived = 0; s.framesQueued = 0; s.framesRendered = 0; s.underruns = 0; s.underrunFrames = 0;
    s.startBufferedFrames = null; s.overflowFrames = 0;
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
      this.gained = true;
      this.glide.set(m.gain);
    } else if (m.type === 'pcm') {
      if (this.state === 'idle' || this.state === 'stopping') return;
      this.arrived(m.data.length >> 1);
      this.s.framesReceived += m.data.length >> 1;
      if (this.resampling) this.resampler.push(m.data, this);
      else this.writeInterleaved(m.data);
    } else if (m.type === 'end') {
      if (this.resampling) this.resampler.flush(this);
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
    const newest = (h.start + h.count - 1) % h.size;
    if (h.count && h.t[newest] === currentTime) {
      h.s[newest] = received;
    } else {
      const at = (h.start + h.count) % h.size;
      if (h.count === h.size) h.start = (h.start + 1) % h.size; else h.count += 1;
      h.t[at] = currentTime; h.s[at] = received;
    }
    while (h.count > 2 && currentTime - h.t[(h.start + 1) % h.size] > 2 * RECENT_WINDOW_S) {
      h.start = (h.start + 1) % h.size; h.count -= 1;
    }
    a.largestS = Math.max(a.largestS, currentTime === a.first ? a.firstS : seconds);
  }

  // Whether a stream waiting in 'prebuffering' or 'starved' may play now.
  ready() {
    const starved = this.state === 'starved';
    if (this.avail >= FULL_SHARE * this.capacity) return true;
    if (this.estimatedS === null) {   // nothing to plan with: a fixed prebuffer, growing per underrun
      this.planned = false;
      const target = starved ? this.rebufferFrames : this.prebufferFrames;
      return (this.avail > 0 && this.avail >= target) || (this.ended && this.avail > 0);
    }
    const a = this.arrival, p = this.planInput;
    p.now = currentTime; p.startedAt = a.started; p.firstArrival = a.first; p.lastArrival = a.last;
    p.arrivals = a.count; p.firstChunkS = a.firstS; p.receivedS = this.s.framesReceived / this.inputRate;
    p.bufferedS = this.avail / sampleRate; p.estimatedS = this.estimatedS; p.largestChunkS = a.largestS;
    p.ended = this.ended; p.rebuffering = starved; p.shortStartS = this.shortStartS;
    p.recentRate = starved ? recentRate(this.history, currentTime) : null;
    planStart(p, this.plan);
    this.planned = true;
    return this.plan.start;
  }

  writeFrame(l, r) {   // one frame into the ring (the resampler's sink)
    if (this.avail >= this.capacity) { this.s.overflowFrames += 1; return; }
    this.L[this.writeIdx] = l; this.R[this.writeIdx] = r;
    if (++this.writeIdx === this.capacity) this.writeIdx = 0;
    this.avail += 1; this.s.framesQueued += 1;
  }

  writeInterleaved(d) {
    const n = Math.min(d.length >> 1, this.capacity - this.avail);
    this.s.overflowFrames += (d.length >> 1) - n;
    let w = this.writeIdx;
    for (let i = 0; i < n; i++) {
      this.L[w] = d[2 * i]; this.R[w] = d[2 * i + 1];
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

  // Copy k buffered frames into the outputs starting at `offset`; advances the ring.
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
      if (this.gained) this.glide.apply(oL, oR, k);
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
      const m = this.firstMessage;
      m.id = this.id; m.frame = currentFrame; m.time = currentTime;
      this.port.postMessage(m);
    }
    const k = Math.min(n, this.avail);
    this.readInto(oL, oR, 0, k);
    if (this.gained) this.glide.apply(oL, oR, k);
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
    this.s.framesRendered += k;
    if (k < n) {
      if (this.ended) {
        this.finish();
      } else {
        const s = this.s;
        this.state = 'starved';
        if (s.underruns < UNDERRUNS_KEPT) s.underrunsAt[s.underruns] = s.framesRendered;
        s.underruns += 1;
        s.underrunFrames += n - k;
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

  finish() {
    this.state = 'idle';
    this.post('finished');
  }

  post(type) {
    const s = this.s, m = this.message;
    s.state = this.state; s.buffered = this.avail; s.currentTime = currentTime;
    s.inputRate = this.inputRate; s.resampling = this.resampling; s.estimatedS = this.estimatedS;
    s.plan = this.planned ? this.plan : null;
    s.gainDb = this.gained ? this.glide.gainDb : null;
    m.type = type; m.id = this.id;
    this.port.postMessage(m);   // copied as it is sent: the objects are reused
  }

  maybeStats() {
    if (currentTime - this.lastStats >= STATS_EVERY_S) {
      this.lastStats = currentTime;
      this.post('stats');
    }
  }
}

registerProcessor('pcm-player', PcmPlayer);
