// WAV file from interleaved float32 chunks: 32-bit IEEE float, so the download is bit-exact.
'use strict';

window.mossWav = {
  floatWavBlob(chunks, rate, channels) {
    const frames = chunks.reduce((n, c) => n + c.length, 0) / channels;
    const dataBytes = frames * channels * 4;
    const h = new DataView(new ArrayBuffer(58));   // RIFF 12 + fmt 26 + fact 12 + data header 8
    const text = (off, s) => { for (let i = 0; i < s.length; i++) h.setUint8(off + i, s.charCodeAt(i)); };
    text(0, 'RIFF'); h.setUint32(4, 50 + dataBytes, true); text(8, 'WAVE');
    text(12, 'fmt '); h.setUint32(16, 18, true);
    h.setUint16(20, 3, true);                       // WAVE_FORMAT_IEEE_FLOAT
    h.setUint16(22, channels, true); h.setUint32(24, rate, true);
    h.setUint32(28, rate * channels * 4, true); h.setUint16(32, channels * 4, true);
    h.setUint16(34, 32, true); h.setUint16(36, 0, true);   // bits per sample, no extension
    text(38, 'fact'); h.setUint32(42, 4, true); h.setUint32(46, frames, true);
    text(50, 'data'); h.setUint32(54, dataBytes, true);
    return new Blob([h.buffer, ...chunks], { type: 'audio/wav' });   // Float32Arrays: little-endian
  },
};
