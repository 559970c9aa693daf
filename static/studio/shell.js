// The player page around the audio: its theme, the model's status, the copy buttons, and its size
// reported to the embedding page.

const $ = (id) => document.getElementById(id);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Show "click to enable audio" and resolve once a click has let `resume()` run. */
export function askForClick(resume, setMessage) {
  const button = $('unlock');
  button.hidden = false;
  setMessage('The browser is holding audio back until you click.', 'info');
  return new Promise((resolve) => {
    button.onclick = () => resume().then(() => { button.hidden = true; setMessage(''); resolve(); });
  });
}

export function notifyParent(message) {
  if (window.parent !== window) window.parent.postMessage(message, location.origin);
}

export function setTheme(theme) {
  if (theme === 'dark' || theme === 'light') document.documentElement.dataset.theme = theme;
}

/** Poll /health until the model is ready or failed; `onChange({state, status})` on every answer. */
export async function watchModel(healthUrl, onChange) {
  for (;;) {
    let model = { state: 'loading', status: '' };
    try {
      const health = await (await fetch(healthUrl, { cache: 'no-store' })).json();
      if (health.status === 'ready') model = { state: 'ready', status: '' };
      else if (health.status === 'failed') model = { state: 'failed', status: '' };
      else model = { state: 'loading', status: health.message || '' };
    } catch (_) { /* not up yet */ }
    onChange(model);
    if (model.state !== 'loading') return;
    await sleep(1500);
  }
}

export function wireCopyButtons() {
  for (const b of document.querySelectorAll('button.copy')) {
    b.onclick = async () => {
      const target = $(b.dataset.target);
      try { await navigator.clipboard.writeText(target.textContent); b.textContent = 'Copied'; } catch (_) {
        getSelection().selectAllChildren(target);   // no clipboard access: select it for Ctrl+C
        b.textContent = 'Selected';
      }
      setTimeout(() => { b.textContent = 'Copy'; }, 1500);
    };
  }
}

export function reportHeight() {   // let the embedding page size the iframe to fit
  if (!('ResizeObserver' in window) || window.parent === window) return;
  const main = $('player');
  new ResizeObserver(() => notifyParent({ type: 'moss-player:height', height: main.offsetHeight + 4 })).observe(main);
}
