// ZeroGPU mode only (loaded beside bridge.js): the page's audio arrives as Gradio updates of a hidden
// component, one relay message each (studio/zerogpu/relay.py documents them); this forwards them to
// the player iframe as docs/PROTOCOL.md §3.2 push messages (tts:start / tts:pcm / tts:end / tts:error).
// A message number that skips one means Gradio dropped an update: the run is failed loudly rather
// than played with a hole in it.
'use strict';

(() => {
  let clickedAt = null;
  let relay = null;     // the Gradio event whose messages are being forwarded
  let expected = 0;     // the next message number of that relay
  let broken = false;
  const stats = { messages: 0, pcmMessages: 0, lost: 0, relays: 0 };
  const frame = () => document.getElementById('moss-player');

  function post(message, transfer) {
    frame()?.contentWindow?.postMessage(message, location.origin, transfer || []);
  }

  function decodeBytes(base64) {
    const text = atob(base64);
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    return bytes;
  }

  function decodePcm(base64) {
    return new Float32Array(decodeBytes(base64).buffer);   // little-endian float32, as every browser's memory is
  }

  function forward(m) {
    const requestId = m.requestId;
    if (m.type === 'start') {
      post({
        type: 'tts:start', requestId, sampleRate: m.sampleRate, channels: m.channels,
        estimatedDuration: m.estimatedDuration, label: m.label, item: m.item, items: m.items,
        clickedAt: m.item === 0 ? clickedAt : null, format: m.format || 'f32', bitRate: m.bitRate || null,
      });
    } else if (m.type === 'pcm' && m.opus) {   // the next bytes of the item's Ogg/Opus stream: the player decodes
      const bytes = decodeBytes(m.opus);
      stats.pcmMessages += 1;
      stats.relayBytes = (stats.relayBytes || 0) + m.opus.length;
      post({ type: 'tts:pcm', requestId, bytes }, [bytes.buffer]);
    } else if (m.type === 'pcm') {
      const data = decodePcm(m.pcm);
      stats.pcmMessages += 1;
      stats.relayBytes = (stats.relayBytes || 0) + m.pcm.length;
      post({ type: 'tts:pcm', requestId, data }, [data.buffer]);
    } else if (m.type === 'event') {
      post({ type: 'tts:event', requestId, event: m.event });
    } else if (m.type === 'end') {
      post({ type: 'tts:end', requestId, audioSeconds: m.audioSeconds, firstAudioMs: m.firstAudioMs });
    } else if (m.type === 'error') {
      post({ type: 'tts:error', requestId, message: m.message });
    }
  }

  window.mossZeroGPU = {
    stats,
    arm() {   // on the click, beside window.mossTTS.arm(): the player's TTFP counts from here
      clickedAt = performance.timeOrigin + performance.now();
    },
    push(text) {   // every value Gradio gives the hidden relay component
      if (!text) return;
      let m;
      try { m = JSON.parse(text); } catch (_) { return; }
      if (m.relay !== relay) { relay = m.relay; expected = 0; broken = false; stats.relays += 1; }
      if (broken || m.n < expected) return;   // after a loss, or a repeated value
      stats.messages += 1;
      if (m.n > expected) {
        broken = true;
        stats.lost += m.n - expected;
        post({ type: 'tts:error', requestId: m.requestId,
               message: 'part of the audio was lost on the way to the page; press Generate again' });
        return;
      }
      expected = m.n + 1;
      forward(m);
    },
  };
})();
