// SentencePiece encoding (BPE model, byte fallback), as `SentencePieceProcessor.encode` does it:
// the normaliser (the model's precompiled nmt_nfkc char map, whitespace rules, dummy prefix) and
// then BPE merges by piece score. Our own implementation of the library's documented behaviour;
// `tokenizer.json` is written by `python -m tts_core export-web` from the checkpoint's
// tokenizer.model (pieces, scores, types, the char map's bytes).
//
// Piece types (sentencepiece_model.proto): 1 normal, 2 unknown, 3 control, 4 user defined,
// 5 unused, 6 byte.

const SPACE = '\u2581';
const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder();

function base64Bytes(text) {
  const raw = atob(text);
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out;
}

// The char map: uint32 trie size, a darts-clone double array of that many bytes, then the
// replacement strings (NUL-terminated UTF-8) that the trie's values point into.
class CharMap {
  constructor(bytes) {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const trieSize = view.getUint32(0, true);
    this.units = new Uint32Array(bytes.slice(4, 4 + trieSize).buffer);
    this.pool = bytes.subarray(4 + trieSize);
  }

  // Longest prefix of bytes[start..] in the trie -> [length, value], or [0, -1].
  longestMatch(bytes, start) {
    const units = this.units;
    const offset = (u) => (u >>> 10) << ((u & (1 << 9)) >>> 6);
    let pos = offset(units[0]);
    let best = [0, -1];
    for (let i = start; i < bytes.length; i++) {
      const label = bytes[i];
      pos ^= label;
      const unit = units[pos];
      if ((unit & ((1 << 31) | 0xff)) !== label) break;
      pos ^= offset(unit);
      if ((unit >>> 8) & 1) best = [i - start + 1, units[pos] & 0x7fffffff];
    }
    return best;
  }

  replacement(value) {
    let end = value;
    while (this.pool[end] !== 0) end++;
    return this.pool.subarray(value, end);
  }
}

function utf8Length(lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xf0) return 4;
  if (lead >= 0xe0) return 3;
  if (lead >= 0xc0) return 2;
  return 1;
}

export class SentencePiece {
  /** @param {{pieces: [string, number, number][], charsmap: string, add_dummy_prefix: boolean,
   *           remove_extra_whitespaces: boolean, escape_whitespaces: boolean, unk_id: number}} model */
  constructor(model) {
    this.model = model;
    this.charMap = model.charsmap ? new CharMap(base64Bytes(model.charsmap)) : null;
    this.ids = new Map();      // merge targets and final lookups: normal, user-defined, unused pieces
    this.scores = new Map();
    this.userDefined = [];
    this.bytes = new Array(256).fill(model.unk_id);
    model.pieces.forEach(([piece, score, type], id) => {
      if (type === 1 || type === 4 || type === 5) { this.ids.set(piece, id); this.scores.set(piece, score); }
      if (type === 4) this.userDefined.push(piece);
      const byte = /^<0x([0-9A-F]{2})>$/.exec(piece);
      if (type === 6 && byte) this.bytes[parseInt(byte[1], 16)] = id;
    });
    this.userDefined.sort((a, b) => b.length - a.length);   // longest first
    this.userBytes = this.userDefined.map((p) => utf8.encode(p));
  }

  userMatch(bytes, start) {
    for (const piece of this.userBytes) {
      if (start + piece.length > bytes.length) continue;
      let ok = true;
      for (let j = 0; j < piece.length && ok; j++) ok = bytes[start + j] === piece[j];
      if (ok) return piece.length;
    }
    return 0;
  }

  // One step of the normaliser at `start`: [replacement bytes, bytes consumed].
  normalizePrefix(bytes, start) {
    const user = this.userMatch(bytes, start);
    if (user) return [bytes.subarray(start, start + user), user];
    if (this.charMap) {
      const [length, value] = this.charMap.longestMatch(bytes, start);
      if (length) return [this.charMap.replacement(value), length];
    }
    const length = Math.min(utf8Length(bytes[start]), bytes.length - start);
    return [bytes.subarray(start, start + length), length];
  }

  normalize(text) {
    const bytes = utf8.encode(text);
    const m = this.model;
    const out = [];
    const space = Array.from(utf8.encode(SPACE));
    const isSpace = ([piece]) => piece.length === 1 && piece[0] === 0x20;
    let pos = 0;
    if (m.remove_extra_whitespaces) {
      while (pos < bytes.length) {
        const step = this.normalizePrefix(bytes, pos);
        if (!isSpace(step)) break;
        pos += step[1];
      }
    }
    if (pos >= bytes.length) return '';
    if (m.add_dummy_prefix) out.push(...space);
    let prevSpace = m.add_dummy_prefix;
    while (pos < bytes.length) {
      const [piece, consumed] = this.normalizePrefix(bytes, pos);
      pos += consumed;
      let i = 0;
      if (m.remove_extra_whitespaces && prevSpace) while (i < piece.length && piece[i] === 0x20) i++;
      if (i >= piece.length) continue;
      for (; i < piece.length; i++) {
        if (m.escape_whitespaces && piece[i] === 0x20) out.push(...space);
        else out.push(piece[i]);
      }
      prevSpace = piece[piece.length - 1] === 0x20;
    }
    let text2 = fromUtf8.decode(new Uint8Array(out));
    if (m.remove_extra_whitespaces) while (text2.endsWith(SPACE)) text2 = text2.slice(0, -1);
    return text2;
  }

  /** Ids of `text` (no BOS/EOS): SentencePieceProcessor.encode(text). */
  encode(text) {
    const normalized = this.normalize(text);
    if (!normalized) return [];
    // Initial symbols: user-defined pieces whole (never merged), else one character each.
    const symbols = [];
    const nbytes = utf8.encode(normalized);
    for (let pos = 0; pos < nbytes.length;) {
      const user = this.userMatch(nbytes, pos);
      const length = user || Math.min(utf8Length(nbytes[pos]), nbytes.length - pos);
      symbols.push({ piece: fromUtf8.decode(nbytes.subarray(pos, pos + length)), frozen: user > 0 });
      pos += length;
    }
    symbols.forEach((s, i) => { s.prev = i - 1; s.next = i + 1 < symbols.length ? i + 1 : -1; });
    // Agenda of candidate merges: highest score first, then the leftmost.
    const heap = [];
    const better = (a, b) => (a.score !== b.score ? a.score > b.score : a.left < b.left);
    const push = (item) => {
      heap.push(item);
      for (let i = heap.length - 1; i > 0;) {
        const parent = (i - 1) >> 1;
        if (!better(heap[i], heap[parent])) break;
        [heap[i], heap[parent]] = [heap[parent], heap[i]];
        i = parent;
      }
    };
    const pop = () => {
      const top = heap[0];
      const last = heap.pop();
      if (heap.length) {
        heap[0] = last;
        for (let i = 0; ;) {
          const l = 2 * i + 1, r = l + 1;
          let best = i;
          if (l < heap.length && better(heap[l], heap[best])) best = l;
          if (r < heap.length && better(heap[r], heap[best])) best = r;
          if (best === i) break;
          [heap[i], heap[best]] = [heap[best], heap[i]];
          i = best;
        }
      }
      return top;
    };
    const consider = (left, right) => {
      if (left < 0 || right < 0 || symbols[left].frozen || symbols[right].frozen) return;
      const piece = symbols[left].piece + symbols[right].piece;
      if (!this.ids.has(piece)) return;
      push({ left, right, piece, score: this.scores.get(piece) });
    };
    for (let i = 1; i < symbols.length; i++) consider(i - 1, i);
    while (heap.length) {
      const top = pop();
      const left = symbols[top.left], right = symbols[top.right];
      if (!left.piece || !right.piece || left.piece + right.piece !== top.piece) continue;  // stale
      left.piece = top.piece;
      right.piece = '';
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = top.left;
      consider(left.prev, top.left);
      consider(top.left, left.next);
    }
    const ids = [];
    for (let i = 0; i >= 0 && i < symbols.length; i = symbols[i].next) {
      const piece = symbols[i].piece;
      const id = this.ids.get(piece);
      if (id !== undefined) ids.push(id);
      else for (const byte of utf8.encode(piece)) ids.push(this.bytes[byte]);
    }
    return ids;
  }
}
