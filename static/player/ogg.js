// An Ogg page demuxer for one logical stream (RFC 3533), fed network reads cut anywhere.
//
// push(bytes) -> the packets completed by the pages in `bytes`, in order:
//   {data: Uint8Array, granule: number|null, eos: boolean}
// `granule` is the page's granule position on the last packet that ends on that page (null on the
// others: their position is only implied), `eos` marks the stream's last page. A packet may span
// pages (lacing value 255 continues it). Page CRCs are not checked: the bytes come over TCP, and a
// corrupt structure (no capture pattern, an absurd size) is an error, not something to resync on.

import { joined } from './framing.js';

const HEADER = 27;
const MAX_PENDING = 1 << 20;   // a packet larger than this is not Opus: the stream is corrupt

export class OggDemuxer {
  constructor() {
    this.rest = null;
    this.partial = [];      // segments of a packet continued on the next page
    this.partialBytes = 0;
    this.pages = 0;
    this.ended = false;
  }

  push(value) {
    const bytes = joined(this.rest, value);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const out = [];
    let at = 0;
    while (bytes.length - at >= HEADER) {
      if (bytes[at] !== 0x4f || bytes[at + 1] !== 0x67 || bytes[at + 2] !== 0x67 || bytes[at + 3] !== 0x53) {
        throw new Error('the Opus stream is corrupt (no Ogg page where one should begin)');
      }
      const segments = bytes[at + 26];
      if (bytes.length - at < HEADER + segments) break;
      let size = 0;
      for (let i = 0; i < segments; i++) size += bytes[at + HEADER + i];
      if (bytes.length - at < HEADER + segments + size) break;
      const flags = bytes[at + 5];
      // 64-bit granule; -1 (all ones) means no packet ends on this page
      const lo = view.getUint32(at + 6, true), hi = view.getInt32(at + 10, true);
      const granule = hi === -1 && lo === 0xffffffff ? null : hi * 4294967296 + lo;
      if (!(flags & 1)) { this.partial = []; this.partialBytes = 0; }   // not a continuation: drop any orphan
      let body = at + HEADER + segments, start = body;
      const ended = [];
      for (let i = 0; i < segments; i++) {
        const lace = bytes[at + HEADER + i];
        body += lace;
        if (lace < 255) {   // a packet ends here
          this.partial.push(bytes.subarray(start, body));
          ended.push(this.take());
          start = body;
        }
      }
      if (start < body) {   // continued on the next page
        this.partial.push(bytes.slice(start, body));
        this.partialBytes += body - start;
        if (this.partialBytes > MAX_PENDING) throw new Error('the Opus stream is corrupt (an oversized packet)');
      }
      ended.forEach((data, i) => out.push({ data, granule: i === ended.length - 1 ? granule : null, eos: false }));
      if (flags & 4) {
        this.ended = true;
        if (out.length) out[out.length - 1].eos = true;
      }
      this.pages += 1;
      at = body;
    }
    this.rest = at < bytes.length ? bytes.slice(at) : null;
    return out;
  }

  take() {
    const parts = this.partial;
    this.partial = []; this.partialBytes = 0;
    if (parts.length === 1) return parts[0].slice();
    const n = parts.reduce((s, p) => s + p.length, 0), data = new Uint8Array(n);
    let o = 0;
    for (const p of parts) { data.set(p, o); o += p.length; }
    return data;
  }

  get pendingBytes() { return (this.rest ? this.rest.length : 0) + this.partialBytes; }
}

/** Samples (at 48 kHz) in one Opus packet, from its TOC byte (RFC 6716 section 3.1). */
export function opusPacketSamples(packet) {
  if (!packet.length) return 0;
  const toc = packet[0], config = toc >> 3;
  let frame;   // samples per frame at 48 kHz
  if (config < 12) frame = [480, 960, 1920, 2880][config & 3];          // SILK
  else if (config < 16) frame = [480, 960][config & 1];                 // hybrid
  else frame = [120, 240, 480, 960][config & 3];                        // CELT
  const code = toc & 3;
  const frames = code === 0 ? 1 : code === 3 ? (packet.length > 1 ? packet[1] & 0x3f : 0) : 2;
  return frame * frames;
}

/** The OpusHead packet (RFC 7845 section 5.1): {channels, preSkip, inputRate, gain (Q7.8 dB), family},
 *  or null if it is not one. */
export function parseOpusHead(packet) {
  const magic = 'OpusHead';
  if (packet.length < 19) return null;
  for (let i = 0; i < 8; i++) if (packet[i] !== magic.charCodeAt(i)) return null;
  const view = new DataView(packet.buffer, packet.byteOffset, packet.byteLength);
  return { channels: packet[9], preSkip: view.getUint16(10, true), inputRate: view.getUint32(12, true),
    gain: view.getInt16(16, true), family: packet[18] };
}
