// Text cleanup before tokenising: a port of tts_core/text/normalize.py (normalize_text and
// detect_language), rule for rule and in the same order. Python's \s and \w are spelled out
// (JS's differ), and indices count code points. tests/unit/test_browser_text.py holds the two to the
// same output on a corpus in Latin, Chinese and Japanese script.

import { PY_SPACE, strip } from './chunking.js';
import { spellNumbers } from './numbers.js';

const S = `[${PY_SPACE}]`;
const CJK = '[\\u3400-\\u4dbf\\u4e00-\\u9fff\\u3040-\\u30ff]';
const PROT_BASE = 0xe000, PROT_MAX = 0xf8ff - 0xe000;
const PROT = '[\\ue000-\\uf8ff]';
const TOK = 'A-Za-z0-9./+:\\-';

const re = (source, flags = '') => new RegExp(source, `u${flags}`);
const ZERO_WIDTH = re('[\\u200b-\\u200d\\u2060\\ufeff]', 'g');
const OTHER = re('[^\\P{C}\\n\\t]', 'g');    // every "C*" character but \n and \t
const MD_LINK = re(`\\[([^\\[\\]\\n]+?)\\]\\((https?://[^)${PY_SPACE}]+)\\)`, 'g');
const MD_PREFIXES = [`^#{1,6}${S}+`, `^>${S}+`, `^[-*+]${S}+`, `^\\p{Nd}+[.)]${S}+`].map((p) => re(p));
const ARROW = re(`${S}*(?:<[-=]+>|[-=]+>|<[-=]+|[→←↔⇒⇐⇔⟶⟵⟷⟹⟸⟺↦↤↪↩])${S}*`, 'g');
const PROTECTORS = [
  re(`https?://[^${PY_SPACE}，。！？；、）】》〉」』]+`, 'gi'),
  re(`(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\\.[A-Za-z0-9-]+)*\\.[A-Za-z]{2,}(?![\\p{L}\\p{N}_.-])`, 'g'),
  re('(?<![A-Za-z0-9_])@[A-Za-z0-9_]{1,32}', 'g'),
  re('(?<![A-Za-z0-9_/])[ru]/[A-Za-z0-9_]+', 'g'),
  re(`(?<![A-Za-z0-9_&])#[^${PY_SPACE}#，。！？；：、,!?;]+`, 'g'),
  re('(?<![A-Za-z0-9_.])\\.[A-Za-z0-9][A-Za-z0-9_.-]*', 'g'),
  re(`(?<![${TOK}_])[${TOK}_]*[./+:\\-][${TOK}_]*`, 'g'),
];
const TRAILING_JUNK = '.,;:!?\'"-_/+';
const URL_TRAILING = '.,;:!?\'"';
const CLOSERS = new Set('"\')]}）】》〉」』”’');

const rstripChars = (text, chars) => { let end = text.length; while (end > 0 && chars.includes(text[end - 1])) end--; return text.slice(0, end); };
const lstripChars = (text, chars) => { let start = 0; while (start < text.length && chars.includes(text[start])) start++; return text.slice(start); };
const isPunctuation = (ch) => /^\p{P}$/u.test(ch);

/** Non-semantic cleanup (docs/spec/LM.md §4.6) plus number reading; never throws on a string. */
export function normalizeText(text, { readNumbers = true, language = null } = {}) {
  text = baseCleanup(text);
  text = markdownAndLines(text);
  text = text.replace(ARROW, '，');
  let spans;
  [text, spans] = protect(text);
  text = text.replaceAll('_', ' ');
  text = normalizeSpaces(text);
  text = structuralPunctuation(text);
  text = repeatedPunctuation(text);
  text = normalizeSpaces(text);
  if (readNumbers) {
    language = language || detectLanguage(text);
    if (language === 'zh') text = text.replace(re(`(${CJK})${S}*-${S}*(?=${CJK})`, 'g'), '$1，');
    text = spellNumbers(text, language);
  }
  text = strip(restore(text, spans));
  return ensureTerminal(text);
}

function baseCleanup(text) {
  text = text.replaceAll('\r\n', '\n').replaceAll('\r', '\n').replaceAll('\u3000', ' ');
  return text.replace(ZERO_WIDTH, '').replace(OTHER, '');
}

function markdownAndLines(text) {
  text = text.replace(MD_LINK, '$1 $2');
  const lines = [];
  for (const raw of text.split('\n')) {
    let line = strip(raw);
    for (const prefix of MD_PREFIXES) line = line.replace(prefix, '');
    if (line) lines.push(line);
  }
  return [...lines.slice(0, -1).map(ensureTerminal), ...lines.slice(-1)].join(' ');
}

function restore(text, spans) {
  if (!spans.length) return text;
  return text.replace(re(PROT, 'g'), (ch) => spans[ch.codePointAt(0) - PROT_BASE]);
}

function protect(text) {
  const spans = [];
  const hide = (core) => {
    if (spans.length > PROT_MAX) return core;
    spans.push(restore(core, spans));   // a span may swallow earlier ones (#@x): store it flat
    return String.fromCodePoint(PROT_BASE + spans.length - 1);
  };
  PROTECTORS.forEach((pattern, index) => {
    const last = index === PROTECTORS.length - 1;
    text = text.replace(pattern, (whole) => {
      let token = whole, lead = '';
      if (last) {
        const stripped = lstripChars(token, './+:-_');
        lead = token.slice(0, token.length - stripped.length);
        token = stripped;
      }
      let core;
      if (index === 0) {
        core = rstripChars(token, URL_TRAILING);
        if (core.endsWith(')') && !core.includes('(')) core = rstripChars(core, ')');
      } else if (token.startsWith('#') || token.startsWith('@')) {
        core = rstripChars(token, '.');
      } else {
        core = rstripChars(token, TRAILING_JUNK);
      }
      const tail = token.slice(core.length);
      if (last && (!/[A-Za-z]/.test(core) || !/[./+:-]/.test(core))) return whole;
      return lead + (core ? hide(core) : '') + tail;
    });
  });
  return [text, spans];
}

function latinThenCjk(token) {
  const core = lstripChars(token, './+:-');
  const first = Array.from(core)[0] ?? '';
  const latinish = re(`^${PROT}`).test(token) || (first.charCodeAt(0) < 128 || first === '') && /[A-Za-z]/.test(core);
  return latinish ? `${token} ` : token;
}

function normalizeSpaces(text) {
  text = text.replace(re(`${S}+`, 'g'), ' ');
  text = text.replace(re(`(${CJK}) (?=${CJK})`, 'g'), '$1');
  text = text.replace(re(`(${CJK}) (?=[0-9])`, 'g'), '$1');
  text = text.replace(re(`([0-9]) (?=${CJK})`, 'g'), '$1');
  text = text.replace(re(`(${CJK})(?=${PROT}|[A-Za-z]|[0-9][${TOK}]*?[A-Za-z])`, 'g'), '$1 ');
  text = text.replace(re(`(?:(?<![${TOK}])[${TOK}]+|${PROT})(?=${CJK})`, 'g'), latinThenCjk);
  text = text.replace(/ +([，。！？；：、”’」』】）》])/gu, '$1');
  text = text.replace(/([（【「『《“‘]) +/gu, '$1');
  text = text.replace(/([，。！？；：、]) +/gu, '$1');
  text = text.replace(/ +([,.;!?])/gu, '$1');
  return strip(text.replace(/ {2,}/gu, ' '));
}

function structuralPunctuation(text) {
  text = text.replace(re(`\\[${S}*([^\\[\\]]+?)${S}*\\]`, 'g'), '"$1"');
  text = text.replace(re(`\\{${S}*([^{}]+?)${S}*\\}`, 'g'), '"$1"');
  const nested = re(`[【〖『「]${S}*([^【〖『「】〗』」]+?)${S}*[】〗』」]`, 'g');
  for (let i = 0; i < 3; i++) {
    let count = 0;
    text = text.replace(nested, (_, inner) => { count++; return `"${inner}"`; });
    if (!count) break;
  }
  if (/[】〗』」]/u.test(text)) text = text.replace(re(`[【〖『「]${S}*([^】〗』」]+?)${S}*[】〗』」]`, 'g'), '"$1"');
  text = text.replace(re(`(^|[。！？!?；;]${S}*)《([^《》]+)》(?=${S}*(?:${PROT}|[—–―-]{2,}|$|[。！？!?；;，,]))`, 'g'),
    '$1$2');
  text = text.replace(ARROW, '，');
  return text.replace(re(`${S}*[—–―-]{2,}${S}*`, 'g'), '。');
}

function mixedMarks(run) {
  const question = /[?？]/.test(run), bang = /[!！]/.test(run);
  return question && bang ? '？！' : (question ? '？' : '！');
}

function repeatedPunctuation(text) {
  text = text.replace(/\.{3,}|…+/gu, '。');
  text = text.replace(/[。．]{2,}/gu, '。');
  text = text.replace(/[，,]{2,}/gu, '，');
  return text.replace(/[!?！？]{2,}/gu, mixedMarks);
}

/** Append "。" unless the last character before any closers is punctuation. */
export function ensureTerminal(text) {
  const chars = Array.from(text);
  let end = Array.from(text.replace(re(`${S}+$`), '')).length;
  while (end > 0 && CLOSERS.has(chars[end - 1])) end--;
  if (!text || (end > 0 && isPunctuation(chars[end - 1]))) return text;
  return `${text}。`;
}

/** Kana -> ja; else an ideograph -> zh; else hangul -> ko; else an ASCII letter -> en; else the
 *  voice's language, else zh. */
export function detectLanguage(text, voiceLanguage = null) {
  let han = false, hangul = false, latin = false;
  for (const ch of text) {
    if (ch >= '\u3040' && ch <= '\u30ff') return 'ja';
    if (ch >= '\u3400' && ch <= '\u9fff') han = true;
    else if ((ch >= '\uac00' && ch <= '\ud7af') || (ch >= '\u1100' && ch <= '\u11ff') || (ch >= '\u3130' && ch <= '\u318f')) hangul = true;
    else if (/^[A-Za-z]$/.test(ch)) latin = true;
  }
  if (han) return 'zh';
  if (hangul) return 'ko';
  if (latin) return 'en';
  return voiceLanguage || 'zh';
}
