// The form shown when player.html is opened directly (not embedded in the Gradio page).

import { errorMessage } from './source.js';

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
const VOICES_URL = new URL('../api/voices', location.href).href;

function start(e) {
  e.preventDefault();
  const player = window.mossPlayer;
  const clickedAt = performance.timeOrigin + performance.now();
  player.unlock();   // inside the click: the browser lets audio start
  const voice = $('voice').value;
  const request = { text: $('text').value };
  if (voice) request.voice = voice;
  for (const key of ['seed', 'max_frames', 'speed']) if (params.has(key)) request[key] = Number(params.get(key));
  player.play({ items: [{ label: voice || 'default voice', request }] }, clickedAt);
}

async function loadVoices() {   // retried while the model is still loading (503)
  for (;;) {
    try {
      const resp = await fetch(VOICES_URL);
      if (resp.ok) {
        const body = await resp.json();
        for (const v of body.voices.filter((x) => x.available)) {
          $('voice').add(new Option(`${v.name} (${v.language}, ${v.gender})`, v.name));
        }
        for (const v of body.saved || []) $('voice').add(new Option(`${v.name} (my voice)`, v.id));
        $('voice').value = body.default;
        window.mossPlayer.setMessage('');
        return;
      }
      window.mossPlayer.setMessage((await errorMessage(resp)).message, 'info');
    } catch (_) { /* server not up yet */ }
    await new Promise((r) => setTimeout(r, 2000));
  }
}

if (params.get('embed') !== '1') {
  $('standalone').onsubmit = start;
  $('text').addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) start(e); });
  loadVoices();
}
