// Prompt rows of the global transformer: a port of tts_core/prompt.py (docs/spec/LM.md §4.2-4.4).
// A row is n_vq + 1 integers: the text/slot token, then one code per codebook (the audio pad id
// in text rows). Each template piece is encoded by its own call (its own dummy prefix), as there.

const USER_ROLE_PREFIX = 'user\n';
const USER_TEMPLATE_REFERENCE_PREFIX = '<user_inst>\n- Reference(s):\n';
const USER_TEMPLATE_AFTER_REFERENCE = '\n- Instruction:\nNone\n- Tokens:\nNone\n- Quality:\nNone\n'
  + '- Sound Event:\nNone\n- Ambient Sound:\nNone\n- Language:\nNone\n- Text:\n';
const NO_REFERENCE = 'None';
const USER_TEMPLATE_SUFFIX = '\n</user_inst>';
const ASSISTANT_TURN_PREFIX = '\n';
const ASSISTANT_ROLE_PREFIX = 'assistant\n';

/** The fixed id blocks of the chat template (PromptTemplate.from_tokenizer). */
export function promptTemplate(tokenizer, lm) {
  const enc = (t) => tokenizer.encode(t);
  return {
    userPrefix: [lm.im_start_id, ...enc(USER_ROLE_PREFIX), ...enc(USER_TEMPLATE_REFERENCE_PREFIX)],
    noReference: enc(NO_REFERENCE),
    afterReference: enc(USER_TEMPLATE_AFTER_REFERENCE),
    assistantPrefix: [...enc(USER_TEMPLATE_SUFFIX), lm.im_end_id, ...enc(ASSISTANT_TURN_PREFIX), lm.im_start_id,
      ...enc(ASSISTANT_ROLE_PREFIX)],
    lm,
  };
}

/** Reference codes {data: Int32Array, frames} checked against the codebooks; throws naming the fix. */
export function checkCodes(codes, lm) {
  const nq = lm.n_vq;
  if (!(codes instanceof Int32Array) || codes.length < nq || codes.length % nq !== 0) {
    throw new Error(`voice.codes must be an Int32Array of frames x ${nq} codes`);
  }
  for (let i = 0; i < codes.length; i++) {
    const size = lm.codebook_sizes[i % nq];
    if (!(codes[i] >= 0 && codes[i] < size)) {
      throw new Error(`voice.codes: code ${codes[i]} at frame ${Math.floor(i / nq)}, codebook ${i % nq} `
        + `is outside [0, ${size}): codes must come from the matching codec`);
    }
  }
  return codes;
}

/**
 * Rows [T x (n_vq + 1)] as a flat BigInt64Array (ONNX int64), T, and how many leading rows every
 * prompt of this voice shares (tts_core/jobs.py: voice_clone_prefix_rows, continuation_prefix_rows).
 */
export function buildPromptRows(template, mode, textIds, promptCodes) {
  const lm = template.lm;
  const width = lm.n_vq + 1;
  const parts = [];   // [kind, ids or codes, slot]
  const text = (ids) => parts.push(['text', ids]);
  const audio = (codes, slot) => parts.push(['audio', checkCodes(codes, lm), slot]);
  if (mode === 'voice_clone') {
    if (!promptCodes) throw new Error('voice_clone mode needs reference codes: pass voice');
    text([...template.userPrefix, lm.audio_start_id]);
    audio(promptCodes, lm.audio_user_slot_id);
    text([lm.audio_end_id, ...template.afterReference, ...textIds, ...template.assistantPrefix, lm.audio_start_id]);
  } else if (mode === 'continuation') {
    text([...template.userPrefix, ...template.noReference, ...template.afterReference, ...textIds,
      ...template.assistantPrefix, lm.audio_start_id]);
    if (promptCodes) audio(promptCodes, lm.audio_assistant_slot_id);
  } else {
    throw new Error(`mode must be 'voice_clone' or 'continuation', got ${JSON.stringify(mode)}`);
  }
  const count = parts.reduce((n, [kind, v]) => n + (kind === 'text' ? v.length : v.length / lm.n_vq), 0);
  const prefixRows = mode === 'voice_clone'
    ? template.userPrefix.length + 1 + promptCodes.length / lm.n_vq + 1 + template.afterReference.length
    : template.userPrefix.length + template.noReference.length + template.afterReference.length;
  const rows = new BigInt64Array(count * width);
  let r = 0;
  for (const [kind, values, slot] of parts) {
    if (kind === 'text') {
      for (const id of values) {
        rows[r * width] = BigInt(id);
        for (let k = 1; k < width; k++) rows[r * width + k] = BigInt(lm.audio_pad_id);
        r++;
      }
    } else {
      for (let f = 0; f < values.length / lm.n_vq; f++, r++) {
        rows[r * width] = BigInt(slot);
        for (let k = 0; k < lm.n_vq; k++) rows[r * width + 1 + k] = BigInt(values[f * lm.n_vq + k]);
      }
    }
  }
  return { rows, count, prefixRows };
}
