// One Ogg/Opus stream (an utterance) -> interleaved float32 stereo at 48 kHz, through the platform's
// decoder (WebCodecs AudioDecoder, codec "opus", the OpusHead as its description).
//
// The stream is one encoder's output, so it is decoded by one decoder from its first packet to its
// last: chunk joins of the server are invisible here. Length is made exact as RFC 7845 says: the
// first `preSkip` samples are dropped, and the last page's granule position says where the audio
// ends (the last packet is padded to 20 ms). Chromium's decoder drops the pre-skip itself when it
// is given the OpusHead, others may not: every packet's nominal length (its TOC byte) is compared
// with what the decoder gave back for it, and only what the decoder did not drop is dropped here.
//
// A decoder takes a while to start (the codec's set-up, then its first output), so one is made
// ahead (warmOpusDecoder(), when a stream is asked for): configured without the OpusHead, it
// starts while the server makes the first audio, and the stream adopts it if its OpusHead says
// what a decoder assumes without one (stereo, mapping family 0, no output gain). Such a decoder
// does not know the pre-skip: the accounting above drops it here.

import { OggDemuxer, opusPacketSamples, parseOpusHead } from './ogg.js';

const RATE = 48000;
const STALL_MS = 200;   // a decoder that owes outputs but goes quiet this long has swallowed a packet

let spare = null;   // {decoder, handlers}: configured ahead of the stream that adopts it
let support = null;
/** Whether this browser can decode 48 kHz stereo Opus with WebCodecs (cached). */
export function opusSupported() {
  if (support) return support;
  support = (async () => {
    if (typeof window.AudioDecoder !== 'function' || typeof window.EncodedAudioChunk !== 'function') return false;
    try {
      const r = await AudioDecoder.isConfigSupported({ codec: 'opus', sampleRate: RATE, numberOfChannels: 2 });
      return !!r.supported;
    } catch (_) {
      return false;
    }
  })();
  return support;
}

/** An AudioDecoder whose output and error go where `handlers` says (set by the stream that adopts it). */
function platformDecoder(description = null) {
  const handlers = { output: (audio) => audio.close(), error: () => {} };
  const decoder = new AudioDecoder({ output: (audio) => handlers.output(audio), error: (e) => handlers.error(e) });
  decoder.configure({ codec: 'opus', sampleRate: RATE, numberOfChannels: 2, ...(description ? { description } : {}) });
  return { decoder, handlers };
}

/** Start a decoder now for the next Opus stream (a no-op where one waits already or WebCodecs is missing). */
export function warmOpusDecoder() {
  if (spare && spare.decoder.state === 'configured') return;
  if (typeof window.AudioDecoder !== 'function' || typeof window.EncodedAudioChunk !== 'function') return;
  try {
    spare = platformDecoder();
  } catch (_) {
    spare = null;   // the stream configures its own, and reports what fails there
  }
}

/** The spare decoder, if one is ready and decodes a stream with this OpusHead as it would with it. */
function adoptSpare(head) {
  const taken = spare;
  spare = null;
  if (taken && taken.decoder.state === 'configured' && head.channels === 2 && head.family === 0 && head.gain === 0) {
    return taken;
  }
  if (taken && taken.decoder.state !== 'closed') taken.decoder.close();
  return null;
}

export class OpusStreamDecoder {
  constructor() {
    this.demux = new OggDemuxer();
    this.head = null;
    this.decoder = null;
    this.warm = false;         // decoding with a decoder started ahead (warmOpusDecoder)
    this.headers = 0;          // header packets seen: OpusHead, then OpusTags
    this.packets = 0;          // audio packets seen
    this.position = 0;         // granule position (samples, pre-skip included) after the packets submitted
    this.limit = Infinity;     // samples (after pre-skip) the stream holds, once the last page told it
    this.toSkip = 0;           // pre-skip samples still to drop here
    this.emitted = 0;          // samples handed out
    this.owed = [];            // nominal sample counts of packets submitted and not yet output
    this.ready = [];           // decoded interleaved pieces not yet handed out
    this.waiters = [];
    this.error = null;
    this.lastOutput = 0;
  }

  /** Network bytes in -> the audio decoded from them so far (resolves once the decoder has caught up). */
  async push(bytes) {
    for (const p of this.demux.push(bytes)) this.packet(p);
    await this.caughtUp();
    return this.take();
  }

  /** The stream ended: flush the decoder, return the rest, release it. */
  async end() {
    if (this.decoder && this.decoder.state === 'configured') {
      await this.decoder.flush();
      this.owed = [];
    }
    this.check();
    const out = this.take();
    this.close();
    return out;
  }

  close() {
    if (this.decoder && this.decoder.state !== 'closed') this.decoder.close();
  }

  get pendingBytes() { return this.demux.pendingBytes; }
  get samples() { return this.emitted; }

  packet({ data, granule, eos }) {
    if (this.headers === 0) {
      this.head = parseOpusHead(data);
      if (!this.head) throw new Error('the Opus stream is corrupt (it does not begin with an OpusHead)');
      if (this.head.channels !== 2) throw new Error(`the Opus stream has ${this.head.channels} channels, not 2`);
      this.toSkip = this.head.preSkip;
      this.configure(data, adoptSpare(this.head));
      this.headers = 1;
      return;
    }
    if (this.headers === 1) { this.headers = 2; return; }   // OpusTags: nothing to play
    const n = opusPacketSamples(data);
    this.packets += 1;
    this.decoder.decode(new EncodedAudioChunk({
      type: 'key', timestamp: Math.round((this.position * 1e6) / RATE), duration: Math.round((n * 1e6) / RATE), data }));
    this.position += n;
    this.owed.push(n);
    // The server's streams begin at granule 0 (RFC 7845 allows a later start; not produced here).
    if (eos && granule !== null) this.limit = Math.max(0, granule - this.head.preSkip);
  }

  /** Decode with `warm` (a spare, configured without the OpusHead) or a new decoder given it. */
  configure(description, warm = null) {
    const { decoder, handlers } = warm || platformDecoder(description);
    handlers.output = (audio) => this.output(audio);
    handlers.error = (e) => { this.error = new Error(`the Opus decoder failed (${e.message || e})`); this.wake(); };
    this.decoder = decoder;
    this.warm = !!warm;
  }

  output(audio) {
    try {
      const frames = audio.numberOfFrames, nominal = this.owed.length ? this.owed.shift() : frames;
      // What the decoder dropped of this packet counts against the pre-skip.
      this.toSkip = Math.max(0, this.toSkip - Math.max(0, nominal - frames));
      const skip = Math.min(this.toSkip, frames);
      this.toSkip -= skip;
      const keep = Math.max(0, Math.min(frames - skip, this.limit - this.emitted));
      if (keep > 0) {
        const all = interleaved(audio);
        this.ready.push(all.subarray(2 * skip, 2 * (skip + keep)));
        this.emitted += keep;
      }
    } finally {
      audio.close();
    }
    this.lastOutput = performance.now();
    this.wake();
  }

  wake() {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  check() {
    if (this.error) throw this.error;
  }

  async caughtUp() {
    const started = performance.now();
    while (this.owed.length > 0 && !this.error) {
      const quiet = performance.now() - Math.max(started, this.lastOutput);
      if (quiet > STALL_MS && this.decoder.decodeQueueSize === 0) { this.owed = []; break; }
      await new Promise((resolve) => { this.waiters.push(resolve); setTimeout(resolve, STALL_MS); });
    }
    this.check();
  }

  take() {
    const out = this.ready;
    this.ready = [];
    return out;
  }
}

function interleaved(audio) {
  const frames = audio.numberOfFrames, channels = audio.numberOfChannels;
  if (audio.format === 'f32') {   // interleaved already
    const out = new Float32Array(frames * channels);
    audio.copyTo(out, { planeIndex: 0, format: 'f32' });
    return channels === 2 ? out : toStereo(out);
  }
  const planes = [];   // planar (f32-planar, or converted to it)
  for (let c = 0; c < channels; c++) {
    const plane = new Float32Array(frames);
    audio.copyTo(plane, { planeIndex: c, format: 'f32-planar' });
    planes.push(plane);
  }
  const right = planes[1] || planes[0], out = new Float32Array(frames * 2);
  for (let i = 0; i < frames; i++) { out[2 * i] = planes[0][i]; out[2 * i + 1] = right[i]; }
  return out;
}

function toStereo(mono) {
  const out = new Float32Array(mono.length * 2);
  for (let i = 0; i < mono.length; i++) { out[2 * i] = mono[i]; out[2 * i + 1] = mono[i]; }
  return out;
}
