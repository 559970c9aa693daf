// Integrated loudness (ITU-R BS.1770-4, the meter EBU R128 uses) of stereo PCM held in the page, and
// the gain that plays it at a common target.
//
// Measured here rather than on the server: the page already holds every card's PCM (a replay needs
// no request), so matching costs no request, and the downloads, which the server writes from its own
// copy, stay unmodified by construction. tests/e2e/test_e2e_loudness.py holds this meter to pyloudnorm's.

export const TARGET_LUFS = -23;
export const MAX_GAIN_DB = 30;       // a near-silent card is not blown up into noise
export const PEAK_CEILING = 0.999;   // a gain never pushes a sample past full scale (sample peak)

/** The K-weighting filter for `rate`: a high shelf (+4 dB above ~1.7 kHz) then a high-pass (~38 Hz),
 *  each [b0, b1, b2, a1, a2], by the bilinear transform of BS.1770's analogue prototypes (at 48 kHz
 *  these are the standard's published coefficients). */
export function kWeighting(rate) {
  const shelf = (() => {
    const f0 = 1681.974450955533, gainDb = 3.999843853973347, q = 0.7071752369554196;
    const k = Math.tan(Math.PI * f0 / rate), vh = 10 ** (gainDb / 20), vb = vh ** 0.4996667741545416;
    const a0 = 1 + k / q + k * k;
    return [(vh + vb * k / q + k * k) / a0, 2 * (k * k - vh) / a0, (vh - vb * k / q + k * k) / a0,
      2 * (k * k - 1) / a0, (1 - k / q + k * k) / a0];
  })();
  const highpass = (() => {
    const f0 = 38.13547087602444, q = 0.5003270373238773;
    const k = Math.tan(Math.PI * f0 / rate), a0 = 1 + k / q + k * k;
    return [1, -2, 1, 2 * (k * k - 1) / a0, (1 - k / q + k * k) / a0];
  })();
  return [shelf, highpass];
}

/** BS.1770 loudness of interleaved stereo pushed chunk by chunk: K-weighted mean square per 100 ms
 *  quarter, 400 ms blocks every 100 ms. `integrated()` gates the blocks so far (absolute -70 LUFS,
 *  relative -10 LU); audio shorter than one block is measured whole. The live matcher (livegain.js)
 *  reads it after every chunk; `measure` runs it once over a whole result. */
export class LoudnessMeter {
  constructor(rate) {
    this.stages = kWeighting(rate);
    this.state = [0, 1].map(() => this.stages.map(() => [0, 0, 0, 0]));   // per channel, per stage: x1 x2 y1 y2
    this.step = Math.round(rate * 0.1);
    this.quarters = [];   // sum of K-weighted squares (both channels) per 100 ms
    this.blocks = [];     // mean square per 400 ms block
    this.acc = 0; this.inQuarter = 0; this.peak = 0; this.total = 0;
  }

  push(chunk) {
    const stages = this.stages, state = this.state;
    let acc = this.acc, inQuarter = this.inQuarter, peak = this.peak;
    for (let i = 0; i + 1 < chunk.length; i += 2) {
      for (let c = 0; c < 2; c++) {
        let x = chunk[i + c];
        const a = Math.abs(x);
        if (a > peak) peak = a;
        for (let s = 0; s < 2; s++) {
          const [b0, b1, b2, a1, a2] = stages[s], st = state[c][s];
          const y = b0 * x + b1 * st[0] + b2 * st[1] - a1 * st[2] - a2 * st[3];
          st[1] = st[0]; st[0] = x; st[3] = st[2]; st[2] = y;
          x = y;
        }
        acc += x * x;
      }
      this.total += 1;
      if (++inQuarter === this.step) { this.addQuarter(acc); acc = 0; inQuarter = 0; }
    }
    Object.assign(this, { acc, inQuarter, peak });
  }

  addQuarter(sum) {
    const q = this.quarters;
    q.push(sum);
    const n = q.length;
    if (n >= 4) this.blocks.push((q[n - 4] + q[n - 3] + q[n - 2] + q[n - 1]) / (4 * this.step));
  }

  /** The blocks that pass both gates (mean squares); none while under one block. */
  gatedBlocks() {
    const audible = this.blocks.filter((z) => loudness(z) > -70);
    if (!audible.length) return [];
    const relative = loudness(mean(audible)) - 10;
    return audible.filter((z) => loudness(z) > relative);
  }

  /** The loudness so far, for a live estimate: {lufs, seconds} of the gated blocks, or while under
   *  one gated block of the 100 ms quarters (the partial one too) above the absolute gate; null while
   *  nothing is audible. `seconds`: how much audio the figure rests on. */
  running() {
    const gated = this.gatedBlocks();
    if (gated.length) return { lufs: loudness(mean(gated)), seconds: 0.3 + 0.1 * gated.length };
    const parts = this.quarters.map((q) => q / this.step);
    if (this.inQuarter) parts.push(this.acc / this.inQuarter);
    const audible = parts.filter((z) => loudness(z) > -70);
    return audible.length ? { lufs: loudness(mean(audible)), seconds: 0.1 * audible.length } : null;
  }

  /** Integrated loudness (LUFS) of everything pushed so far. */
  integrated() {
    if (this.quarters.length < 4) {   // under 400 ms: one block of everything
      const sum = this.quarters.reduce((p, q) => p + q, this.acc);
      return this.total ? loudness(sum / this.total) : -Infinity;
    }
    const gated = this.gatedBlocks();
    return gated.length ? loudness(mean(gated)) : -Infinity;
  }
}

const loudness = (z) => -0.691 + 10 * Math.log10(z);
const mean = (list) => list.reduce((p, q) => p + q, 0) / list.length;

/** {lufs, peak} of interleaved stereo `chunks` (Float32Arrays) at `rate` (LoudnessMeter, at once). */
export function measure(chunks, rate) {
  const meter = new LoudnessMeter(rate);
  for (const chunk of chunks) meter.push(chunk);
  return { lufs: meter.integrated(), peak: meter.peak };
}

/** The gain that brings {lufs, peak} to `target` (capped: no clipping, at most +30 dB), and the
 *  loudness it reaches. */
export function matchGain({ lufs, peak }, target = TARGET_LUFS) {
  if (!Number.isFinite(lufs)) return { gain: 1, reached: lufs };
  let gain = 10 ** (Math.min(target - lufs, MAX_GAIN_DB) / 20);
  if (peak * gain > PEAK_CEILING) gain = PEAK_CEILING / peak;
  return { gain, reached: lufs + 20 * Math.log10(gain) };
}
