// Code that reproduces the page's current request through the OpenAI-compatible API.

const RENAMED = {   // the page's stream fields -> /v1/audio/speech's names
  audio_temperature: 'temperature', audio_top_p: 'top_p', audio_top_k: 'top_k',
  audio_repetition_penalty: 'repetition_penalty',
};
const KEPT = ['seed', 'max_frames', 'do_sample', 'text_temperature', 'text_top_p', 'text_top_k', 'speed'];

/** The /v1/audio/speech body for a stream request (a clip uploaded to the page becomes a placeholder). */
export function speechBody(request, format = 'mp3') {
  const body = { model: 'moss-tts-nano', input: request.text || '', response_format: format };
  if (request.voice) body.voice = request.voice;
  if (request.ref_audio_id || request.ref_audio) body.ref_audio = '<base64 of your reference clip>';
  if (request.ref_text) body.ref_text = request.ref_text;
  for (const [from, to] of Object.entries(RENAMED)) if (request[from] != null) body[to] = request[from];
  for (const key of KEPT) if (request[key] != null && !(key === 'speed' && request[key] === 1)) body[key] = request[key];
  return body;
}

const shellQuote = (s) => `'${String(s).replace(/'/g, `'"'"'`)}'`;

export function curlSnippet(origin, request) {
  const body = speechBody(request);
  return [
    `curl -sS ${origin}/v1/audio/speech \\`,
    `  -H 'Content-Type: application/json' \\`,
    `  -d ${shellQuote(JSON.stringify(body))} \\`,
    '  -o speech.mp3',
  ].join('\n');
}

function pyValue(v) {
  if (v === true) return 'True';
  if (v === false) return 'False';
  if (v === null) return 'None';
  return JSON.stringify(v);   // numbers and strings: JSON's spelling is valid Python here
}

export function pythonSnippet(origin, request) {
  const body = speechBody(request);
  const standard = ['model', 'input', 'voice', 'response_format', 'speed'];
  const lines = [
    'from openai import OpenAI',
    '',
    `client = OpenAI(base_url=${pyValue(`${origin}/v1`)}, api_key="not-needed")`,
    'with client.audio.speech.with_streaming_response.create(',
  ];
  for (const key of standard) if (body[key] !== undefined) lines.push(`    ${key}=${pyValue(body[key])},`);
  const extra = Object.entries(body).filter(([key]) => !standard.includes(key));
  if (extra.length) {
    lines.push('    extra_body={');
    for (const [key, value] of extra) lines.push(`        ${pyValue(key)}: ${pyValue(value)},`);
    lines.push('    },');
  }
  lines.push(') as response:', '    response.stream_to_file("speech.mp3")');
  return lines.join('\n');
}
