// Loudness matching of the first, live play of an audition card, while the audio is still being
// generated (replays use the exact gain of the whole card: board.js, loudness.js).
//
// The card's loudness is unknown until it is all made, so it is estimated: from the voice's loudness
// measured on earlier cards (remembered in this browser, per voice), blended with the running BS.1770
// loudness of the audio received so far, which takes over as it accumulates (the remembered figure
// counts as VOICE_PRIOR_S of audio). The estimate is cumulative, each second weighing less than the
// last, so its gain settles instead of following the speech as a compressor would. The player sends
// the estimate's gain to the worklet after every chunk; the worklet glides to it (gainglide.js).

import { LoudnessMeter, MAX_GAIN_DB, PEAK_CEILING, TARGET_LUFS } from './loudness.js';

export const VOICE_PRIOR_S = 2;    // the voice's remembered loudness counts as this much heard audio
export const SURE_AFTER_S = 1;     // without a prior, the estimate is trusted after this much audio
const MEMORY_KEY = 'moss-tts-loudness-v1';
const MAX_VOICES = 64;
const MEMORY_RUNS = 4;             // the voice's figure is the mean of its last few cards

export class LiveEstimator {
  /**
   * @param {number} rate  the stream's sample rate
   * @param {{target?: number, prior?: {lufs: number, weightS: number}|null}} options
   */
  constructor(rate, { target = TARGET_LUFS, prior = null } = {}) {
    Object.assign(this, { target, prior, meter: new LoudnessMeter(rate) });
  }

  /** The loudness the card most likely has (LUFS), or null (nothing audible yet and no prior). */
  estimate() {
    const heard = this.meter.running();
    if (!this.prior) return heard ? heard.lufs : null;
    if (!heard) return this.prior.lufs;
    const w = this.prior.weightS;
    return (this.prior.lufs * w + heard.lufs * heard.seconds) / (w + heard.seconds);
  }

  /** The gain that brings `lufs` to the target: at most +MAX_GAIN_DB, no sample so far clipped. */
  gainFor(lufs) {
    const gain = 10 ** (Math.min(this.target - lufs, MAX_GAIN_DB) / 20);
    return this.meter.peak > 0 ? Math.min(gain, PEAK_CEILING / this.meter.peak) : gain;
  }

  /** Take the next chunk (interleaved stereo, left as it is); returns {gain, sure, estimate} (the
   *  gain for the worklet to glide to), or null while nothing is known. Without a prior the gain never rises above 1
   *  before SURE_AFTER_S of audible audio: a quiet first syllable, or a pause, is no evidence of a
   *  quiet voice, and boosting it would play the loud speech after it too loud. */
  observe(chunk) {
    this.meter.push(chunk);
    const estimate = this.estimate();
    if (estimate === null) return null;
    const heard = this.meter.running();
    const sure = !!this.prior || (heard !== null && heard.seconds >= SURE_AFTER_S);
    const gain = sure ? this.gainFor(estimate) : Math.min(this.gainFor(estimate), 1);
    return { gain, sure, estimate };
  }
}

// ---- the voices' loudness, remembered in this browser -------------------------------------------

function loadMemory() {
  try {
    const data = JSON.parse(localStorage.getItem(MEMORY_KEY) || '{}');
    return data && typeof data === 'object' && data.voices && typeof data.voices === 'object' ? data.voices : {};
  } catch (_) {
    return {};   // corrupt or unreadable: start afresh
  }
}

const usable = (entry) => entry && Number.isFinite(entry.lufs) && entry.lufs > -70 && entry.lufs < 20;

/** The prior for a card of `voice`: its remembered loudness, or null (never measured here). Another
 *  voice's figure is no guide: voices differ by several LU, which is why cards are matched at all. */
export function priorFor(voice) {
  const entry = loadMemory()[voice];
  return usable(entry) ? { lufs: entry.lufs, weightS: VOICE_PRIOR_S } : null;
}

/** Remember `lufs`, the integrated loudness of a whole card of `voice` (a running mean of its last few). */
export function rememberLoudness(voice, lufs) {
  if (!Number.isFinite(lufs) || lufs <= -70) return;
  const voices = loadMemory();
  const old = usable(voices[voice]) ? voices[voice] : null;
  const n = old ? Math.min((old.n | 0) + 1, MEMORY_RUNS) : 1;
  voices[voice] = { lufs: old ? old.lufs + (lufs - old.lufs) / n : lufs, n, at: Date.now() };
  const kept = Object.entries(voices).filter(([, e]) => usable(e))
    .sort((a, b) => (b[1].at || 0) - (a[1].at || 0)).slice(0, MAX_VOICES);
  try { localStorage.setItem(MEMORY_KEY, JSON.stringify({ v: 1, voices: Object.fromEntries(kept) })); } catch (_) {
    /* storage full or off: the next card starts from its own audio */
  }
}
