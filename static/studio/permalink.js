// Audition permalinks: the page's URL with `?audition=<base64url JSON>` pinning the board's cards
// (each card's label and its whole stream request: text, voice by preset name or saved-voice id,
// seed, speed, sampling settings) and the engine build it was made on. Opening one replays the same
// requests, so the same audio comes back (same seed and settings, same engine); the link says so
// when the build differs. Clips uploaded for cloning are not linkable (the server keeps them only
// for a while): such a card is left out.

export const PARAM = 'audition';
const MAX_ITEMS = 8;

const toBase64Url = (text) => btoa(String.fromCharCode(...new TextEncoder().encode(text)))
  .replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
const fromBase64Url = (value) => new TextDecoder().decode(Uint8Array.from(
  atob(value.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0)));

/** A short fingerprint of what generates the audio (models, device, precision), from /health. */
export async function engineBuild(healthUrl) {
  try {
    const h = await (await fetch(healthUrl, { cache: 'no-store' })).json();
    const what = ['lm', 'codec', 'device', 'dtype', 'quantize', 'codec_dtype'].map((k) => `${k}=${h[k] ?? ''}`).join(';');
    const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(what));
    return [...new Uint8Array(digest).slice(0, 6)].map((b) => b.toString(16).padStart(2, '0')).join('');
  } catch (_) {
    return null;
  }
}

/** The link for `cards` ({label, request, voice?}) on the page at `pageUrl`. */
export function makeLink(pageUrl, cards, build) {
  const items = cards.filter((c) => c.request && !c.request.ref_audio_id && !c.request.ref_audio)
    .slice(0, MAX_ITEMS).map((c) => ({ label: c.label, request: c.request, ...(c.voice ? { voice: c.voice } : {}) }));
  const url = new URL(pageUrl);
  url.searchParams.set(PARAM, toBase64Url(JSON.stringify({ v: 1, items, build })));
  return url.href;
}

/** {items, build} from a page URL's query, or null when it has no (usable) permalink. */
export function readLink(search) {
  const value = new URLSearchParams(search).get(PARAM);
  if (!value) return null;
  try {
    const data = JSON.parse(fromBase64Url(value));
    const items = (data.items || []).filter((i) => i && typeof i.label === 'string' && i.request
      && typeof i.request.text === 'string').slice(0, MAX_ITEMS);
    return items.length ? { items, build: typeof data.build === 'string' ? data.build : null } : null;
  } catch (_) {
    return null;
  }
}
