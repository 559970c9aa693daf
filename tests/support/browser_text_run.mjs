// Runs the browser engine's text front-end and tokenizer in Node on a corpus (stdin: JSON
// {tokenizer, texts}); prints JSON [{normalized, language, ids, chunks}] per text.
import { readFileSync } from 'node:fs';
import { SentencePiece } from '../../static/engine/sentencepiece.js';
import { detectLanguage, normalizeText } from '../../static/engine/normalize.js';
import { splitText } from '../../static/engine/chunking.js';

const input = JSON.parse(readFileSync(0, 'utf8'));
const sp = new SentencePiece(input.tokenizer);
const count = (t) => sp.encode(t).length;
const out = input.texts.map((text) => {
  const language = detectLanguage(text);
  const normalized = normalizeText(text, { language });
  return { normalized, language, ids: sp.encode(text), normalizedIds: sp.encode(normalized),
    chunks: splitText(normalized, count, 20) };
});
process.stdout.write(JSON.stringify(out));
