// The browser engine: the exported graphs (tts_core/export) run by onnxruntime-web, and the frame
// loop of tts_core/export/onnx_runtime.py around them. Per text chunk: prompt rows -> lm_global
// (prefill into a cache sized for the whole chunk) -> per frame one lm_local call (stop decision
// and all codes, sampled inside the graph from uniforms drawn here) -> codec_decode (the frame's
// 80 ms of stereo audio) and lm_global (append the frame). Caches stay here, preallocated: a
// call returns only what it adds, so a frame costs the same early and late in a chunk.

import { CodecStream } from './codec_stream.js';
import { SentencePiece } from './sentencepiece.js';
import { buildPromptRows, promptTemplate } from './prompt.js';
import { DEFAULT_SAMPLING, GREEDY_SAMPLING, Rng, samplingRow } from './sampling.js';
import { pauseAfterChunkS, splitText } from './chunking.js';
import { detectLanguage, normalizeText } from './normalize.js';

/** Whether this browser offers a WebGPU adapter. */
export async function hasWebGpu() {
  return typeof navigator !== 'undefined' && !!navigator.gpu
    && navigator.gpu.requestAdapter().then((a) => !!a, () => false);
}

/** The precision a backend runs: `requested`, else fp16 on WebGPU, else int8, else fp32. */
export function choosePrecision(description, backend, requested) {
  const have = Object.keys(description.precisions);
  if (requested) {
    if (!have.includes(requested)) {
      throw new Error(`precision=${requested}: this build has ${have.join(', ')} (export-web --precision)`);
    }
    return requested;
  }
  const order = backend === 'webgpu' ? ['fp16', 'int8', 'fp32'] : ['int8', 'fp32', 'fp16'];
  return order.find((p) => have.includes(p)) ?? have[0];
}

const PREFIX_CACHE_SIZE = 4;   // voices whose prompt prefix stays computed
const fromBase64 = (text) => new Float32Array(Uint8Array.from(atob(text), (c) => c.charCodeAt(0)).buffer);

export class MossEngine {
  constructor(ort, info, description, tokenizer, voices, sessions, extras = {}) {
    this.ort = ort;
    this.infoValue = info;
    this.description = description;
    this.lm = description.lm;
    this.tokenizer = tokenizer;
    this.template = promptTemplate(tokenizer, description.lm);
    this.voices = voices;
    this.sessions = sessions;
    this.selftest = extras.selftest ?? null;
    this.loadEncoder = extras.loadEncoder ?? null;
    this.sessionOptions = extras.sessionOptions ?? {};
    this.codec = extras.codec;   // a CodecStream here, or a CodecWorker
    this.stats = { global: 0, local: 0, codec: 0 };   // ms spent in each graph's session.run
    this.prefixes = new Map();   // voice prefix rows -> their keys/values (least recently used first)
  }

  /**
   * @param {object} ort  the onnxruntime-web module
   * @param {object} files  {graphs: description, tokenizer: json, voices: json, selftest: json,
   *   models: {global, local, codec}: ArrayBuffer}
   * @param {{backend: string, threads: number, precision: string, loadEncoder?: () => Promise<ArrayBuffer>}} options
   *   loadEncoder fetches the clip encoder when a clip is first encoded
   */
  static async create(ort, files, options) {
    const providers = options.backend === 'webgpu' ? ['webgpu', 'wasm'] : ['wasm'];
    const sessionOptions = { executionProviders: providers, graphOptimizationLevel: 'all' };
    const sessions = {};
    for (const kind of files.graphs.speak) {
      if (kind === 'codec' && options.codecWorker) continue;
      sessions[kind] = await ort.InferenceSession.create(new Uint8Array(files.models[kind]), sessionOptions);
    }
    const codec = options.codecWorker
      ? await CodecWorker.start(options.codecWorker, files.models.codec, files.graphs.codec)
      : new CodecStream(ort, sessions.codec, files.graphs.codec);
    const info = { backend: options.backend, precision: options.precision, threads: options.threads,
      codecWorker: !!options.codecWorker };
    return new MossEngine(ort, info, files.graphs, new SentencePiece(files.tokenizer), files.voices, sessions,
      { selftest: files.selftest, loadEncoder: options.loadEncoder, sessionOptions, codec });
  }

  /** Free every session (a backend that failed its self-test gives way to the next). */
  async release() {
    for (const session of Object.values(this.sessions)) await session.release();
    this.sessions = {};
    this.codec.terminate?.();
  }

  /** Decode one frame (ms counted in stats.codec); returns interleaved stereo Float32Array. */
  async decodeFrame(codes) {
    const t0 = performance.now();
    const pcm = await this.codec.decode(codes);
    this.stats.codec += performance.now() - t0;
    return pcm;
  }

  /**
   * Check this backend against the build's reference (selftest.json, from the torch modules): the
   * hidden state of a short prefill, and a few frames of audio. Some GPUs compute garbage in fp16;
   * this is what catches it before a visitor hears it.
   * @returns {Promise<{ok: boolean, cosine: number, snrDb: number, reason: string|null}>}
   */
  async selfTest() {
    const ref = this.selftest;
    if (!ref) throw new Error('this build has no selftest.json: rebuild it with export-web');
    const lm = this.lm;
    const stats = { ...this.stats };
    const count = ref.rows.length / (lm.n_vq + 1);
    const hidden = (await this.globalPass(BigInt64Array.from(ref.rows, BigInt), count, this.newGlobalCache(count))).data;
    const want = fromBase64(ref.hidden);
    let dot = 0, a2 = 0, b2 = 0;
    for (let i = 0; i < want.length; i++) { dot += hidden[i] * want[i]; a2 += hidden[i] ** 2; b2 += want[i] ** 2; }
    const cosine = dot / Math.sqrt(a2 * b2);
    this.codec.reset();
    const pcm = fromBase64(ref.pcm);   // [2, S]: left then right
    const samples = pcm.length / 2;
    let signal = 0, noise = 0;
    for (let f = 0; f < ref.frames; f++) {
      const got = await this.decodeFrame(Int32Array.from(ref.codes.slice(f * lm.n_vq, (f + 1) * lm.n_vq)));
      const perFrame = got.length / 2;
      for (let i = 0; i < perFrame; i++) {
        for (let c = 0; c < 2; c++) {
          const expected = pcm[c * samples + f * perFrame + i];
          signal += expected ** 2;
          noise += (got[2 * i + c] - expected) ** 2;
        }
      }
    }
    this.stats = stats;
    const snrDb = noise > 0 ? 10 * Math.log10(signal / noise) : Infinity;
    let reason = null;
    if (!(cosine >= ref.min_cosine)) reason = `LM hidden state off (cosine ${cosine.toFixed(4)} < ${ref.min_cosine})`;
    else if (!(snrDb >= ref.min_snr_db)) reason = `codec audio off (SNR ${snrDb.toFixed(1)} dB < ${ref.min_snr_db} dB)`;
    return { ok: reason === null, cosine, snrDb, reason };
  }

  info() { return { ...this.infoValue }; }

  tensor(type, data, dims) { return new this.ort.Tensor(type, data, dims); }

  preset(name) {
    const wanted = name ?? this.voices.default;
    const preset = this.voices.presets.find((p) => p.name === wanted);
    if (!preset) {
      throw new Error(`voice: unknown preset ${JSON.stringify(wanted)}; choose one of `
        + this.voices.presets.map((p) => p.name).join(', ') + ', or pass {codes: Int32Array}');
    }
    return preset;
  }

  resolveVoice(voice) {
    if (voice && typeof voice === 'object') {
      if (!(voice.codes instanceof Int32Array)) throw new Error('voice: pass a preset name or {codes: Int32Array}');
      return voice.codes;
    }
    return Int32Array.from(this.preset(voice).codes);
  }

  /** A global cache of `capacity` rows: per layer keys transposed [nh, D, C] and values [nh, C, D]. */
  newGlobalCache(capacity) {
    const lm = this.lm;
    const size = lm.num_heads * lm.head_dim * capacity;
    const cache = { capacity, length: 0, keys: [], values: [], feeds: {} };
    for (let i = 0; i < lm.num_layers; i++) {
      cache.keys.push(new Float32Array(size));
      cache.values.push(new Float32Array(size));
      // Tensors over the arrays themselves: appending writes into what the next call reads.
      cache.feeds[`keys_${i}`] = this.tensor('float32', cache.keys[i], [1, lm.num_heads, lm.head_dim, capacity]);
      cache.feeds[`values_${i}`] = this.tensor('float32', cache.values[i], [1, lm.num_heads, capacity, lm.head_dim]);
    }
    return cache;
  }

  /** `count` rows after the cache's valid ones -> the last row's hidden state; the rows' keys and
   * values are written into the cache (the graph returns only them, [L, nh, T, D]). */
  async globalPass(rows, count, cache) {
    const lm = this.lm;
    if (cache.length + count > cache.capacity) throw new Error('global cache full: this is a bug in the caller');
    const t0 = performance.now();
    const out = await this.sessions.global.run({
      rows: this.tensor('int64', rows, [1, count, lm.n_vq + 1]),
      length: this.tensor('int64', BigInt64Array.of(BigInt(cache.length)), [1]), ...cache.feeds,
    });
    this.stats.global += performance.now() - t0;
    const D = lm.head_dim, C = cache.capacity, nh = lm.num_heads;
    const newKeys = out.new_keys.data, newValues = out.new_values.data;
    for (let l = 0; l < lm.num_layers; l++) {
      const keys = cache.keys[l], values = cache.values[l];
      for (let h = 0; h < nh; h++) {
        const source = ((l * nh + h) * count) * D;
        values.set(newValues.subarray(source, source + count * D), (h * C + cache.length) * D);
        for (let t = 0; t < count; t++) {
          const row = source + t * D, column = cache.length + t;
          for (let d = 0; d < D; d++) keys[(h * D + d) * C + column] = newKeys[row + d];
        }
      }
    }
    cache.length += count;
    return out.hidden;
  }

  /**
   * Prefill `rows` into `cache` as the torch engine does: the voice's prefix (the rows every prompt
   * of the voice shares) first, its keys/values kept for the voice's next prompts (the LRU
   * `PREFIX_CACHE_SIZE`), then the rest. A kept prefix is copied instead of computed; either way the
   * rest runs on the same cache, so the result does not depend on what was kept.
   */
  async prefill(rows, count, prefixRows, cache) {
    const width = this.lm.n_vq + 1;
    if (!(prefixRows > 0 && prefixRows < count)) return this.globalPass(rows, count, cache);
    const key = rows.subarray(0, prefixRows * width).join(',');
    const kept = this.prefixes.get(key);
    if (kept) {
      this.prefixes.delete(key);
      this.prefixes.set(key, kept);   // most recently used last
      this.copyRows(kept, cache, prefixRows);
    } else {
      await this.globalPass(rows.subarray(0, prefixRows * width), prefixRows, cache);
      const snapshot = this.newGlobalCache(prefixRows);
      this.copyRows(cache, snapshot, prefixRows);
      this.prefixes.set(key, snapshot);
      if (this.prefixes.size > PREFIX_CACHE_SIZE) this.prefixes.delete(this.prefixes.keys().next().value);
    }
    return this.globalPass(rows.subarray(prefixRows * width), count - prefixRows, cache);
  }

  /** The first `rows` rows of one global cache into another (their capacities may differ). */
  copyRows(from, to, rows) {
    const lm = this.lm;
    const D = lm.head_dim, nh = lm.num_heads;
    for (let l = 0; l < lm.num_layers; l++) {
      for (let h = 0; h < nh; h++) {
        for (let d = 0; d < D; d++) {   // keys are transposed: each (head, lane) is a row of positions
          const a = (h * D + d) * from.capacity, b = (h * D + d) * to.capacity;
          to.keys[l].set(from.keys[l].subarray(a, a + rows), b);
        }
        to.values[l].set(from.values[l].subarray(h * from.capacity * D, (h * from.capacity + rows) * D),
          h * to.capacity * D);
      }
    }
    to.length = rows;
  }

  /** One frame from the global state: [continue, codes Int32Array(n_vq)], one call of the frame
   * graph (decision, penalty and sampling inside; the uniforms drawn here). */
  async frame(hidden, sampler) {
    const t0 = performance.now();
    const out = await this.sessions.local.run({
      hidden, seen: sampler.seenTensor, uniforms: this.tensor('float32', sampler.rng.fill(sampler.uniforms), sampler.uniformDims),
      sampling_params: sampler.params,
    });
    this.stats.local += performance.now() - t0;
    const codes = Int32Array.from(out.codes.data, Number);
    return [Boolean(out.go_on.data[0]), codes];
  }

  /** A stream's sampler: its generator, the frame graph's parameter row, and the seen mask. */
  newSampler(params, rng) {
    const lm = this.lm;
    const vocab = lm.codebook_sizes[0];
    const seen = new Uint8Array(lm.n_vq * vocab);
    return {
      rng, seen, vocab, uniforms: new Float32Array(lm.n_vq + 1), uniformDims: [1, lm.n_vq + 1],
      seenTensor: this.tensor('bool', seen, [1, lm.n_vq, vocab]),
      params: this.tensor('float32', samplingRow(params, vocab), [1, 8]),
      observe(codes) { for (let k = 0; k < codes.length; k++) seen[k * vocab + codes[k]] = 1; },
    };
  }

  /**
   * A reference clip -> its codes (Int32Array, frames x 16), as the server's voice bank encodes it.
   * @param {Float32Array[]} channels  [left, right] (or one mono channel) at 48 kHz
   */
  async encodeClip(channels) {
    if (!this.sessions.encoder) {
      if (!this.loadEncoder) throw new Error('no clip encoder: this engine was created without loadEncoder');
      this.encoderReady ??= this.loadEncoder()
        .then((model) => this.ort.InferenceSession.create(new Uint8Array(model), this.sessionOptions))
        .finally(() => { this.encoderReady = null; });
      this.sessions.encoder = await this.encoderReady;
    }
    const codec = this.description.codec;
    const [left, right = channels[0]] = channels;
    const length = Math.min(left.length, codec.clip_samples);   // the voice bank keeps the first 20 s
    if (length < codec.samples_per_frame) throw new Error('clip: shorter than one frame (80 ms)');
    const wav = new Float32Array(2 * codec.clip_samples);
    wav.set(left.subarray(0, length), 0);
    wav.set(right.subarray(0, length), codec.clip_samples);
    const out = await this.sessions.encoder.run({
      wav: this.tensor('float32', wav, [1, 2, codec.clip_samples]),
      length: this.tensor('int64', BigInt64Array.of(BigInt(length)), [1]),
    });
    const frames = Number(out.frames.data[0]);
    const total = out.codes.dims[2], nq = out.codes.dims[1];
    const codes = new Int32Array(frames * nq);
    for (let f = 0; f < frames; f++) for (let q = 0; q < nq; q++) codes[f * nq + q] = Number(out.codes.data[q * total + f]);
    return codes;
  }

  /** The request's segments, as tts_core/synthesizer.py makes them: [{ids, maxFrames, prime, text}]. */
  segments({ text, voice, mode, promptText, normalizeText: clean, maxFrames }) {
    const codes = mode === 'continuation' && voice == null ? null : this.resolveVoice(voice);
    const count = (t) => this.tokenizer.encode(t).length;
    const segments = [];
    // The voice's language guides digit-only text (detect_language), for a preset that is in play.
    const inPlay = mode === 'voice_clone' || voice != null;
    const presetLanguage = inPlay && (typeof voice === 'string' || voice == null) ? this.preset(voice).language : null;
    const cleanup = (t) => (clean ? normalizeText(t, { language: detectLanguage(t, presetLanguage) }) : t);
    if (mode === 'voice_clone') {
      const said = cleanup(text);
      for (const chunk of splitText(said, count, this.voices.max_text_tokens ?? 75)) {
        const ids = this.tokenizer.encode(chunk);
        segments.push({ ids, codes, prime: null, text: chunk, maxFrames: defaultMaxFrames(ids.length) });
      }
    } else if (!codes) {
      const said = cleanup(text);
      const ids = this.tokenizer.encode(said);
      segments.push({ ids, codes: null, prime: null, text: said, maxFrames: defaultMaxFrames(ids.length) });
    } else {
      const transcript = promptText ?? (typeof voice === 'string' || voice == null ? this.preset(voice).transcript : null);
      if (!transcript) {
        throw new Error('promptText: continuation with a reference voice needs its transcript '
          + "(or use mode 'voice_clone', which needs none)");
      }
      const said = cleanup(text);
      const ids = this.tokenizer.encode(transcript + said);   // one string, encoded once (docs/spec/LM.md §4.4)
      const fresh = Math.max(1, ids.length - count(transcript));
      segments.push({ ids, codes, prime: codes, text: said, maxFrames: defaultMaxFrames(fresh) });
    }
    let left = maxFrames ?? Infinity;   // a request cap spans all segments (_apply_frame_cap)
    const capped = [];
    for (const segment of segments) {
      if (left <= 0) break;
      capped.push({ ...segment, maxFrames: Math.min(segment.maxFrames, left) });
      left -= capped[capped.length - 1].maxFrames;
    }
    return capped;
  }

  /**
   * Async iterator of {pcm, codes, isLast, segment, isPause}; see docs/BROWSER_ENGINE.md.
   * Frames are decoded as they come; the last item carries isLast (and may be empty).
   */
  async *stream({ text, voice, seed, greedy = false, maxFrames, normalizeText: clean = true, mode = 'voice_clone',
    promptText, sampling } = {}) {
    if (typeof text !== 'string' || !text.trim()) throw new Error('text: give some text to say');
    if (mode !== 'voice_clone' && mode !== 'continuation') {
      throw new Error(`mode must be 'voice_clone' or 'continuation', got ${JSON.stringify(mode)}`);
    }
    if (maxFrames != null && !(Number.isInteger(maxFrames) && maxFrames >= 1)) {
      throw new Error('maxFrames must be an integer >= 1 (or left out)');
    }
    const params = { ...(greedy ? GREEDY_SAMPLING : DEFAULT_SAMPLING), ...(sampling || {}) };
    samplingRow(params, this.lm.codebook_sizes[0]);   // bad sampling fields fail before any work
    const lm = this.lm;
    const segments = this.segments({ text, voice, mode, promptText, normalizeText: clean, maxFrames });
    const rng = new Rng(seed ?? Math.floor(Math.random() * 2 ** 32));   // one generator for the request
    for (let s = 0; s < segments.length; s++) {
      const segment = segments[s];
      const { rows, count, prefixRows } = buildPromptRows(this.template, mode, segment.ids, segment.codes);
      const frames = Math.min(segment.maxFrames, lm.max_rows - count);
      if (frames < 1) throw new Error(`text: a prompt of ${count} rows leaves no room below ${lm.max_rows} rows`);
      this.codec.reset();                   // each segment restarts the decoder ...
      if (segment.prime) {                  // ... or continues the reference audio (output dropped)
        for (let f = 0; f < segment.prime.length / lm.n_vq; f++) {
          await this.decodeFrame(segment.prime.subarray(f * lm.n_vq, (f + 1) * lm.n_vq));
        }
      }
      // The cache holds the whole segment from the start (prompt + its frame cap): no step grows it.
      const cache = this.newGlobalCache(count + frames);
      let hidden = await this.prefill(rows, count, prefixRows, cache);
      const sampler = this.newSampler(params, rng);
      for (let f = 0; f < frames; f++) {
        const [goOn, codes] = await this.frame(hidden, sampler);
        if (!goOn) break;
        sampler.observe(codes);
        // The codec (in its worker) decodes this frame while the global step appends it.
        const decoding = this.decodeFrame(codes);
        if (f + 1 < frames) {
          const row = new BigInt64Array(lm.n_vq + 1);
          row[0] = BigInt(lm.audio_assistant_slot_id);
          for (let k = 0; k < lm.n_vq; k++) row[1 + k] = BigInt(codes[k]);
          hidden = await this.globalPass(row, 1, cache);
        }
        yield { pcm: await decoding, codes, isLast: false, segment: s, isPause: false };
      }
      if (s + 1 < segments.length) {
        const pause = Math.round(pauseAfterChunkS(segment.text) * this.description.codec.sample_rate);
        yield { pcm: new Float32Array(2 * pause), codes: new Int32Array(0), isLast: false, segment: s, isPause: true };
      }
    }
    yield { pcm: new Float32Array(0), codes: new Int32Array(0), isLast: true, segment: segments.length - 1,
      isPause: false };
  }
}

/** tts_core/engine/pacing.default_max_frames: ~8 frames per text token plus 2 s, at most 30 s. */
export function defaultMaxFrames(numTextTokens, cap = 375) {
  return Math.max(1, Math.min(cap, 25 + 8 * Math.max(1, numTextTokens)));
}

/** CodecStream's interface over codec_worker.js: decode(codes) -> Promise of pcm, in order. */
export class CodecWorker {
  static async start(setup, model, codec) {
    const worker = new Worker(new URL('./codec_worker.js', import.meta.url), { type: 'module' });
    const codecWorker = new CodecWorker(worker);
    await codecWorker.call({ type: 'init', ortUrl: setup.ortUrl, wasmPaths: setup.wasmPaths, model, codec });
    return codecWorker;
  }

  constructor(worker) {
    this.worker = worker;
    this.next = 0;
    this.waiting = new Map();   // id -> {resolve, reject}
    worker.onmessage = ({ data }) => {
      const id = data.type === 'ready' ? 'init' : data.id;
      const pending = this.waiting.get(id);
      if (!pending) return;
      this.waiting.delete(id);
      if (data.type === 'error') pending.reject(new Error(`codec worker: ${data.message}`));
      else pending.resolve(data.pcm);
    };
    worker.onerror = (event) => {
      for (const { reject } of this.waiting.values()) reject(new Error(`codec worker: ${event.message}`));
      this.waiting.clear();
    };
  }

  call(message) {
    const id = message.type === 'init' ? 'init' : this.next++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.worker.postMessage({ ...message, id });
    });
  }

  reset() { this.worker.postMessage({ type: 'reset' }); }

  decode(codes) { return this.call({ type: 'decode', codes: Int32Array.from(codes) }); }

  terminate() { this.worker.terminate(); }
}
