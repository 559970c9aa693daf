// The stream route's wire formats (`"transport"`, studio/delivery/transports.py) -> interleaved float32.
//
//   f32  (X-Sample-Format f32le)  4 bytes a sample, 384 kB per audio second: today's stream
//   s16  (s16le)                  2 bytes a sample, lossless for what downloads keep (16-bit)
//   opus (opus)                   one Ogg/Opus stream per utterance (opus.js, WebCodecs)
//
// Every decoder: `await push(bytes)` -> [Float32Array interleaved stereo] decoded so far,
// `await end()` -> the rest, `pendingBytes`, `close()`. Bytes may be cut anywhere.

import { RawParser } from './framing.js';
import { OpusStreamDecoder, opusSupported } from './opus.js';

/** What a transport costs on the wire, per second of 48 kHz stereo audio (bytes; Opus nominal). */
export const BYTES_PER_AUDIO_S = { f32: 48000 * 2 * 4, s16: 48000 * 2 * 2, opus: 160000 / 8 };
export const FORMATS = { f32le: 'f32', s16le: 's16', opus: 'opus' };
export const LABELS = { f32: 'float32 PCM (lossless)', s16: '16-bit PCM (lossless)', opus: 'Opus' };

class F32Decoder {
  constructor(channels) { this.parser = new RawParser(4 * channels); }
  async push(bytes) { return this.parser.push(bytes).map((item) => item.data); }
  async end() { return []; }
  get pendingBytes() { return this.parser.pendingBytes; }
  close() {}
}

class S16Decoder {
  constructor() { this.rest = null; }

  async push(value) {
    let bytes = value;
    if (this.rest) { bytes = new Uint8Array(this.rest.length + value.length); bytes.set(this.rest); bytes.set(value, this.rest.length); }
    const usable = bytes.length - (bytes.length % 4);   // whole stereo frames
    this.rest = usable < bytes.length ? bytes.slice(usable) : null;
    if (usable === 0) return [];
    const ints = new Int16Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + usable));
    const out = new Float32Array(ints.length);
    for (let i = 0; i < ints.length; i++) out[i] = ints[i] / 32767;   // the server wrote round(x * 32767)
    return [out];
  }

  async end() { return []; }
  get pendingBytes() { return this.rest ? this.rest.length : 0; }
  close() {}
}

/** A decoder for the response's X-Sample-Format (16-bit and Opus: stereo). */
export function makeDecoder(sampleFormat, channels = 2) {
  const transport = FORMATS[sampleFormat];
  if (transport === 'f32') return new F32Decoder(channels);
  if (transport === 's16') return new S16Decoder();
  if (transport === 'opus') return new OpusStreamDecoder();
  throw new Error(`unsupported stream format ${sampleFormat}`);
}

/** The transport to ask for: `wanted` unless it is Opus and this browser cannot decode it (then s16). */
export async function usable(wanted) {
  if (wanted === 'opus' && !(await opusSupported())) return 's16';
  return wanted;
}
