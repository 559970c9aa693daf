// How fast is the link, and which transport should the next utterance use?
//
// Each utterance measures its delivery: bytes arriving per second, from the first network reads
// (up to MEASURE_AUDIO_S of audio; a long utterance is not measured to its end, when the
// generator's own pace, not the link, may set it), against the bytes its transport needs per
// audio second (transport.js). That ratio is how many audio seconds the link carries per second:
// float32 (384 kB/s, the engine's exact output) while it is at least HEADROOM, else 16-bit
// (192 kB/s, lossless for what downloads keep) if that fits, else Opus (about 20 kB/s).
// The choice is made between utterances, never during one, and remembered (module state and
// localStorage) for MAX_AGE_MS. A slow reading may be the generator's fault, not the link's: the
// server stamps each chunk with its own time (kind-2 frames), and only when the chunks reach the
// page later and later (the bytes queue on the way) did the link set the pace. Otherwise the
// reading is a lower bound, and no reason to step down. An Opus stream's bytes are few: its reading
// is a lower bound unless its lag grew, and lossless is tried again when that bound clears the
// headroom or the memory expires. The user may force either (`mode`).

import { BYTES_PER_AUDIO_S, LABELS } from './transport.js';

export const HEADROOM = 1.3;        // audio seconds per second the link must carry for lossless
export const MEASURE_AUDIO_S = 2.0;
export const MIN_SPAN_S = 0.05;     // reads closer together than this say nothing about a rate
export const MAX_AGE_MS = 10 * 60 * 1000;
export const LAG_GROWTH_MS = 60;     // the lag must grow by more than this ...
export const LAG_GROWTH_SHARE = 0.1; // ... and than this share of the time measured, to count
const KEY = 'moss-tts:link';

/** One utterance's delivery, from its network reads. */
export class LinkMeter {
  constructor(transport, bytesPerAudioS = BYTES_PER_AUDIO_S[transport]) {
    this.transport = transport;
    this.bytesPerAudioS = bytesPerAudioS;
    this.first = null;       // performance.now() of the first read
    this.last = null;
    this.bytes = 0;          // after the first read
    this.reads = 0;
    this.done = false;
    this.lags = [];          // [arrival ms, arrival - server time, ms] per chunk in the window
  }

  /** A chunk's server time (s since the request) and when it reached the page (ms). */
  progress(serverS, at) {
    if (!this.done) this.lags.push([at, at - 1000 * serverS]);
  }

  /**
   * Whether the link set the pace: the chunks reached the page later and later after the server
   * made them (the bytes queued on the way). null when the server sent no chunk times. A generator
   * slower than the link keeps the lag flat: the reading is then a lower bound of the link.
   */
  get linkLimited() {
    if (this.lags.length < 3) return null;
    const [t0, lag0] = this.lags[0], [t1, lag1] = this.lags[this.lags.length - 1];
    return lag1 - lag0 > Math.max(LAG_GROWTH_MS, LAG_GROWTH_SHARE * (t1 - t0));
  }

  /** One network read of `bytes` at `at` (ms). */
  read(bytes, at) {
    if (this.done) return;
    this.reads += 1;
    if (this.first === null) { this.first = at; this.last = at; return; }
    this.bytes += bytes;
    this.last = at;
    if (this.bytes >= MEASURE_AUDIO_S * this.bytesPerAudioS) this.done = true;
  }

  /** Bytes per second delivered, or null while too little has arrived to tell. */
  get bytesPerS() {
    const span = this.first === null ? 0 : (this.last - this.first) / 1000;
    return span >= MIN_SPAN_S && this.bytes > 0 ? this.bytes / span : null;
  }

  /** Audio seconds per second the link delivered in this transport. */
  get audioPerS() {
    const b = this.bytesPerS;
    return b === null ? null : b / this.bytesPerAudioS;
  }
}

function load() {
  try {
    const m = JSON.parse(localStorage.getItem(KEY) || 'null');
    return m && typeof m.bytesPerS === 'number' ? m : null;
  } catch (_) {
    return null;
  }
}

let memory = load();

/** What was last measured: {transport, bytesPerS, at} (at: Date.now()), or null. */
export function remembered(now = Date.now()) {
  return memory && now - memory.at <= MAX_AGE_MS ? memory : null;
}

/** Keep an utterance's measurement (ignored when it measured nothing). */
export function remember(meter, now = Date.now()) {
  const bytesPerS = meter.bytesPerS;
  if (bytesPerS === null) return;
  // Without chunk times (an older server), only a float32 or 16-bit reading is taken at its word.
  const limited = meter.linkLimited;
  const lowerBound = limited === null ? meter.transport === 'opus' : !limited;
  memory = { transport: meter.transport, bytesPerS, lowerBound, at: now };
  try { localStorage.setItem(KEY, JSON.stringify(memory)); } catch (_) { /* private mode: module state only */ }
}

export function forget() {
  memory = null;
  try { localStorage.removeItem(KEY); } catch (_) { /* nothing kept */ }
}

// Cheapest last: the first of a mode's transports that the link carries with headroom is used.
export const TIERS = { auto: ['f32', 's16', 'opus'], lossless: ['f32', 's16'], compressed: ['opus'] };

/**
 * The transport for the next utterance. A pure function of the mode and what was measured: the
 * first of the mode's tiers the link carries HEADROOM times faster than real time, else (when the
 * reading is a lower bound: the generator was the slow one) the transport measured, else the
 * cheapest; with nothing measured, the first (float32, as before: this utterance measures the link).
 * @param {'auto'|'lossless'|'compressed'} mode
 * @param {{transport: string, bytesPerS: number}|null} last
 */
export function chooseTransport(mode, last) {
  const tiers = TIERS[mode] || TIERS.auto;
  if (!last) return tiers[0];
  const fits = (t) => last.bytesPerS / BYTES_PER_AUDIO_S[t] >= HEADROOM;
  const measured = tiers.indexOf(last.transport);
  if (last.lowerBound && measured >= 0) {   // the generator, not the link, was slow: no reason to step down
    return tiers.slice(0, measured).find(fits) || last.transport;
  }
  return tiers.find(fits) || tiers[tiers.length - 1];
}

/** Audio seconds per second the link is expected to carry in `transport` (null: unknown). */
export function expectedRate(transport, last) {
  if (!last || last.lowerBound) return null;   // a lower bound does not limit anything
  return last.bytesPerS / BYTES_PER_AUDIO_S[transport];
}

/** "Opus 160 kb/s · link ≈ 1.1 Mb/s", "16-bit PCM (lossless) · link ≈ 2.3 Mb/s". */
export function describe(transport, bitRate, bytesPerS, sign = '≈') {
  const name = transport === 'opus' ? `Opus ${Math.round((bitRate || 160000) / 1000)} kb/s` : LABELS[transport];
  if (!(bytesPerS > 0)) return name;
  const bits = bytesPerS * 8;
  const link = bits >= 1e6 ? `${(bits / 1e6).toFixed(1)} Mb/s` : `${Math.round(bits / 1e3)} kb/s`;
  return `${name} · link ${sign} ${link}`;
}

/**
 * One utterance's side of it, for the player: `pick()` before the request, `started(m)` on the
 * source's 'start', `read(m)` per network read, `finished()` when all arrived; `label` for the page.
 */
export class Wire {
  constructor(mode, forced = null) {
    this.mode = mode;
    this.forced = forced;     // a transport named in the URL (tests, benchmarks)
    this.last = remembered();
    this.meter = null;
    this.transport = null;
    this.bitRate = null;
  }

  pick() { return this.forced || chooseTransport(this.mode, this.last); }

  started(m) {
    this.transport = m.transport;
    this.bitRate = m.bitRate;
    this.meter = new LinkMeter(m.transport);
  }

  read(m) { if (this.meter) this.meter.read(m.bytes, m.at); }

  progress(m) { if (this.meter) this.meter.progress(m.serverS, m.at); }

  finished() { if (this.meter) remember(this.meter); }

  /** Audio seconds per second the link should carry now (from the last utterance), or null. */
  get expectedRate() { return this.transport ? expectedRate(this.transport, this.last) : null; }

  get label() {
    if (!this.transport) return '';
    const now = this.meter && this.meter.bytesPerS;
    if (this.transport !== 'opus') return describe(this.transport, null, now);
    // An Opus stream's own reading is a lower bound; the last lossless one says more, when known.
    const known = this.last && !this.last.lowerBound ? this.last.bytesPerS : null;
    return known ? describe('opus', this.bitRate, known) : describe('opus', this.bitRate, now, '≥');
  }
}
