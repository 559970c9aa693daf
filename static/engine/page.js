// The static page: loads onnxruntime-web and the model files (cached after the first visit), runs
// the engine in this tab and plays its stream through the studio's own AudioWorklet player
// (worklet.js via audio.js). Exposes window.mossTTS = {ready, stream(options), info()}.
// URL parameters: backend=wasm|webgpu (default: WebGPU where present), threads=N.

import { AudioOut } from '../audio.js';
import { wav16Blob } from '../wav.js';
import { MossEngine, chooseBackend } from './engine.js';
import { loadModelFiles } from './loader.js';

const params = new URLSearchParams(location.search);
const RATE = 48000;
const $ = (id) => document.getElementById(id);
const base = new URL('./', location.href);
const decoder = new TextDecoder();

function setStatus(text) { $('status').textContent = text; }

// What reached the speakers, measured after the worklet: per-channel peaks and how far the two
// channels differ (read by the end-to-end test, shown on the page).
const heard = (window.mossPlayback = { peakL: 0, peakR: 0, maxDiff: 0, sampleRate: 0, polls: 0 });

function tapOutput(audio) {
  const splitter = audio.ctx.createChannelSplitter(2);
  const left = audio.ctx.createAnalyser(), right = audio.ctx.createAnalyser();
  left.fftSize = right.fftSize = 2048;
  audio.node.connect(splitter);
  splitter.connect(left, 0);
  splitter.connect(right, 1);
  const l = new Float32Array(2048), r = new Float32Array(2048);
  heard.sampleRate = audio.ctx.sampleRate;
  setInterval(() => {
    left.getFloatTimeDomainData(l);
    right.getFloatTimeDomainData(r);
    for (let i = 0; i < l.length; i++) {
      heard.peakL = Math.max(heard.peakL, Math.abs(l[i]));
      heard.peakR = Math.max(heard.peakR, Math.abs(r[i]));
      heard.maxDiff = Math.max(heard.maxDiff, Math.abs(l[i] - r[i]));
    }
    heard.polls++;
  }, 20);
}

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
ready.then((engine) => { window.mossTTS.info = () => engine.info(); });

// ---- the form: speak through the worklet ---------------------------------------------------------

const audio = new AudioOut(RATE, onWorkletMessage);
let run = null;

function onWorkletMessage(m) {
  if (!run || m.id !== run.id) return;
  if (m.type === 'first-audio') {
    run.ttfpMs = performance.now() - run.t0;
    $('ttfp').textContent = `${run.ttfpMs.toFixed(0)} ms`;
  }
  if (m.type === 'finished' || m.type === 'stopped') run.settle(m.type);
}

async function speak() {
  const engine = await ready;
  audio.unlock();
  await audio.init();
  if (!heard.polls) tapOutput(audio);
  await audio.ctx.resume();
  const id = `run-${Date.now()}`;
  let settle;
  const finished = new Promise((resolve) => { settle = resolve; });
  run = { id, t0: performance.now(), settle, ttfpMs: null };
  $('speak').disabled = true;
  $('download').hidden = true;
  audio.post({ type: 'start', id, inputRate: RATE, prebufferMs: 200 });
  const chunks = [];
  let samples = 0;
  try {
    const options = { text: $('text').value, voice: $('voice').value, greedy: $('greedy').checked,
      seed: Number($('seed').value) || undefined };
    for await (const item of engine.stream(options)) {
      if (item.pcm.length) {
        chunks.push(item.pcm.slice());
        samples += item.pcm.length / 2;
        audio.post({ type: 'pcm', data: item.pcm }, [item.pcm.buffer]);
      }
      const elapsed = (performance.now() - run.t0) / 1000;
      $('rtf').textContent = samples ? (elapsed / (samples / RATE)).toFixed(2) : '–';
    }
    audio.post({ type: 'end' });
    await finished;
    const url = URL.createObjectURL(wav16Blob(chunks, RATE));
    $('download').href = url;
    $('download').hidden = false;
    setStatus(`Spoke ${(samples / RATE).toFixed(2)} s of audio.`);
  } catch (error) {
    audio.post({ type: 'stop' });
    setStatus(`Error: ${error.message}`);
  } finally {
    $('speak').disabled = false;
  }
}

$('speak').addEventListener('click', () => { speak(); });
