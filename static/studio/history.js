// The visitor's generations, kept in this browser (localStorage): text, voice, figures and the
// request id whose audio the server keeps for a while (GET /api/tts/result/{id}.{fmt}).

const KEY = 'moss-tts-history-v1';
export const MAX_ENTRIES = 30;
export const FORMATS = ['mp3', 'flac', 'wav'];

export function loadHistory() {
  try {
    const list = JSON.parse(localStorage.getItem(KEY) || '[]');
    return Array.isArray(list) ? list : [];
  } catch (_) {
    return [];
  }
}

function save(list) {
  try {
    localStorage.setItem(KEY, JSON.stringify(list.slice(0, MAX_ENTRIES)));
  } catch (_) { /* storage full or disabled: the history just is not kept */ }
}

/** Newest first; an entry with the same request id is replaced. */
export function addToHistory(entry) {
  const list = loadHistory().filter((e) => e.requestId !== entry.requestId);
  list.unshift(entry);
  save(list);
  return list.slice(0, MAX_ENTRIES);
}

export function clearHistory() {
  save([]);
  return [];
}

/** "Nova - Hello from the studio" : voice + the first words, for file names. */
export function fileStem(label, text) {
  const words = String(text || '').replace(/\s+/g, ' ').trim().split(' ').slice(0, 8).join(' ');
  const short = words.length > 48 ? `${words.slice(0, 48).replace(/\s+\S*$/, '')}` : words;
  return [label, short].filter(Boolean).join(' - ') || 'speech';
}

export function resultUrl(base, requestId, format, stem) {
  const url = new URL(`../../api/tts/result/${encodeURIComponent(requestId)}.${format}`, base);
  if (stem) url.searchParams.set('name', stem);
  return url.href;
}
