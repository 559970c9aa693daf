// The codec decoder in a worker of its own (the torch engine runs its codec on its own thread too):
// while it decodes frame f, the page's thread runs the LM's global step for frame f. Messages:
// {type: 'init', ortUrl, wasmPaths, model, codec} -> {type: 'ready'}; {type: 'reset'};
// {type: 'decode', id, codes} -> {type: 'pcm', id, pcm}; any failure -> {type: 'error', id, message}.

import { CodecStream } from './codec_stream.js';

let stream = null;
let queue = Promise.resolve();   // one message at a time, in order

self.onmessage = ({ data: message }) => {
  queue = queue.then(() => handle(message)).catch((error) => {
    self.postMessage({ type: 'error', id: message.id ?? null, message: String(error?.message ?? error) });
  });
};

async function handle(message) {
  if (message.type === 'init') {
    const ort = await import(message.ortUrl);
    ort.env.wasm.numThreads = 1;   // the page's thread keeps the other cores
    ort.env.wasm.wasmPaths = message.wasmPaths;
    const session = await ort.InferenceSession.create(new Uint8Array(message.model),
      { executionProviders: ['wasm'], graphOptimizationLevel: 'all' });
    stream = new CodecStream(ort, session, message.codec);
    self.postMessage({ type: 'ready' });
  } else if (message.type === 'reset') {
    stream.reset();
  } else if (message.type === 'decode') {
    const pcm = await stream.decode(message.codes);
    self.postMessage({ type: 'pcm', id: message.id, pcm }, [pcm.buffer]);
  } else {
    throw new Error(`codec worker: unknown message ${JSON.stringify(message.type)}`);
  }
}
