// The static page: loads onnxruntime-web and the model files (cached after the first visit), runs
// the engine in this tab and plays its stream through the studio's own player (StreamPlayer,
// static/player/). Exposes window.mossTTS = {ready, stream(options), info(), player}.
// URL parameters: backend=webgpu,wasm (backends to try in order; one that is not the last must pass
// the self-test), precision=fp32|int8|fp16 (default: fp16 on WebGPU, int8 on wasm), threads=N,
// codec=inline (decode in the page's thread instead of the codec's worker).

import { StreamPlayer } from '../player/stream-player.js';
import { wav16Blob } from '../studio/wav.js';
import { MossEngine, choosePrecision, hasWebGpu } from './engine.js';
import { loadFiles, loadManifest } from './loader.js';

const params = new URLSearchParams(location.search);
const RATE = 48000;
const $ = (id) => document.getElementById(id);
const base = new URL('./', location.href);
const decoder = new TextDecoder();

/** The status line and its mark (player.css `.dot`: loading, ready, playing, finished, stopped, failed). */
function setStatus(text, state = null) {
  $('status').textContent = text;
  if (state) $('dot').className = `dot ${state}`;
}

// How the last run played: its outcome and the player's figures (frames received and rendered,
// underruns, the context rate), read by the end-to-end test.
window.mossPlayback = null;

async function loadOrt(backend) {
  // The webgpu build (JSEP) also runs the wasm provider; the plain wasm build is half the download.
  const ort = await import(backend === 'webgpu' ? './ort/ort.webgpu.min.mjs' : './ort/ort.wasm.min.mjs');
  const isolated = self.crossOriginIsolated === true;   // threads need SharedArrayBuffer (COOP/COEP)
  const wanted = Number(params.get('threads')) || Math.min(4, navigator.hardwareConcurrency || 1);
  ort.env.wasm.numThreads = isolated ? wanted : 1;
  ort.env.wasm.wasmPaths = new URL('./ort/', import.meta.url).href;
  return { ort, threads: ort.env.wasm.numThreads };
}

/** The codec's own worker (wasm: it decodes while the page's thread runs the LM), unless ?codec=inline. */
function codecWorker(backend) {
  if (backend !== 'wasm' || params.get('codec') === 'inline' || typeof Worker === 'undefined') return null;
  return { ortUrl: new URL('./ort/ort.wasm.min.mjs', import.meta.url).href,
    wasmPaths: new URL('./ort/', import.meta.url).href };
}

function showProgress(what) {
  return (done, total, cached) => {
    $('progress').max = total;
    $('progress').value = done;
    setStatus(`${cached ? `Reading ${what} from this browser's cache` : `Downloading ${what}`}: `
      + `${(done / 1e6).toFixed(1)} of ${(total / 1e6).toFixed(1)} MB`);
  };
}

/**
 * The first backend of `?backend=` (default: webgpu, then wasm) that starts: a backend that is
 * not the last one left must also pass the engine's self-test, else the next one is tried. The
 * reasons a backend was passed over end up in info().fallback.
 */
async function start() {
  const manifest = await loadManifest(base);
  const json = (files, path) => JSON.parse(decoder.decode(files.get(path)));
  const common = await loadFiles(base, manifest, [manifest.graphs, manifest.tokenizer, manifest.voices,
    manifest.selftest], showProgress('the voices'));
  const graphs = json(common.files, manifest.graphs);
  const candidates = (params.get('backend') || 'webgpu,wasm').split(',').map((b) => b.trim());
  const bad = candidates.filter((b) => b !== 'webgpu' && b !== 'wasm');
  if (bad.length) throw new Error(`backend=${bad.join(',')}: use webgpu, wasm, or a list such as webgpu,wasm`);
  const fallback = [];
  for (let i = 0; i < candidates.length; i++) {
    const backend = candidates[i];
    const last = i === candidates.length - 1;
    if (backend === 'webgpu' && !(await hasWebGpu())) {
      fallback.push('webgpu: this browser offers no WebGPU adapter');
      continue;
    }
    const precision = choosePrecision(graphs, backend, params.get('precision'));
    const names = graphs.precisions[precision];
    const path = (kind) => `${manifest.models_dir}/${names[kind]}`;
    const t0 = performance.now();
    const { files, fromCache, bytes } = await loadFiles(base, manifest, graphs.speak.map(path),
      showProgress(`the ${precision} model`));
    const { ort, threads } = await loadOrt(backend);
    setStatus(`Starting the engine (${backend}, ${precision})…`);
    const models = Object.fromEntries(graphs.speak.map((kind) => [kind, files.get(path(kind))]));
    const loadEncoder = async () => (await loadFiles(base, manifest, [path('encoder')],
      showProgress('the voice encoder'))).files.get(path('encoder'));
    const engine = await MossEngine.create(ort, {
      graphs, tokenizer: json(common.files, manifest.tokenizer), voices: json(common.files, manifest.voices),
      selftest: json(common.files, manifest.selftest), models,
    }, { backend, threads, precision, loadEncoder, codecWorker: codecWorker(backend) });
    if (!last) {
      setStatus(`Checking ${backend} on this machine…`);
      const check = await engine.selfTest();
      if (!check.ok) {
        fallback.push(`${backend} ${precision}: self-test failed: ${check.reason}`);
        await engine.release();
        continue;
      }
    }
    Object.assign(engine.infoValue, { fallback, fromCache, downloadBytes: bytes, loadMs: performance.now() - t0 });
    return engine;
  }
  throw new Error(`no backend could start (${fallback.join('; ')})`);
}

async function startPage() {
  const engine = await start();
  const info = engine.info();
  $('engine-info').textContent = `Runs in this browser: ${info.backend}${info.backend === 'wasm' ? ` (${info.threads} thread${info.threads === 1 ? '' : 's'}${self.crossOriginIsolated ? '' : ', not cross-origin isolated'})` : ''}, ${info.precision}`
    + (info.fromCache ? ', model from the browser cache' : '')
    + (info.fallback.length ? ` (${info.fallback.join('; ')})` : '');
  const select = $('voice');
  for (const preset of engine.voices.presets) select.add(new Option(`${preset.name} (${preset.language})`, preset.name));
  select.value = engine.voices.default;
  $('progress').max = 1;
  $('progress').value = 1;
  setStatus('Ready', 'ready');
  $('speak').disabled = false;
  return engine;
}

const ready = startPage();
ready.catch((error) => setStatus(`Could not start: ${error.message}`, 'failed'));

window.mossTTS = {
  ready: ready.then(() => undefined),
  stream: (options) => (async function* streamed() { yield* (await ready).stream(options); })(),
  info: () => { throw new Error('mossTTS.info(): await mossTTS.ready first'); },
};
ready.then((engine) => {
  window.mossTTS.info = () => engine.info();
  window.mossTTS.encodeClip = (channels) => engine.encodeClip(channels);
  window.mossTTS.stats = () => ({ ...engine.stats });   // ms in each graph since load (the bench reads it)
  window.mossTTS.selfTest = () => engine.selfTest();
});

// ---- cloning: a clip of the visitor's, encoded in the tab ------------------------------------------

let cloned = null;   // Int32Array codes of the visitor's clip (frames x 16)

async function cloneFromFile(file) {
  const engine = await ready;
  setStatus('Reading the clip…');
  try {
    // decodeAudioData resamples to the context's rate: 48 kHz, what the codec takes.
    const decoded = await new OfflineAudioContext(2, 1, RATE).decodeAudioData(await file.arrayBuffer());
    const channels = [decoded.getChannelData(0), decoded.getChannelData(decoded.numberOfChannels > 1 ? 1 : 0)];
    setStatus('Encoding the clip…');
    cloned = await engine.encodeClip(channels);
    window.mossClone = { codes: Array.from(cloned), frames: cloned.length / 16 };
    const select = $('voice');
    if (![...select.options].some((o) => o.value === CLONE)) select.add(new Option('Your clip', CLONE));
    select.value = CLONE;
    setStatus(`Voice ready: ${(cloned.length / 16 * 0.08).toFixed(2)} s of your clip.`);
  } catch (error) {
    setStatus(`Could not use that clip: ${error.message}`);
  }
}
const CLONE = '__clip__';
$('clip').addEventListener('change', (e) => { if (e.target.files[0]) cloneFromFile(e.target.files[0]); });

// ---- the form: speak through the player ------------------------------------------------------------

const player = new StreamPlayer({ rate: RATE });
window.mossTTS.player = player;
player.addEventListener('firstsound', (e) => { $('ttfp').textContent = `${e.detail.ms.toFixed(0)} ms`; });

/** The engine's stream as the player's source messages (source.js), its chunks kept in `chunks`. */
async function* engineSource(stream, chunks, t0) {
  yield { type: 'start', rate: RATE, channels: 2 };
  let samples = 0;
  for await (const item of stream) {
    if (item.pcm.length) {
      chunks.push(item.pcm.slice());
      samples += item.pcm.length / 2;
      yield { type: 'pcm', data: item.pcm };
    }
    const elapsed = (performance.now() - t0) / 1000;
    $('rtf').textContent = samples ? (elapsed / (samples / RATE)).toFixed(2) : '–';
  }
  yield { type: 'end', trailingBytes: 0 };
}

async function speak() {
  const engine = await ready;
  player.unlock();
  const t0 = performance.now();
  $('speak').disabled = true;
  $('stop').disabled = false;
  $('download').hidden = true;
  setStatus('Speaking…', 'playing');
  const chunks = [];
  try {
    const voice = $('voice').value === CLONE ? { codes: cloned } : $('voice').value;
    const options = { text: $('text').value, voice, greedy: $('greedy').checked,
      seed: Number($('seed').value) || undefined };
    const outcome = await player.play(engineSource(engine.stream(options), chunks, t0), { t0 });
    window.mossPlayback = { outcome, ...player.stats };
    if (outcome === 'error') throw new Error(player.stats.error);
    if (outcome === 'stopped') {
      setStatus('Stopped', 'stopped');
      return;
    }
    const samples = chunks.reduce((n, c) => n + c.length / 2, 0);
    const url = URL.createObjectURL(wav16Blob(chunks, RATE));
    $('download').href = url;
    $('download').hidden = false;
    setStatus(`Spoke ${(samples / RATE).toFixed(2)} s of audio.`, 'finished');
  } catch (error) {
    setStatus(`Error: ${error.message}`, 'failed');
  } finally {
    $('speak').disabled = false;
    $('stop').disabled = true;
  }
}

$('speak').addEventListener('click', () => { speak(); });
$('stop').addEventListener('click', () => { player.stop(); });
