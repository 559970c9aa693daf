// Spelling out numbers in Chinese or English text: a port of tts_core/text/numbers.py (same
// coverage, same words). BigInt holds the up-to-16-digit Chinese integers exactly.

const NUMBER = /(?<![A-Za-z0-9_.,:/+\-$€£¥￥#@])([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.([0-9]+))?([%％]?)(?![A-Za-z0-9_%％]|[.,:/\-][0-9])/g;
const ZH_DIGITS = '零一二三四五六七八九';
const ZH_MEASURES = new Set('个位只条次天本张件种名岁年周页人家台辆块点分秒');
const EN_ONES = ['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten', 'eleven',
  'twelve', 'thirteen', 'fourteen', 'fifteen', 'sixteen', 'seventeen', 'eighteen', 'nineteen'];
const EN_TENS = ['', '', 'twenty', 'thirty', 'forty', 'fifty', 'sixty', 'seventy', 'eighty', 'ninety'];
const EN_SCALES = ['', ' thousand', ' million', ' billion'];

/** Numbers of `text` in words of `language` ('zh' or 'en'); other languages are left alone. */
export function spellNumbers(text, language) {
  if (language !== 'zh' && language !== 'en') return text;
  return text.replace(NUMBER, (match, whole, fraction, percent, offset, string) => {
    const integer = whole.replaceAll(',', '');
    const before = string.slice(Math.max(0, offset - 1), offset);
    const after = Array.from(string.slice(offset + match.length))[0] ?? '';
    if (language === 'zh') {
      let spoken;
      if (!fraction && !percent && integer.length === 4 && after === '年') spoken = zhDigits(integer);
      else if (integer === '2' && !fraction && !percent && ZH_MEASURES.has(after) && before !== '第') spoken = '两';
      else spoken = zhNumber(integer) + (fraction ? `点${zhDigits(fraction)}` : '');
      return percent ? `百分之${spoken}` : spoken;
    }
    const spoken = enNumber(integer) + (fraction ? ` point ${enDigits(fraction)}` : '');
    return percent ? `${spoken} percent` : spoken;
  });
}

const zhDigits = (digits) => Array.from(digits, (d) => ZH_DIGITS[Number(d)]).join('');

function zhBelow10k(value) {
  const out = [];
  let pendingZero = false;
  for (const [unitValue, unit] of [[1000, '千'], [100, '百'], [10, '十'], [1, '']]) {
    const digit = Math.floor(value / unitValue) % 10;
    if (digit === 0) { pendingZero = pendingZero || out.length > 0; continue; }
    if (pendingZero) { out.push('零'); pendingZero = false; }
    out.push((digit === 2 && unit === '千' ? '两' : ZH_DIGITS[digit]) + unit);
  }
  return out.join('');
}

function zhNumber(digits) {
  if ((digits.length > 1 && digits[0] === '0') || digits.length > 16) return zhDigits(digits);
  let value = BigInt(digits);
  if (value === 0n) return '零';
  const groups = [];
  while (value) { groups.push(Number(value % 10000n)); value /= 10000n; }
  let out = '', skipped = false;
  for (let index = groups.length - 1; index >= 0; index--) {
    const group = groups[index];
    if (group === 0) { skipped = out.length > 0; continue; }
    if (out && (skipped || group < 1000)) out += '零';
    out += (group === 2 && index > 0 ? '两' : zhBelow10k(group)) + ['', '万', '亿', '万亿'][index];
    skipped = false;
  }
  return out.startsWith('一十') ? out.slice(1) : out;
}

const enDigits = (digits) => Array.from(digits, (d) => EN_ONES[Number(d)]).join(' ');

function enBelow1000(value) {
  const words = value >= 100 ? [`${EN_ONES[Math.floor(value / 100)]} hundred`] : [];
  const rest = value % 100;
  if (rest >= 20) words.push(EN_TENS[Math.floor(rest / 10)] + (rest % 10 ? `-${EN_ONES[rest % 10]}` : ''));
  else if (rest) words.push(EN_ONES[rest]);
  return words.join(' ');
}

function enNumber(digits) {
  if ((digits.length > 1 && digits[0] === '0') || digits.length > 12) return enDigits(digits);
  let value = Number(digits);
  if (value === 0) return 'zero';
  const parts = [];
  let scale = 0;
  while (value) {
    const group = value % 1000;
    value = Math.floor(value / 1000);
    if (group) parts.push(enBelow1000(group) + EN_SCALES[scale]);
    scale++;
  }
  return parts.reverse().join(' ');
}
