// The static page: loads onnxruntime-web and the model files (cached after the first visit), runs
// the engine in this tab and plays its stream through the studio's own player (StreamPlayer,
// static/player/). Exposes window.mossTTS = {ready, stream(options), info(), player}.
// URL parameters: backend=wasm|webgpu (default: WebGPU where present), threads=N.

import { StreamPlayer } from '../player/stream-player.js';
import { wav16Blob } from '../studio/wav.js';
import { MossEngine, chooseBackend } from './engine.js';
import { loadModelFiles } from './loader.js';

const params = new URLSearchParams(location.search);
const RATE = 48000;
const $ = (id) => document.getElementById(id);
const base = new URL('./', location.href);
const decoder = new TextDecoder();

function setStatus(text) { $('status').textContent = text; }

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

async function start() {
  const backend = await chooseBackend(params.get('backend'));
  const { ort, threads } = await loadOrt(backend);
  setStatus('Downloading the model…');
  const { manifest, files, fromCache } = await loadModelFiles(base, (done, total, cached) => {
    $('progress').max = total;
    $('progress').value = done;
    setStatus(`${cached ? 'Reading the cached model' : 'Downloading the model'}: `
      + `${(done / 1e6).toFixed(1)} of ${(total / 1e6).toFixed(1)} MB`);
  });
  const json = (path) => JSON.parse(decoder.decode(files.get(path)));
  const graphs = json(manifest.graphs);
  const models = {};
  for (const [kind, name] of Object.entries(graphs.graphs)) models[kind] = files.get(`${manifest.models_dir}/${name}`);
  setStatus('Starting the engine…');
  const engine = await MossEngine.create(ort, {
    graphs, tokenizer: json(manifest.tokenizer), voices: json(manifest.voices), models,
  }, { backend, threads });
  const info = engine.info();
  $('engine-info').textContent = `Runs in this browser: ${info.backend}${info.backend === 'wasm' ? ` (${threads} thread${threads === 1 ? '' : 's'}${self.crossOriginIsolated ? '' : ', not cross-origin isolated'})` : ''}, ${info.precision}`
    + (fromCache ? ', model from the browser cache' : '');
  const select = $('voice');
  for (const preset of engine.voices.presets) select.add(new Option(`${preset.name} (${preset.language})`, preset.name));
  select.value = engine.voices.default;
  setStatus('Ready.');
  $('speak').disabled = false;
  return engine;
}

const ready = start();
ready.catch((error) => setStatus(`Could not start: ${error.message}`));

window.mossTTS = {
  ready: ready.then(() => undefined),
  stream: (options) => (async function* streamed() { yield* (await ready).stream(options); })(),
  info: () => { throw new Error('mossTTS.info(): await mossTTS.ready first'); },
};
ready.then((engine) => {
  window.mossTTS.info = () => engine.info();
  window.mossTTS.encodeClip = (channels) => engine.encodeClip(channels);
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
  $('download').hidden = true;
  const chunks = [];
  try {
    const voice = $('voice').value === CLONE ? { codes: cloned } : $('voice').value;
    const options = { text: $('text').value, voice, greedy: $('greedy').checked,
      seed: Number($('seed').value) || undefined };
    const outcome = await player.play(engineSource(engine.stream(options), chunks, t0), { t0 });
    window.mossPlayback = { outcome, ...player.stats };
    if (outcome === 'error') throw new Error(player.stats.error);
    const samples = chunks.reduce((n, c) => n + c.length / 2, 0);
    const url = URL.createObjectURL(wav16Blob(chunks, RATE));
    $('download').href = url;
    $('download').hidden = false;
    setStatus(`Spoke ${(samples / RATE).toFixed(2)} s of audio.`);
  } catch (error) {
    setStatus(`Error: ${error.message}`);
  } finally {
    $('speak').disabled = false;
  }
}

$('speak').addEventListener('click', () => { speak(); });
