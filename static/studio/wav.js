// 16-bit PCM WAV in the browser: for audio the server does not keep (a pushed source) and for
// replaying a kept result fetched back from the server.

function int16(x) {   // clip, then round half to even, as numpy does on the server
  const v = Math.max(-1, Math.min(1, x || 0)) * 32767;
  const r = Math.round(v);
  return Math.abs(v % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** Interleaved float32 chunks -> a 16-bit WAV Blob (same rounding as the server's encoder). */
export function wav16Blob(chunks, rate, channels = 2) {
  const samples = chunks.reduce((n, c) => n + c.length, 0);
  const data = new DataView(new ArrayBuffer(44 + samples * 2));
  const text = (off, s) => { for (let i = 0; i < s.length; i++) data.setUint8(off + i, s.charCodeAt(i)); };
  text(0, 'RIFF'); data.setUint32(4, 36 + samples * 2, true); text(8, 'WAVE');
  text(12, 'fmt '); data.setUint32(16, 16, true); data.setUint16(20, 1, true);
  data.setUint16(22, channels, true); data.setUint32(24, rate, true);
  data.setUint32(28, rate * channels * 2, true); data.setUint16(32, channels * 2, true);
  data.setUint16(34, 16, true);
  text(36, 'data'); data.setUint32(40, samples * 2, true);
  let at = 44;
  for (const chunk of chunks) for (let i = 0; i < chunk.length; i++, at += 2) data.setInt16(at, int16(chunk[i]), true);
  return new Blob([data.buffer], { type: 'audio/wav' });
}

/** A 16-bit PCM WAV (ArrayBuffer) -> {rate, channels, data: interleaved Float32Array}. */
export function decodeWav16(buffer) {
  const view = new DataView(buffer);
  const tag = (off) => String.fromCharCode(...new Uint8Array(buffer, off, 4));
  if (tag(0) !== 'RIFF' || tag(8) !== 'WAVE') throw new Error('not a WAV file');
  let at = 12, rate = 0, channels = 0, bits = 0;
  while (at + 8 <= view.byteLength) {
    const id = tag(at), size = view.getUint32(at + 4, true), body = at + 8;
    if (id === 'fmt ') {
      channels = view.getUint16(body + 2, true); rate = view.getUint32(body + 4, true);
      bits = view.getUint16(body + 14, true);
    } else if (id === 'data') {
      if (bits !== 16) throw new Error(`a ${bits}-bit WAV, expected 16-bit`);
      const n = Math.min(size, view.byteLength - body) >> 1;
      const data = new Float32Array(n);
      for (let i = 0; i < n; i++) data[i] = view.getInt16(body + 2 * i, true) / 32767;
      return { rate, channels, data };
    }
    at = body + size + (size & 1);
  }
  throw new Error('the WAV file has no data');
}
