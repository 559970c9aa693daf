// Loaded into the Gradio page (mount_gradio_app head=). Hands requests from the Python handlers to
// the player iframe and sizes the iframe to its content. The ui.py event listeners call
// window.mossTTS.arm() on click (inside the user gesture), then .play(payloadJson) once Python has
// validated the inputs.
'use strict';

(() => {
  let clickedAt = null;
  const frame = () => document.getElementById('moss-player');

  window.mossTTS = {
    arm() {
      clickedAt = performance.timeOrigin + performance.now();
      try {   // same origin: start/resume the player's AudioContext while the click still counts as a gesture
        frame()?.contentWindow?.mossPlayer?.unlock();
      } catch (_) { /* cross-origin or not loaded yet: the player asks for a click itself */ }
    },
    play(payloadJson) {
      if (!payloadJson) return;
      const payload = typeof payloadJson === 'string' ? JSON.parse(payloadJson) : payloadJson;
      frame()?.contentWindow?.postMessage({ type: 'moss-tts:play', payload, clickedAt }, location.origin);
      clickedAt = null;
    },
    stop() {
      frame()?.contentWindow?.postMessage({ type: 'moss-tts:stop' }, location.origin);
    },
  };

  window.addEventListener('message', (e) => {
    if (e.origin !== location.origin || !e.data) return;
    if (e.data.type === 'moss-player:height') {
      const f = frame();
      if (f) f.style.height = `${Math.ceil(e.data.height) + 4}px`;
    }
  });
})();
