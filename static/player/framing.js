// The body of POST /api/tts/stream -> the transport's audio bytes and events (docs/PROTOCOL.md §2.3).
//
// Frames of [uint32 LE payload length L][1 byte kind][L bytes]: kind 0 = the next bytes of the
// transport's audio (16-bit PCM, or a piece of the Ogg/Opus stream, cut anywhere), kind 1 = a
// UTF-8 JSON event. Network reads split frames at arbitrary bytes, so the parser keeps the
// incomplete rest for the next read.

export const KIND_AUDIO = 0;
export const KIND_EVENT = 1;
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

/** push(bytes) -> [{kind: 'bytes', data: Uint8Array} | {kind: 'event', event}] in order. */
export class FrameParser {
  constructor() {
    this.rest = null;
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
      if (kind === KIND_AUDIO) {
        if (length > 0) out.push({ kind: 'bytes', data: bytes.slice(start, end) });
      } else if (kind === KIND_EVENT) {
        out.push({ kind: 'event', event: JSON.parse(this.decoder.decode(bytes.subarray(start, end))) });
      } else {
        throw new Error(`the stream is corrupt (a frame of kind ${kind})`);
      }
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
