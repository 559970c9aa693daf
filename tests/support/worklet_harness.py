"""Drive static/player/worklet.js quantum by quantum in Chromium's JS engine (no audio device): the
AudioWorkletGlobalScope stubbed as globals, the worklet imported as the page imports it, a sine source
and a paced source whose chunks arrive at chosen render quanta. Used by test_worklet*.py."""

from __future__ import annotations

import math

HARNESS = """
async ([contextRate, ringSeconds]) => {
  Object.assign(globalThis, { sampleRate: contextRate, currentFrame: 0, currentTime: 0 });
  globalThis.AudioWorkletProcessor = class {
    constructor() {
      this.out = [];
      this.port = { postMessage: (m) => {   // copied as a real port copies it: the worklet reuses its objects
        const c = structuredClone(m);
        if (c.stats) c.stats.underrunsAt = Array.from(c.stats.underrunsAt.slice(0, Math.min(c.stats.underruns, 20)));
        this.out.push(c);
      } };
    }
  };
  globalThis.registerProcessor = (name, cls) => { globalThis.Proc = cls; };
  await import('/player/worklet.js');
  window.driver = {
    node: new globalThis.Proc({ processorOptions: { ringSeconds } }),
    send(m) { this.node.port.onmessage({ data: m }); },
    quantum() {   // one render quantum: 128 frames, two channels
      const L = new Float32Array(128), R = new Float32Array(128);
      this.node.process([], [[L, R]]);
      globalThis.currentFrame += 128; globalThis.currentTime = globalThis.currentFrame / globalThis.sampleRate;
      return [L, R];
    },
  };
  return true;
}
"""


def start(js, context_rate=48_000, ring_seconds=20):
    js.evaluate(HARNESS, [context_rate, ring_seconds])


def run(js, script: str):
    """Evaluate `script` with `d` bound to the driver; returns its value."""
    return js.evaluate(f"(() => {{ const d = window.driver; {script} }})()")


SINE = """
const sine = (n, from, rate, freq) => {   // interleaved stereo: L = sine, R = -0.5 * sine
  const a = new Float32Array(2 * n);
  for (let i = 0; i < n; i++) { const v = 0.25 * Math.sin(2 * Math.PI * freq * (from + i) / rate); a[2*i] = v; a[2*i+1] = -0.5 * v; }
  return a;
};
"""


# ---- a paced source: chunks arrive at chosen times, the worklet is driven quantum by quantum -------

QUANTUM_MS = 128 / 48  # one render quantum at 48 kHz
FRAME = 3840  # samples per channel in one 80 ms codec frame

PACED = """
const [schedule, prebufferMs, estimatedS, startQ] = args;   // schedule: [[quantum index, frames], ...] in arrival order
const src = [], out = [], arrivals = [];
let from = 0, next = 0, q = 0;
while (true) {
  if (startQ != null && q === startQ) d.send({type: 'start', id: 1, inputRate: 48000, prebufferMs, estimatedS});
  while (next < schedule.length && schedule[next][0] <= q) {   // what arrived before this quantum
    // The server sends its headers with the first audio: the stream starts when that arrives.
    if (next === 0 && startQ == null) d.send({type: 'start', id: 1, inputRate: 48000, prebufferMs, estimatedS});
    const chunk = sine(schedule[next][1], from, 48000, 440);
    for (const v of chunk) src.push(v);
    from += schedule[next][1];
    d.send({type: 'pcm', data: chunk});
    arrivals.push([q * 128 / 48, from]);
    next += 1;
    if (next === schedule.length) d.send({type: 'end'});
  }
  const [L, R] = d.quantum();
  q += 1;
  for (let i = 0; i < 128; i++) out.push(L[i], R[i]);
  if (((next > 0 || (startQ != null && q > startQ)) && d.node.state === 'idle') || q > 100000) break;
}
const lead = 2 * d.node.out.find((m) => m.type === 'first-audio').frame;
let mismatches = 0;   // against the source from the first audible sample on, the faded last 2 ms aside
for (let i = 0; i < src.length - 2 * 96; i++) if (Math.fround(src[i]) !== out[lead + i]) mismatches += 1;
let sumSq = 0, srcSumSq = 0;
for (const v of out) sumSq += v * v;
for (const v of src) srcSumSq += Math.fround(v) * Math.fround(v);
const s = d.node.out.find((m) => m.type === 'finished').stats;
const plans = d.node.out.filter((m) => m.type === 'stats' && m.stats.plan && m.stats.state !== 'playing')
  .map((m) => [m.stats.currentTime, m.stats.state, m.stats.plan.waitS]);
return {s, arrivals, mismatches, quanta: q, lead, total: from, sumSq, srcSumSq, plans};
"""


def paced_schedule(chunk_frames: list[int], rtf: float, first_ms: float, stall_after: int = -1,
                   stall_ms: float = 0.0) -> list[list[int]]:
    """A generator at a steady real-time factor: chunk i (of chunk_frames[i] codec frames) is ready
    first_ms + rtf x (audio made so far) after the request, optionally after a stall; arrivals snap to
    the next render quantum, as the worklet only sees messages between quanta."""
    schedule, made_ms = [], 0.0
    for i, frames in enumerate(chunk_frames):
        made_ms += 80 * frames
        ready_ms = first_ms + rtf * made_ms + (stall_ms if i > stall_after >= 0 else 0.0)
        schedule.append([math.ceil(ready_ms / QUANTUM_MS), frames * FRAME])
    return schedule



def run_paced(js, schedule, prebuffer_ms=200, estimated_s=None, start_quantum=None) -> dict:
    start(js)
    return js.evaluate(f"(args) => {{ const d = window.driver; {SINE} {PACED} }}",
                       [schedule, prebuffer_ms, estimated_s, start_quantum])
