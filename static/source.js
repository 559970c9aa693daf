// Where the player's audio comes from. Every source is an async iterator of messages:
//   {type: 'start', rate, channels, requestId, estimatedS}   before any audio
//   {type: 'pcm', data}     interleaved float32 at `rate`, `channels` wide (whole frames)
//   {type: 'event', event}  a caption event (docs/PROTOCOL.md §2.4) or speech.done
//   {type: 'read', bytes}   (fetch only) one network read, for the stats
//   {type: 'end', trailingBytes}
// and throws on failure (an AbortError when stopped).
//
// fetchSource: POST /api/tts/stream, framed with events when the server supports it (a server that
// refuses the `framing` field is asked again without it, once per page). PushSource: the parent page
// posts the audio itself (docs/PROTOCOL.md §3.2), e.g. from Gradio events.

import { FrameParser, RawParser } from './framing.js';

let serverFrames = true;   // until a server refuses "framing": "events"

/** The readable message of an error response (OpenAI's error shape), with the field it names. */
export async function errorMessage(resp) {
  try {
    const body = await resp.json();
    const e = body.error || {};
    const field = e.param ? ` (field: ${e.param})` : '';
    const error = new Error(`${e.message || resp.statusText}${field}`);
    error.param = e.param || null;
    return error;
  } catch (_) {
    return new Error(`the server answered ${resp.status} ${resp.statusText}`);
  }
}

async function post(url, body, signal) {
  return fetch(url, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, cache: 'no-store',
    body: JSON.stringify(body), signal,
  });
}

/**
 * @param {string} url  the stream route
 * @param {object} request  its JSON body
 * @param {{signal: AbortSignal, beforeRead?: () => Promise<void>}} options  beforeRead runs while the
 *   request is in flight (the player resumes its audio context there)
 */
export async function* fetchSource(url, request, { signal, beforeRead }) {
  let framed = serverFrames;
  const pending = post(url, framed ? { ...request, framing: 'events' } : request, signal);
  if (beforeRead) await beforeRead();
  let resp = await pending;
  if (!resp.ok && framed) {
    const error = await errorMessage(resp);
    if (error.param !== 'framing') throw error;
    serverFrames = framed = false;   // an older server: raw PCM, no captions
    resp = await post(url, request, signal);
  }
  if (!resp.ok) throw await errorMessage(resp);

  const rate = Number(resp.headers.get('X-Sample-Rate')) || 48000;
  const channels = Number(resp.headers.get('X-Channels')) || 2;
  const format = resp.headers.get('X-Sample-Format') || 'f32le';
  const estimate = Number(resp.headers.get('X-Estimated-Duration'));
  if (format !== 'f32le' || channels < 1 || channels > 2) {
    throw new Error(`unsupported stream format ${format} × ${channels} channels`);
  }
  yield {
    type: 'start', rate, channels, format, framed, requestId: resp.headers.get('X-Request-Id'),
    estimatedS: estimate > 0 ? estimate : null,
  };
  const parser = framed ? new FrameParser() : new RawParser(4 * channels);
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
      yield { type: 'read', bytes: step.value.byteLength };
      for (const item of parser.push(step.value)) {
        yield item.kind === 'pcm' ? { type: 'pcm', data: item.data } : { type: 'event', event: item.event };
      }
    }
  } finally {
    reader.releaseLock();
  }
  yield { type: 'end', trailingBytes: parser.pendingBytes };
}

/**
 * Audio posted by the parent page (docs/PROTOCOL.md §3.2): deliver() each `tts:*` message of one request id.
 * Iterating yields them as source messages, waiting while none is queued.
 */
export class PushSource {
  constructor(requestId) {
    this.requestId = requestId;
    this.queue = [];
    this.wake = null;
    this.done = false;
  }

  deliver(m) {
    if (this.done) return;
    let item;
    if (m.type === 'tts:start') {
      item = { type: 'start', rate: m.sampleRate || 48000, channels: m.channels || 2, format: 'f32le',
        requestId: m.requestId, estimatedS: m.estimatedDuration > 0 ? m.estimatedDuration : null, framed: true };
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
    for (;;) {
      while (this.queue.length === 0) await new Promise((resolve) => { this.wake = resolve; });
      const item = this.queue.shift();
      if (item.type === 'error') throw item.error;
      yield item;
      if (item.type === 'end') return;
    }
  }
}
