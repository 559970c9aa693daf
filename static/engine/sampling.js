// Code picking between the graphs' calls: the JS twin of tts_core/model/sampling.py.
// Repetition penalty on the raw logits (float32, as torch), then argmax (greedy) or temperature,
// top-k (ties kept), top-p and one inverse-CDF draw from the stream's own seeded generator.
// Greedy picks equal torch's exactly; sampled draws use this file's generator (xoshiro128**,
// seeded by splitmix32), so a seed repeats here but not across engines.

const f32 = Math.fround;

function splitmix32(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x9e3779b9) >>> 0;
    let z = state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
}

/** A stream's private generator: uniforms in [0, 1) with 24 random bits (exact in float32). */
export class Rng {
  constructor(seed) {
    const mix = splitmix32(Number(BigInt.asUintN(32, BigInt(seed ?? 0))));
    this.s = new Uint32Array([mix(), mix(), mix(), mix()]);
  }

  nextUint32() {
    const s = this.s;
    const rotl = (x, k) => ((x << k) | (x >>> (32 - k))) >>> 0;
    const result = Math.imul(rotl(Math.imul(s[1], 5) >>> 0, 7), 9) >>> 0;
    const t = (s[1] << 9) >>> 0;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 11);
    return result;
  }

  uniform() { return (this.nextUint32() >>> 8) / 16777216; }
}

/** SamplingParams' defaults (tts_core/config.py). */
export const DEFAULT_SAMPLING = Object.freeze({
  doSample: true, audioTemperature: 0.8, audioTopP: 0.95, audioTopK: 25, audioRepetitionPenalty: 1.2,
  textTemperature: 1.0, textTopP: 1.0, textTopK: 50,
});
export const GREEDY_SAMPLING = Object.freeze({ ...DEFAULT_SAMPLING, doSample: false, audioRepetitionPenalty: 1.0 });

/** In place: s < 0 -> s * rp, else s / rp where `seen` (apply_repetition_penalty). */
export function applyPenalty(logits, seen, penalty) {
  if (penalty === 1) return logits;
  const rp = f32(penalty);
  for (let i = 0; i < logits.length; i++) {
    if (seen[i]) logits[i] = logits[i] < 0 ? f32(logits[i] * rp) : f32(logits[i] / rp);
  }
  return logits;
}

/** Argmax, ties to the first index (torch.argmax). */
export function argmax(values) {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
  return best;
}

/** sample_filtered: temperature, top-k (k <= 0: off), top-p (outside (0, 1): off), draw with u. */
export function sampleFiltered(logits, temperature, topK, topP, u) {
  const vocab = logits.length;
  const t = f32(temperature);
  const order = Array.from({ length: vocab }, (_, i) => i);
  const scores = Float32Array.from(logits, (x) => f32(x / t));
  order.sort((a, b) => scores[b] - scores[a] || a - b);
  const k = topK <= 0 ? vocab : Math.min(topK, vocab);
  const threshold = scores[order[k - 1]];
  let kept = 0;
  while (kept < vocab && scores[order[kept]] >= threshold) kept++;
  const top = scores[order[0]];
  const cdf = new Float64Array(kept);
  let sum = 0;
  for (let i = 0; i < kept; i++) { sum += Math.exp(scores[order[i]] - top); cdf[i] = sum; }
  for (let i = 0; i < kept; i++) cdf[i] /= sum;
  const p = topP > 0 && topP < 1 ? topP : Infinity;
  let numP = 1;
  for (let i = 0; i < kept - 1; i++) if (cdf[i] <= p) numP++;
  const numKept = Math.min(kept, numP);
  const target = u * cdf[numKept - 1];
  let position = 0;
  while (position < numKept - 1 && cdf[position] < target) position++;
  return order[position];
}

/** One codebook's code from its logits (modified in place by the penalty). */
export function pickCode(logits, seen, params, u) {
  applyPenalty(logits, seen, params.audioRepetitionPenalty);
  if (!params.doSample) return argmax(logits);
  return sampleFiltered(logits, params.audioTemperature, params.audioTopK, params.audioTopP, u);
}

/** Continue (true) or stop from the stop pair [continue, stop] (decide_continue). */
export function decideContinue(stopLogits, params, u) {
  if (!params.doSample) return stopLogits[0] >= stopLogits[1];
  return sampleFiltered(stopLogits, params.textTemperature, Math.min(params.textTopK, 2), params.textTopP, u) === 0;
}
