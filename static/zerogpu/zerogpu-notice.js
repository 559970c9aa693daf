// ZeroGPU mode only (loaded beside bridge-zerogpu.js): what ZeroGPU means for this visitor, above
// the player. On every start it shows the GPU time the call asks for (charged to the visitor's
// daily ZeroGPU quota); when the GPU call is refused or fails before any audio (relay message
// "unavailable": quota out, no GPU), it says so in plain words and offers to generate on the
// server's CPU engine instead: the player then fetches /api/tts/stream as on any other hardware.
'use strict';

(() => {
  const stats = { shownGpuSeconds: null, unavailable: 0, fallbacks: 0 };
  let fallback = null;   // the payload the CPU engine would play

  function notice() {
    let box = document.getElementById('zerogpu-notice');
    if (box) return box;
    box = document.createElement('div');
    box.id = 'zerogpu-notice';
    box.setAttribute('role', 'status');
    box.setAttribute('aria-live', 'polite');
    const text = document.createElement('p');
    text.className = 'zerogpu-notice-text';
    const button = document.createElement('button');
    button.type = 'button';
    button.id = 'zerogpu-cpu-btn';
    button.className = 'lg secondary';
    button.textContent = "Generate on the server's CPU instead";
    button.hidden = true;
    button.addEventListener('click', useCpu);
    box.append(text, button);
    const player = document.getElementById('moss-player');
    if (player && player.parentElement) player.parentElement.insertBefore(box, player);
    else document.body.append(box);
    return box;
  }

  function show(message, { warn = false, offer = false } = {}) {
    const box = notice();
    box.classList.toggle('zerogpu-warn', warn);
    box.setAttribute('role', warn ? 'alert' : 'status');
    box.querySelector('.zerogpu-notice-text').textContent = message;
    box.querySelector('#zerogpu-cpu-btn').hidden = !offer;
  }

  function useCpu() {
    if (!fallback || !window.mossTTS) return;
    stats.fallbacks += 1;
    const payload = fallback;
    fallback = null;
    show("Generating on the server's CPU (slower than the GPU; no ZeroGPU quota used).");
    window.mossTTS.arm();          // inside this click: the player may start its audio
    window.mossTTS.play(payload);  // the player fetches /api/tts/stream, as without ZeroGPU
  }

  window.mossZeroGPUNotice = {
    stats,
    see(text) {   // every value of the hidden relay component (after bridge-zerogpu.js has it)
      if (!text) return;
      let m;
      try { m = JSON.parse(text); } catch (_) { return; }
      if (m.type === 'start' && typeof m.gpuSeconds === 'number') {
        stats.shownGpuSeconds = m.gpuSeconds;
        fallback = null;
        show(`ZeroGPU: this generation asks for up to ${m.gpuSeconds} s of GPU time from your daily quota.`);
      } else if (m.type === 'unavailable') {
        stats.unavailable += 1;
        fallback = m.fallback || null;
        show(m.message, { warn: true, offer: Boolean(fallback) });
        if (!m.item) {   // nothing played yet: the player, told of a start, may rest
          window.mossTTS && window.mossTTS.stop();
        } else {         // a later item of a comparison: earlier audio keeps playing; this one ends
          document.getElementById('moss-player')?.contentWindow?.postMessage(
            { type: 'tts:error', requestId: m.requestId, message: m.message }, location.origin);
        }
      }
    },
  };
})();
