// Byte streams of POST /api/tts/stream -> PCM and events (docs/PROTOCOL.md §2.3).
//
// Raw (no `framing`): little-endian float32, interleaved, whole frames only. Framed (`"framing":
// "events"`): frames of [uint32 LE payload length L][1 byte kind][L bytes]; kind 0 = PCM as above,
// kind 1 = a UTF-8 JSON event. Network reads split both at arbitrary bytes, so each parser keeps the
// incomplete rest for the next read.

export const KIND_PCM = 0;
export const KIND_EVENT = 1;
export const KIND_PROGRESS = 2;   // f64 LE: the chunk's server time since the request (transports.py)
const HEADER = 5;
const MAX_PAYLOAD = 64 * 1024 * 1024;   // a corrupt length must not make us wait for gigabytes

/** `rest` (bytes kept from the last read) followed by `bytes`. */
export function joined(rest, bytes) {
  if (!rest || rest.length === 0) return bytes;
  const all = new Uint8Array(rest.length + bytes.length);
  all.set(rest);
  all.set(bytes, rest.length);
  return all;
}

// A fresh, 4-byte-aligned copy (a network read may start at any offset).
function floats(bytes, start, end) {
  return new Float32Array(bytes.buffer.slice(bytes.byteOffset + start, bytes.byteOffset + end));
}

/** Raw interleaved float32: push(bytes) -> [{kind: 'pcm', data}] of whole frames (frameBytes each). */
export class RawParser {
  constructor(frameBytes) {
    this.frameBytes = frameBytes;
    this.rest = null;
  }

  push(value) {
    const bytes = joined(this.rest, value);
    const usable = bytes.length - (bytes.length % this.frameBytes);
    this.rest = usable < bytes.length ? bytes.slice(usable) : null;
    return usable === 0 ? [] : [{ kind: 'pcm', data: floats(bytes, 0, usable) }];
  }

  get pendingBytes() { return this.rest ? this.rest.length : 0; }
}

/**
 * Framed stream: push(bytes) -> [{kind: 'pcm', data} | {kind: 'event', event}] in order.
 * With `{bytes: true}` the audio frames come as {kind: 'bytes', data: Uint8Array}, undecoded: the
 * transport's bytes (16-bit PCM, a piece of an Ogg/Opus stream), for a decoder of transport.js.
 */
export class FrameParser {
  constructor({ bytes = false } = {}) {
    this.rest = null;
    this.bytes = bytes;
    this.decoder = new TextDecoder();
  }

  push(value) {
    const bytes = joined(this.rest, value);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const out = [];
    let at = 0;
    while (bytes.length - at >= HEADER) {
      const length = view.getUint32(at, true);
      const kind = bytes[at + 4];
      if (length > MAX_PAYLOAD) throw new Error(`the stream is corrupt (a frame of ${length} bytes)`);
      if (bytes.length - at - HEADER < length) break;
      const start = at + HEADER, end = start + length;
      if (kind === KIND_PCM && this.bytes) {
        if (length > 0) out.push({ kind: 'bytes', data: bytes.slice(start, end) });
      } else if (kind === KIND_PCM) {
        if (length % 8 !== 0) throw new Error(`the stream is corrupt (PCM frame of ${length} bytes)`);
        if (length > 0) out.push({ kind: 'pcm', data: floats(bytes, start, end) });
      } else if (kind === KIND_EVENT) {
        out.push({ kind: 'event', event: JSON.parse(this.decoder.decode(bytes.subarray(start, end))) });
      } else if (kind === KIND_PROGRESS && length === 8) {
        out.push({ kind: 'progress', serverS: view.getFloat64(start, true) });
      }   // other kinds: a later server's additions, skipped
      at = end;
    }
    this.rest = at < bytes.length ? bytes.slice(at) : null;
    return out;
  }

  get pendingBytes() { return this.rest ? this.rest.length : 0; }
}

/** Mono float32 -> interleaved stereo (both channels the same). */
export function upmix(mono) {
  const out = new Float32Array(mono.length * 2);
  for (let i = 0; i < mono.length; i++) { out[2 * i] = mono[i]; out[2 * i + 1] = mono[i]; }
  return out;
}
