// Long text -> chunks within the model's text budget, and the pause after each: a port of
// tts_core/text/chunking.py (docs/spec/LM.md §4.7). Indices count code points, as Python's str does.

const SENTENCE_END = new Set('.!?。！？；;');
const CLAUSE_END = new Set(',，、；;：:');
const CHUNK_CLOSERS = new Set('"\'”’)]}）】》」』');
// Python's str.isspace() set (JS's \s differs on U+001C..U+001F and U+0085).
export const PY_SPACE = '\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
const IS_SPACE = new RegExp(`^[${PY_SPACE}]$`);
const EDGE_SPACE = new RegExp(`^[${PY_SPACE}]+|[${PY_SPACE}]+$`, 'g');
const SPACE_RUN = new RegExp(`[${PY_SPACE}]+`);

export const isSpace = (ch) => IS_SPACE.test(ch);
export const strip = (text) => text.replace(EDGE_SPACE, '');
const isAlnum = (ch) => /^[\p{L}\p{N}]$/u.test(ch);
const isLower = (ch) => /^\p{Ll}$/u.test(ch);

/** Silence after a chunk: 0.40 s for <= 4 whitespace words (all CJK chunks), else 0.24 s. */
export function pauseAfterChunkS(chunk) {
  const words = strip(chunk).split(SPACE_RUN).filter(Boolean);
  return words.length <= 4 ? 0.40 : 0.24;
}

function hasCjkOrHangul(text) {
  for (const ch of text) {
    if ((ch >= '\u3400' && ch <= '\u9fff') || (ch >= '\u3040' && ch <= '\u30ff') || (ch >= '\uac00' && ch <= '\ud7af')) {
      return true;
    }
  }
  return false;
}

function prepareForChunking(text) {
  text = strip(text).replaceAll('\r', ' ').replaceAll('\n', ' ');
  while (text.includes('  ')) text = text.replaceAll('  ', ' ');
  if (!text) return text;
  const chars = Array.from(text);
  const last = chars[chars.length - 1];
  if (hasCjkOrHangul(text)) return SENTENCE_END.has(last) ? text : `${text}。`;
  if (isLower(chars[0])) text = chars[0].toUpperCase() + chars.slice(1).join('');
  return isAlnum(last) ? `${text}.` : text;
}

function splitAfter(text, marks) {
  const chars = Array.from(text);
  const pieces = [];
  let start = 0, index = 0;
  while (index < chars.length) {
    if (marks.has(chars[index])) {
      index++;
      while (index < chars.length && CHUNK_CLOSERS.has(chars[index])) index++;
      pieces.push(strip(chars.slice(start, index).join('')));
      while (index < chars.length && isSpace(chars[index])) index++;
      start = index;
    } else {
      index++;
    }
  }
  pieces.push(strip(chars.slice(start).join('')));
  return pieces.filter(Boolean);
}

function cutToBudget(text, countTokens, maxTokens) {
  const boundaries = new Set([...SENTENCE_END, ...CLAUSE_END, ' ']);
  const pieces = [];
  let rest = Array.from(strip(text));
  while (rest.length) {
    const restText = rest.join('');
    if (countTokens(restText) <= maxTokens) { pieces.push(restText); break; }
    let low = 1, high = rest.length, best = 1;
    while (low <= high) {
      const middle = (low + high) >> 1;
      const candidate = strip(rest.slice(0, middle).join(''));
      if (candidate && countTokens(candidate) <= maxTokens) { best = middle; low = middle + 1; } else { high = middle - 1; }
    }
    let cut = best;
    for (let index = best - 1; index > Math.max(-1, best - 25); index--) {
      if (boundaries.has(rest[index])) { cut = index + 1; break; }
    }
    pieces.push(strip(rest.slice(0, cut).join('')));
    rest = Array.from(strip(rest.slice(cut).join('')));
  }
  return pieces;
}

/** split_text: sentences, then clauses, then a greedy cut; packed greedily within the budget. */
export function splitText(text, countTokens, maxTokens = 75) {
  const original = strip(text);
  if (!original) return [];
  if (maxTokens <= 0) return [original];
  const prepared = prepareForChunking(original);
  const pieces = [];
  for (const sentence of splitAfter(prepared, SENTENCE_END)) {
    const count = countTokens(sentence);
    if (count <= maxTokens) { pieces.push([count, sentence]); continue; }
    for (const clause of splitAfter(sentence, CLAUSE_END)) {
      const n = countTokens(clause);
      if (n <= maxTokens) pieces.push([n, clause]);
      else for (const p of cutToBudget(clause, countTokens, maxTokens)) pieces.push([countTokens(p), p]);
    }
  }
  const chunks = [];
  let current = '', currentCount = 0;
  for (const [count, piece] of pieces) {
    if (current && currentCount + count <= maxTokens) {
      const joiner = hasCjkOrHangul(current) || hasCjkOrHangul(piece) ? '' : ' ';
      const joined = current + joiner + piece;
      const joinedCount = countTokens(joined);
      if (joinedCount <= maxTokens) { current = joined; currentCount = joinedCount; continue; }
    }
    if (current) chunks.push(current);
    current = piece; currentCount = count;
  }
  if (current) chunks.push(current);
  return chunks.length > 1 ? chunks : [original];
}
