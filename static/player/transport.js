// The stream route's wire formats (`"transport"`, studio/delivery/transports.py) -> interleaved float32.
//
//   opus (X-Sample-Format opus)   one Ogg/Opus stream per utterance (opus.js, WebCodecs): the default
//   s16  (s16le)                  2 bytes a sample, for a browser whose WebCodecs cannot decode Opus
//
// Every decoder: `await push(bytes)` -> [Float32Array interleaved stereo] decoded so far,
// `await end()` -> the rest, `pendingBytes`, `close()`. Bytes may be cut anywhere.

import { OpusStreamDecoder, opusSupported, warmOpusDecoder } from './opus.js';

export const FORMATS = { s16le: 's16', opus: 'opus' };

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

/** A decoder for the response's X-Sample-Format (both stereo). */
export function makeDecoder(sampleFormat) {
  const transport = FORMATS[sampleFormat];
  if (transport === 's16') return new S16Decoder();
  if (transport === 'opus') return new OpusStreamDecoder();
  throw new Error(`unsupported stream format ${sampleFormat}`);
}

/** Start what decoding `transport` takes before its bytes come (Opus: a decoder, warmOpusDecoder). */
export function warmDecoder(transport) {
  if (transport === 'opus') warmOpusDecoder();
}

/** The transport to ask for: Opus where this browser's WebCodecs decodes it, else 16-bit PCM;
 *  `forced` (a URL's ?transport=, for tests and benchmarks) wins where it is usable. */
export async function chooseTransport(forced = null) {
  const opus = await opusSupported();
  if (forced === 's16' || !opus) return 's16';
  return 'opus';
}

/** "Opus 160 kb/s", "16-bit PCM": what the stream travels as ('' for audio pushed as float32). */
export function describe(transport, bitRate = null) {
  if (transport === 'opus') return `Opus ${Math.round((bitRate || 160000) / 1000)} kb/s`;
  return transport === 's16' ? '16-bit PCM' : '';
}
