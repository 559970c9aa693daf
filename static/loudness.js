// Integrated loudness (ITU-R BS.1770-4, the meter EBU R128 uses) of stereo PCM held in the page, and
// the gain that plays it at a common target.
//
// Measured here rather than on the server: the page already holds every card's PCM (a replay needs
// no request), so matching costs no request, and the downloads, which the server writes from its own
// copy, stay unmodified by construction. tests/e2e/test_e2e_loudness.py holds this meter to pyloudnorm's.

export const TARGET_LUFS = -23;
const MAX_GAIN_DB = 30;        // a near-silent card is not blown up into noise
const PEAK_CEILING = 0.999;    // a gain never pushes a sample past full scale (sample peak)

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

/** {lufs, peak} of interleaved stereo `chunks` (Float32Arrays) at `rate`: 400 ms blocks every 100 ms,
 *  absolute gate -70 LUFS, relative gate -10 LU. Audio shorter than one block is measured whole. */
export function measure(chunks, rate) {
  const stages = kWeighting(rate);
  const state = [0, 1].map(() => stages.map(() => [0, 0, 0, 0]));   // per channel, per stage: x1 x2 y1 y2
  const step = Math.round(rate * 0.1);
  const quarters = [];   // sum of K-weighted squares (both channels) per 100 ms
  let acc = 0, inQuarter = 0, peak = 0, total = 0;
  for (const chunk of chunks) {
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
      total += 1;
      if (++inQuarter === step) { quarters.push(acc); acc = 0; inQuarter = 0; }
    }
  }
  const loud = (z) => -0.691 + 10 * Math.log10(z);
  if (quarters.length < 4) {   // under 400 ms: one block of everything
    const sum = quarters.reduce((p, q) => p + q, acc);
    return { lufs: total ? loud(sum / total) : -Infinity, peak };
  }
  const blocks = [];
  for (let i = 0; i + 4 <= quarters.length; i++) {
    blocks.push((quarters[i] + quarters[i + 1] + quarters[i + 2] + quarters[i + 3]) / (4 * step));
  }
  const mean = (list) => list.reduce((p, q) => p + q, 0) / list.length;
  const audible = blocks.filter((z) => loud(z) > -70);
  if (!audible.length) return { lufs: -Infinity, peak };
  const relative = loud(mean(audible)) - 10;
  const gated = audible.filter((z) => loud(z) > relative);
  return { lufs: loud(mean(gated)), peak };
}

/** The gain that brings {lufs, peak} to `target` (capped: no clipping, at most +30 dB), and the
 *  loudness it reaches. */
export function matchGain({ lufs, peak }, target = TARGET_LUFS) {
  if (!Number.isFinite(lufs)) return { gain: 1, reached: lufs };
  let gain = 10 ** (Math.min(target - lufs, MAX_GAIN_DB) / 20);
  if (peak * gain > PEAK_CEILING) gain = PEAK_CEILING / peak;
  return { gain, reached: lufs + 20 * Math.log10(gain) };
}
