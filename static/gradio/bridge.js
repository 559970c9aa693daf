// Loaded into the Gradio page (mount_gradio_app head=). Hands requests from the Python handlers to
// the player iframe, keeps the player's theme in step with the page's, sizes the iframe to its
// content, and adds the keyboard path: Ctrl/Cmd+Enter runs the visible tab's primary action, Escape
// stops. The ui/ event listeners call window.mossTTS.arm() on click (inside the user gesture), then
// .play(payloadJson) once Python has validated the inputs. Messages: docs/PROTOCOL.md §3. The
// visitor's favourite voices and notes (voicemarks.js) are read and written here for the page's
// events (studio/ui/marks.py); when the player's cards change them, the pickers are relabelled.
'use strict';

(() => {
  let clickedAt = null;
  const marksModule = import(new URL('../studio/voicemarks.js', document.currentScript.src).href);
  const frame = () => document.getElementById('moss-player');
  const post = (message) => frame()?.contentWindow?.postMessage(message, location.origin);
  const theme = () => (document.body.classList.contains('dark') ? 'dark' : 'light');

  function visible(el) {
    return !!el && el.offsetParent !== null && getComputedStyle(el).visibility !== 'hidden';
  }

  // The primary action of the tab on screen (each tab has its own).
  function primaryButton() {
    return ['generate-btn', 'audition-btn'].map((id) => document.getElementById(id)).find(visible) || null;
  }

  function showPlayer() {   // on a phone the player sits below the form: bring it on screen
    const f = frame();
    if (!f) return;
    const box = f.getBoundingClientRect();
    if (box.top < 0 || box.top > window.innerHeight - 120) f.scrollIntoView({ block: 'start', behavior: 'smooth' });
  }

  // Every stop goes through the page's hidden Stop button, so its Gradio events (the player's stop,
  // and any server-side cancel wired to it) all run; without the button, the player is told directly.
  function stopAll() {
    const button = document.getElementById('stop-btn');
    if (button) button.click(); else window.mossTTS.stop();
  }

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
      post({ type: 'moss-tts:play', payload, clickedAt });
      clickedAt = null;
      showPlayer();
    },
    stop() {
      post({ type: 'moss-tts:stop' });
    },
    options(options) {   // the audition tab's playback switches (Match loudness), for the board's replays
      post({ type: 'moss-tts:options', options });
    },
    async marks() {   // this browser's marks as JSON, for a Python handler (ui/marks.py parses it)
      try { return JSON.stringify((await marksModule).loadMarks()); } catch (_) { return ''; }
    },
    async setMark(voice, change) {
      try { (await marksModule).setMark(voice, change); } catch (_) { /* storage off: nothing kept */ }
    },
    theme,
  };

  // The player (another document) changed a voice's marks: the page's pickers show them again.
  marksModule.then((m) => m.watchMarks(() => document.getElementById('voice-marks-sync')?.click())).catch(() => {});

  function keepSeed(seed) {   // the seed box gets the take's seed, and "New random seed" goes off
    const random = document.querySelector('#random-seed input[type=checkbox]');
    if (random && random.checked) random.click();
    const box = document.querySelector('#seed input');
    if (!box || !Number.isInteger(seed)) return;
    box.value = String(seed);
    box.dispatchEvent(new Event('input', { bubbles: true }));
    box.dispatchEvent(new Event('change', { bubbles: true }));
  }

  function generateFromKeyboard() {
    const button = primaryButton();
    if (button && !button.disabled) button.click();   // a click inside the key's gesture: audio may start
  }

  window.addEventListener('message', (e) => {
    if (e.origin !== location.origin || !e.data) return;
    if (e.data.type === 'moss-player:height') {
      const f = frame();
      if (f) f.style.height = `${Math.ceil(e.data.height) + 4}px`;
    } else if (e.data.type === 'moss-player:generate') {
      generateFromKeyboard();
    } else if (e.data.type === 'moss-player:stop') {   // the player's Stop (or Esc in the player)
      stopAll();
    } else if (e.data.type === 'moss-player:keep-seed') {   // a take's "Keep this take"
      keepSeed(e.data.seed);
    }
  });

  document.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      generateFromKeyboard();
    } else if (e.key === 'Escape' && !e.target.closest?.('[role="listbox"], .wrap-inner')) {
      stopAll();
    }
  });

  // Gradio's Markdown has no ARIA options: make the page's input problems an alert and the model
  // line a polite live region once Gradio has rendered them.
  function liveRegions() {
    const message = document.getElementById('tts-message');
    const model = document.getElementById('model-status');
    if (!message || !model) return false;
    message.setAttribute('role', 'alert');
    model.setAttribute('role', 'status');
    model.setAttribute('aria-live', 'polite');
    return true;
  }
  if (!liveRegions()) {
    const watcher = new MutationObserver(() => { if (liveRegions()) watcher.disconnect(); });
    watcher.observe(document.documentElement, { childList: true, subtree: true });
  }

  // Gradio switches its theme by a class on <body> (?__theme=dark, the settings panel, the system's
  // preference): tell the player whenever it changes, and once it has loaded.
  function syncTheme() { post({ type: 'moss-tts:theme', theme: theme() }); }
  new MutationObserver(syncTheme).observe(document.body, { attributes: true, attributeFilter: ['class'] });
  document.addEventListener('load', (e) => { if (e.target === frame()) syncTheme(); }, true);
})();
