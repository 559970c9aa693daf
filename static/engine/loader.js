// Model files of a static build: listed in manifest.json with their sizes and SHA-256 hashes,
// fetched once with a progress report and kept in the Cache API under their hash, so a second
// visit reads them from the browser's own storage (and a new build, with new hashes, refetches).

const CACHE_NAME = 'moss-tts-nano-models';

async function sha256Hex(buffer) {
  const digest = await crypto.subtle.digest('SHA-256', buffer);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, '0')).join('');
}

async function download(url, onBytes) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`could not fetch ${url}: HTTP ${response.status}`);
  const reader = response.body.getReader();
  const parts = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    parts.push(value);
    onBytes(value.length);
  }
  return new Blob(parts).arrayBuffer();
}

/**
 * Every file of the manifest as an ArrayBuffer, checked against its hash.
 * @param {URL} base  the build's root
 * @param {(done: number, total: number, fromCache: boolean) => void} onProgress
 * @returns {Promise<{manifest: object, files: Map<string, ArrayBuffer>, fromCache: boolean}>}
 */
export async function loadModelFiles(base, onProgress) {
  const manifest = await (await fetch(new URL('manifest.json', base), { cache: 'no-cache' })).json();
  const total = manifest.files.reduce((n, f) => n + f.size, 0);
  const cache = 'caches' in self ? await caches.open(CACHE_NAME) : null;
  const files = new Map();
  let done = 0;
  let allCached = true;
  for (const file of manifest.files) {
    const url = new URL(file.path, base);
    const key = `${url.href}?sha256=${file.sha256}`;
    let buffer = null;
    const hit = cache && await cache.match(key);
    if (hit) {
      buffer = await hit.arrayBuffer();
      if (await sha256Hex(buffer) !== file.sha256) buffer = null;   // damaged entry: fetch again
    }
    if (buffer) {
      done += file.size;
      onProgress(done, total, true);
    } else {
      allCached = false;
      buffer = await download(url, (n) => { done += n; onProgress(done, total, false); });
      const hash = await sha256Hex(buffer);
      if (hash !== file.sha256) throw new Error(`${file.path}: SHA-256 ${hash} does not match the manifest`);
      if (cache) await cache.put(key, new Response(buffer.slice(0))).catch(() => {});  // quota: keep going
    }
    files.set(file.path, buffer);
  }
  return { manifest, files, fromCache: allCached };
}
