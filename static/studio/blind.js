// Blind audition: the board's cards arrive shuffled and named A, B, C... (the page's "Blind" switch,
// studio/ui/handlers.blind_items); the listener ranks them, then reveals the voices. With two
// voices also A/B/X: X is one of the two, drawn here, and the listener says which. Each revealed
// session is kept in localStorage with its ranking (the "Blind results" list).

const KEY = 'moss-tts-blind-v1';
const MAX_KEPT = 30;

export function loadBlindResults() {
  try { return JSON.parse(localStorage.getItem(KEY) || '[]'); } catch (_) { return []; }
}

function saveBlindResult(entry) {
  const kept = [entry, ...loadBlindResults()].slice(0, MAX_KEPT);
  try { localStorage.setItem(KEY, JSON.stringify(kept)); } catch (_) { /* storage full or off: shown, not kept */ }
  return kept;
}

const el = (tag, props = {}, ...children) => {
  const e = Object.assign(document.createElement(tag), props);
  e.append(...children);
  return e;
};

export class BlindPanel {
  /** `root`: the board's blind section; `play(card, label)`: replay a card under another name. */
  constructor(root, historyRoot, { play, changed }) {
    Object.assign(this, { root, historyRoot, play, changed });
    this.session = null;
    this.renderHistory();
  }

  /** A new board: blind when its cards carry the voice to reveal. */
  start(cards, text) {
    if (!cards.length || !cards.every((c) => c.voice)) { this.session = null; this.root.hidden = true; return; }
    const x = cards.length === 2 ? crypto.getRandomValues(new Uint32Array(1))[0] % 2 : null;
    this.session = { cards, text, ranks: cards.map(() => ''), x, xAnswer: null, revealed: false };
    for (const card of cards) card.blindHidden = true;   // no voice, star, note or request shown (results.js)
    this.render();
  }

  render() {
    const s = this.session;
    this.root.hidden = !s;
    if (!s) return;
    const letters = s.cards.map((_, i) => String.fromCharCode(65 + i));
    const ranks = s.cards.map((card, i) => {
      const select = el('select', { id: `rank-${i}`, disabled: s.revealed });
      select.append(el('option', { value: '', textContent: '–' }),
        ...s.cards.map((_, r) => el('option', { value: String(r + 1), textContent: String(r + 1) })));
      select.value = s.ranks[i];
      select.onchange = () => { s.ranks[i] = select.value; this.render(); };
      return el('label', { className: 'blind-rank' }, `Rank of ${letters[i]} `, select,
        s.revealed ? el('strong', { textContent: ` = ${card.voice}` }) : '');
    });
    const parts = [el('p', { className: 'hint', textContent: s.revealed ? 'Revealed.'
      : 'Blind: the voices are hidden. Rank them (1 = best), then reveal.' }), ...ranks];
    if (s.x !== null) {
      const answer = (i) => el('button', { type: 'button', textContent: `X is ${letters[i]}`, disabled: s.revealed,
        onclick: () => { s.xAnswer = i; this.render(); } });
      parts.push(el('div', { className: 'blind-abx' },
        el('button', { type: 'button', textContent: '▶ Play X', onclick: () => this.play(s.cards[s.x], 'X') }),
        answer(0), answer(1),
        el('span', { className: 'hint', textContent: s.xAnswer === null ? 'A/B/X: which one is X?'
          : s.revealed ? (s.xAnswer === s.x ? `X was ${letters[s.x]}: right.` : `X was ${letters[s.x]}.`)
            : `You said X is ${letters[s.xAnswer]}.` })));
    }
    const complete = s.ranks.every((r) => r) && new Set(s.ranks).size === s.ranks.length;
    parts.push(el('button', { type: 'button', id: 'reveal', textContent: 'Reveal', disabled: s.revealed || !complete,
      onclick: () => this.reveal() }));
    this.root.replaceChildren(...parts);
  }

  reveal() {
    const s = this.session;
    s.revealed = true;
    s.cards.forEach((card, i) => {
      card.label = `${String.fromCharCode(65 + i)} (${card.voice})`;
      card.blindHidden = false;
    });
    const ranking = s.cards.map((card, i) => ({ letter: String.fromCharCode(65 + i), voice: card.voice,
      rank: Number(s.ranks[i]), requestId: card.requestId })).sort((a, b) => a.rank - b.rank);
    const abx = s.x === null ? null : { x: String.fromCharCode(65 + s.x), answer: s.xAnswer === null ? null
      : String.fromCharCode(65 + s.xAnswer), right: s.xAnswer === s.x };
    this.renderHistory(saveBlindResult({ at: Date.now(), text: s.text, ranking, abx }));
    this.render();
    this.changed();
  }

  renderHistory(entries = loadBlindResults()) {
    this.historyRoot.hidden = !entries.length;
    const list = entries.map((e) => el('li', {},
      `${new Date(e.at).toLocaleString()} · “${(e.text || '').slice(0, 40)}”: `,
      e.ranking.map((r) => `${r.rank}. ${r.voice} (${r.letter})`).join(', '),
      e.abx ? ` · X was ${e.abx.x}${e.abx.answer ? `, answered ${e.abx.answer}` : ''}` : ''));
    this.historyRoot.replaceChildren(el('summary', { textContent: `Blind results (${entries.length})` }),
      el('ol', {}, ...list));
  }
}
