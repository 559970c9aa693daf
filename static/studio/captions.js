// Captions from the stream's segment events ({type: 'speech.segment', index, text, start, end},
// seconds of output audio): the segment heard at a time, and SRT / WebVTT files.

/** The segment playing at `t` seconds (null before the first or in a pause). */
export function segmentAt(segments, t) {
  for (const s of segments) if (t >= s.start && t < s.end) return s;
  return null;
}

function stamp(seconds, separator) {
  const ms = Math.max(0, Math.round(seconds * 1000));
  const h = Math.floor(ms / 3600000), m = Math.floor(ms / 60000) % 60, s = Math.floor(ms / 1000) % 60;
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  return `${pad(h)}:${pad(m)}:${pad(s)}${separator}${pad(ms % 1000, 3)}`;
}

const clean = (text) => String(text).replace(/\s+/g, ' ').replace(/-->/g, '→').trim();

export function toSrt(segments) {
  return segments.map((s, i) => `${i + 1}\n${stamp(s.start, ',')} --> ${stamp(s.end, ',')}\n${clean(s.text)}\n`)
    .join('\n');
}

export function toVtt(segments) {
  const cues = segments.map((s) => `${stamp(s.start, '.')} --> ${stamp(s.end, '.')}\n${clean(s.text)}\n`);
  return ['WEBVTT\n', ...cues].join('\n');
}
