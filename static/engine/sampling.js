// The stream's randomness and sampling parameters, as the frame graph (lm_local.onnx) takes them.
// The pick itself (repetition penalty, greedy or temperature/top-k/top-p and an inverse-CDF draw)
// runs inside the graph, which is tts_core/model/sampling.py exported; this file gives it the
// frame's 1 + n_vq uniforms from the stream's own seeded generator (xoshiro128**, seeded by
// splitmix32), so a seed repeats here but not across engines, and the parameters row of
// tts_core/engine/sampler.param_row.

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

  /** The next `count` uniforms into a Float32Array (a frame draws 1 + n_vq). */
  fill(out) {
    for (let i = 0; i < out.length; i++) out[i] = this.uniform();
    return out;
  }
}

/** SamplingParams' defaults (tts_core/config.py). */
export const DEFAULT_SAMPLING = Object.freeze({
  doSample: true, audioTemperature: 0.8, audioTopP: 0.95, audioTopK: 25, audioRepetitionPenalty: 1.2,
  textTemperature: 1.0, textTopP: 1.0, textTopK: 50,
});
export const GREEDY_SAMPLING = Object.freeze({ ...DEFAULT_SAMPLING, doSample: false, audioRepetitionPenalty: 1.0 });

const kthIndex = (topK, vocab) => (topK <= 0 ? vocab : Math.min(Math.trunc(topK), vocab)) - 1;
const topPBound = (topP) => (topP > 0 && topP < 1 ? topP : Infinity);

/** The frame graph's sampling_params row (param_row's layout) for codebooks of `vocab` codes. */
export function samplingRow(params, vocab) {
  for (const key of Object.keys(DEFAULT_SAMPLING)) {
    const value = params[key];
    if (key === 'doSample' ? typeof value !== 'boolean' : !Number.isFinite(value)) {
      throw new Error(`sampling.${key} must be ${key === 'doSample' ? 'true or false' : 'a finite number'}, `
        + `got ${JSON.stringify(value)}`);
    }
  }
  if (!(params.audioTemperature > 0 && params.textTemperature > 0)) {
    throw new Error('sampling.audioTemperature and sampling.textTemperature must be > 0');
  }
  if (!(params.audioRepetitionPenalty > 0)) throw new Error('sampling.audioRepetitionPenalty must be > 0');
  return Float32Array.of(params.doSample ? 1 : 0, params.audioTemperature, kthIndex(params.audioTopK, vocab),
    topPBound(params.audioTopP), params.audioRepetitionPenalty, params.textTemperature,
    kthIndex(params.textTopK, 2), topPBound(params.textTopP));
}
