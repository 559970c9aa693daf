// The form shown when player.html is opened directly (not embedded in the Gradio page).

import { errorMessage } from '../player/source.js';
import { loadMarks, markOf } from './voicemarks.js';

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
const VOICES_URL = new URL('../../api/voices', location.href).href;

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
        const body = await resp.json(), marks = loadMarks();
        const options = [...body.voices.filter((x) => x.available).map((v) => [`${v.name} (${v.language}, ${v.gender})`, v.name]),
          ...(body.saved || []).map((v) => [`${v.name} (my voice)`, v.id])];
        options.sort((a, b) => markOf(b[1], marks).star - markOf(a[1], marks).star);   // favourites first
        for (const [label, value] of options) {   // with the visitor's star and note (voicemarks.js)
          const { star, note } = markOf(value, marks);
          $('voice').add(new Option(`${star ? '★ ' : ''}${label}${note ? ` — ${note}` : ''}`, value));
        }
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
