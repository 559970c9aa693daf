// The live play's loudness gain where the audio is played (worklet.js), per sample: it glides
// towards the gain the player last asked for (livegain.js), rising over UP_S and falling over DOWN_S
// (a too-loud start is brought down quickly, a rise is gentle), and a gain that would push a sample
// past full scale is lowered on that sample (no clipping). Applied at playback, each sample gets the
// estimate made from all the audio received by the time it plays: on a fast server nearly the whole
// card, on a slow one the buffer ahead of it.

export const UP_S = 0.4;
export const DOWN_S = 0.1;
const PEAK_CEILING = 0.999;   // as loudness.js: no sample past full scale

export class GainGlide {
  constructor(rate, { upS = UP_S, downS = DOWN_S } = {}) {
    this.up = 1 - Math.exp(-1 / (upS * rate));
    this.down = 1 - Math.exp(-1 / (downS * rate));
    this.reset();
  }

  /** A new stream: no gain asked for yet. */
  reset() {
    this.gain = null;   // the gain of the last sample played; null until the first `set`
    this.want = 1;
    this.played = false;
  }

  /** A new gain to glide to. Until a sample has played it is taken at once: on a fast server many
   *  estimates arrive before playback starts, and the first sample gets the latest. */
  set(want) {
    this.want = want;
    if (!this.played) this.gain = want;
  }

  /** Scale the first `k` samples of the channels `L`, `R` in place. */
  apply(L, R, k) {
    if (this.gain === null) return;
    this.played = this.played || k > 0;
    let g = this.gain;
    const want = this.want;
    for (let i = 0; i < k; i++) {
      g += (want - g) * (want > g ? this.up : this.down);
      const peak = Math.max(Math.abs(L[i]), Math.abs(R[i]));
      if (peak * g > PEAK_CEILING) g = PEAK_CEILING / peak;
      L[i] *= g; R[i] *= g;
    }
    this.gain = g;
  }

  /** The gain (dB) of the last sample played; null before the first `set`. */
  get gainDb() {
    return this.gain === null ? null : 20 * Math.log10(this.gain);
  }
}
