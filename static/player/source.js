// Where the player's audio comes from. Every source is an async iterator of messages:
//   {type: 'start', rate, channels, requestId, estimatedS, transport, bitRate}   before any audio
//   {type: 'pcm', data}     interleaved float32 at `rate`, `channels` wide (whole frames), decoded
//                           from the wire's transport (transport.js: Opus or 16-bit)
//   {type: 'event', event}  a caption event (docs/PROTOCOL.md §2.4) or speech.done
//   {type: 'read', bytes, at}  (fetch only) one network read (performance.now()), for the stats
//   {type: 'end', trailingBytes}
// and throws on failure (an AbortError when stopped).
//
// StreamSource: POST /api/tts/stream (event frames, docs/PROTOCOL.md §2), in the transport this
// browser decodes. PushSource: the parent page posts the audio itself (docs/PROTOCOL.md §3.2), e.g.
// from Gradio events. memorySource: audio already here (a replay). A source with `abort()` is
// cancelled by StreamPlayer.stop().

import { FrameParser } from './framing.js';
import { chooseTransport, FORMATS, makeDecoder, warmDecoder } from './transport.js';

/** The readable message of an error response (OpenAI's error shape), with the field it names. */
export async function errorMessage(resp) {
  try {
    const body = await resp.json();
    const e = body.error || {};
    const error = new Error(e.message || resp.statusText);
    error.param = e.param || null;
    return error;
  } catch (_) {
    return new Error(`the server answered ${resp.status} ${resp.statusText}`);
  }
}

/**
 * The stream route's answer to `request`, asked for when iteration begins.
 * @param {string} url  the stream route (POST /api/tts/stream, relative to the page or absolute)
 * @param {object} request  its JSON body (docs/PROTOCOL.md §2.1), without `transport`
 * @param {{transport?: string}} options  transport: 's16' forces 16-bit PCM (tests, benchmarks);
 *   otherwise Opus where this browser's WebCodecs decodes it (transport.js)
 */
export class StreamSource {
  constructor(url, request, { transport = null } = {}) {
    this.url = new URL(url, location.href).href;
    this.request = request;
    this.transport = chooseTransport(transport);   // started now: cached after the first
    this.controller = new AbortController();
  }

  /** Cancel the request: the server sees the disconnect and stops generating. */
  abort() { this.controller.abort(); }

  async* [Symbol.asyncIterator]() {
    yield* fetchSource(this.url, this.request, { signal: this.controller.signal, transport: await this.transport });
  }
}

async function* fetchSource(url, request, { signal, transport }) {
  warmDecoder(transport);   // its start-up overlaps the server's first chunk
  const resp = await fetch(url, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, cache: 'no-store',
    body: JSON.stringify({ ...request, transport }), signal,
  });
  if (!resp.ok) throw await errorMessage(resp);

  const rate = Number(resp.headers.get('X-Sample-Rate')) || 48000;
  const channels = Number(resp.headers.get('X-Channels')) || 2;
  const format = resp.headers.get('X-Sample-Format');
  const estimate = Number(resp.headers.get('X-Estimated-Duration'));
  if (!FORMATS[format] || channels !== 2) throw new Error(`unsupported stream format ${format} × ${channels} channels`);
  const decoder = makeDecoder(format);
  yield {
    type: 'start', rate, channels, format, transport: FORMATS[format],
    bitRate: Number(resp.headers.get('X-Bit-Rate')) || null, requestId: resp.headers.get('X-Request-Id'),
    estimatedS: estimate > 0 ? estimate : null,
  };
  const parser = new FrameParser();
  const reader = resp.body.getReader();
  try {
    for (;;) {
      let step;
      try {
        step = await reader.read();
      } catch (err) {
        if (err.name === 'AbortError') throw err;
        throw new Error(`the stream broke off (${err.message})`);
      }
      if (step.done) break;
      yield { type: 'read', bytes: step.value.byteLength, at: performance.now() };
      for (const item of parser.push(step.value)) {
        if (item.kind === 'event') { yield { type: 'event', event: item.event }; continue; }
        const data = joinPcm(await decoder.push(item.data));   // one arrival per read
        if (data) yield { type: 'pcm', data };
      }
    }
    const rest = joinPcm(await decoder.end());
    if (rest) yield { type: 'pcm', data: rest };
  } finally {
    decoder.close();
    reader.releaseLock();
  }
  yield { type: 'end', trailingBytes: parser.pendingBytes + decoder.pendingBytes };
}

function joinPcm(pieces) {
  if (pieces.length <= 1) return pieces[0] || null;
  const all = new Float32Array(pieces.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of pieces) { all.set(p, at); at += p.length; }
  return all;
}

/**
 * Audio posted by the parent page (docs/PROTOCOL.md §3.2): deliver() each `tts:*` message of one request id.
 * Iterating yields them as source messages, waiting while none is queued.
 */
export class PushSource {
  constructor(requestId) {
    this.requestId = requestId;
    this.decoder = null;   // the relay's Opus stream (ZeroGPU), decoded here as the fetch source does
    this.queue = [];
    this.wake = null;
    this.done = false;
  }

  deliver(m) {
    if (this.done) return;
    let item;
    if (m.type === 'tts:start') {
      const opus = m.format === 'opus';
      item = { type: 'start', rate: m.sampleRate || 48000, channels: m.channels || 2, format: opus ? 'opus' : 'f32le',
        transport: opus ? 'opus' : 'f32', bitRate: m.bitRate || null,
        requestId: m.requestId, estimatedS: m.estimatedDuration > 0 ? m.estimatedDuration : null };
      if (opus) this.decoder = makeDecoder('opus');
    } else if (m.type === 'tts:pcm' && m.bytes) {
      if (!this.decoder) return;
      item = { type: 'bytes', data: m.bytes instanceof Uint8Array ? m.bytes : new Uint8Array(m.bytes) };
    } else if (m.type === 'tts:pcm') {
      const data = m.data instanceof Float32Array ? m.data : new Float32Array(m.data);
      item = { type: 'pcm', data };
    } else if (m.type === 'tts:event') {
      item = { type: 'event', event: m.event };
    } else if (m.type === 'tts:end') {
      item = { type: 'end', trailingBytes: 0 };
    } else if (m.type === 'tts:error') {
      item = { type: 'error', error: new Error(m.message || 'the audio source failed') };
    } else {
      return;
    }
    this.queue.push(item);
    if (item.type === 'end' || item.type === 'error') this.done = true;
    if (this.wake) { this.wake(); this.wake = null; }
  }

  abort() {
    const error = new Error('stopped');
    error.name = 'AbortError';
    this.queue.push({ type: 'error', error });
    this.done = true;
    if (this.wake) { this.wake(); this.wake = null; }
  }

  async* [Symbol.asyncIterator]() {
    try {
      for (;;) {
        while (this.queue.length === 0) await new Promise((resolve) => { this.wake = resolve; });
        const item = this.queue.shift();
        if (item.type === 'error') throw item.error;
        if (item.type === 'bytes') {
          const data = joinPcm(await this.decoder.push(item.data));
          if (data) yield { type: 'pcm', data };
          continue;
        }
        if (item.type === 'end' && this.decoder) {
          const rest = joinPcm(await this.decoder.end());
          if (rest) yield { type: 'pcm', data: rest };
          item.trailingBytes = this.decoder.pendingBytes;
        }
        yield item;
        if (item.type === 'end') return;
      }
    } finally {
      if (this.decoder) this.decoder.close();
    }
  }
}

/** Audio already in memory (a replay): interleaved stereo float32 `pcm` at `rate`. */
export async function* memorySource(pcm, rate = 48000) {
  yield { type: 'start', rate, channels: 2, requestId: null, estimatedS: null, transport: null };
  yield { type: 'pcm', data: pcm };
  yield { type: 'end', trailingBytes: 0 };
}
