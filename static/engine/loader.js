// Model files of a static build: listed in manifest.json with their sizes and SHA-256 hashes.
// The page asks for the files it needs when it needs them (speaking: one precision's graphs;
// cloning: the clip encoder, on first use), fetched with a progress report and kept in the Cache
// API under their hash, so a later visit reads them from the browser's own storage (a new build,
// with new hashes, fetches again). A download is checked against its hash before it is kept.

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

/** The build's manifest.json (always revalidated: it names the current files' hashes). */
export async function loadManifest(base) {
  const response = await fetch(new URL('manifest.json', base), { cache: 'no-cache' });
  if (!response.ok) throw new Error(`could not fetch manifest.json: HTTP ${response.status}`);
  return response.json();
}

/**
 * The files at `paths` (manifest paths) as ArrayBuffers, from the cache where it has them.
 * @param {URL} base  the build's root
 * @param {(done: number, total: number, fromCache: boolean) => void} onProgress  bytes so far
 * @returns {Promise<{files: Map<string, ArrayBuffer>, fromCache: boolean, bytes: number}>}
 */
export async function loadFiles(base, manifest, paths, onProgress = () => {}) {
  const entries = paths.map((path) => {
    const entry = manifest.files.find((f) => f.path === path);
    if (!entry) throw new Error(`${path} is not in this build's manifest.json: rebuild it with export-web`);
    return entry;
  });
  const total = entries.reduce((n, f) => n + f.size, 0);
  const cache = 'caches' in self ? await caches.open(CACHE_NAME).catch(() => null) : null;
  const files = new Map();
  let done = 0;
  let allCached = true;
  for (const file of entries) {
    const url = new URL(file.path, base);
    const key = `${url.href}?sha256=${file.sha256}`;
    const hit = cache && await cache.match(key);
    let buffer = hit ? await hit.arrayBuffer() : null;
    if (buffer && buffer.byteLength !== file.size) buffer = null;   // a damaged entry: fetch again
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
  return { files, fromCache: allCached, bytes: total };
}
