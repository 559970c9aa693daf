"""static/worklet.js driven quantum by quantum in Chromium's JS engine, without an audio device.

Deterministic checks of the ring buffer arithmetic: bit-exact joins across odd chunk sizes, the
prebuffer, underrun accounting with fades, the stop fade, ring growth, the resampler, restart and
stop. Paced sources (chunks arriving at chosen render quanta) tie `chunks_arrived_in_time`, which
decides where the browser tests may demand "no gap", to what this worklet actually does. With an
estimate of the total length the worklet plans its start (buffering.js): slow paced sources play
through with at most one rebuffer, fast ones keep the short start. Nothing here depends on the
machine's speed: time is the count of quanta the test runs.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from e2e_helpers import chunks_arrived_in_time

pytest_plugins = ["e2e_helpers"]
pytestmark = pytest.mark.e2e

HARNESS = """
async (contextRate) => {
  Object.assign(globalThis, { sampleRate: contextRate, currentFrame: 0, currentTime: 0 });
  globalThis.AudioWorkletProcessor = class {
    constructor() { this.out = []; this.port = { postMessage: (m) => this.out.push(m) }; }
  };
  globalThis.registerProcessor = (name, cls) => { globalThis.Proc = cls; };
  await import('/worklet.js');
  window.driver = {
    node: new globalThis.Proc(),
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


@pytest.fixture
def js(static_page):
    return static_page


def start(js, context_rate=48_000):
    js.evaluate(HARNESS, context_rate)


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


def test_odd_sized_chunks_play_bit_exact_after_the_prebuffer(js):
    start(js)
    result = run(js, SINE + """
      d.send({type: 'start', id: 1, inputRate: 48000, prebufferMs: 10});   // 480 frames
      const sizes = [1, 127, 300, 7, 1000, 2000, 33, 3840];
      let from = 0;
      const src = [];
      const out = [];
      let silentQuanta = 0;
      for (const n of sizes) {
        const chunk = sine(n, from, 48000, 440);
        src.push(...chunk); from += n;
        d.send({type: 'pcm', data: chunk});
        const [L, R] = d.quantum();
        if (d.node.state === 'prebuffering') silentQuanta += 1;
        for (let i = 0; i < 128; i++) out.push(L[i], R[i]);
      }
      d.send({type: 'end'});
      while (d.node.state !== 'idle') { const [L, R] = d.quantum(); for (let i = 0; i < 128; i++) out.push(L[i], R[i]); }
      const firstAudio = d.node.out.find((m) => m.type === 'first-audio');
      const fin = d.node.out.find((m) => m.type === 'finished').stats;
      // the output is silence until playback starts (at a quantum's start), then the source in order
      const lead = silentQuanta * 128 * 2;
      const played = out.slice(lead, lead + src.length);
      let mismatches = 0;
      for (let i = 0; i < src.length - 2 * 96; i++) if (Math.fround(src[i]) !== played[i]) mismatches += 1;
      return {mismatches, total: src.length / 2, fin, firstFrame: firstAudio.frame, silentQuanta};
    """)
    assert result["mismatches"] == 0  # every join bit-exact (the last 2 ms fade out by design)
    fin = result["fin"]
    assert fin["framesRendered"] == fin["framesReceived"] == result["total"]
    assert fin["underruns"] == 0 and fin["underrunFrames"] == 0
    assert fin["outChannels"] == 2
    assert result["silentQuanta"] >= 1 and result["firstFrame"] > 0  # waited for 480 frames first


def test_underrun_is_counted_faded_and_followed_by_a_larger_rebuffer(js):
    start(js)
    result = run(js, SINE + """
      d.send({type: 'start', id: 1, inputRate: 48000, prebufferMs: 0});
      d.send({type: 'pcm', data: sine(200, 0, 48000, 440)});   // 1.56 quanta, then nothing
      const q1 = d.quantum(), q2 = d.quantum(), q3 = d.quantum();
      const starved = d.node.state;
      const rebuffer = d.node.rebufferFrames;
      d.send({type: 'pcm', data: sine(4000, 200, 48000, 440)});
      const q4 = d.quantum();
      d.send({type: 'end'});
      while (d.node.state !== 'idle') d.quantum();
      const s = d.node.out.find((m) => m.type === 'finished').stats;
      return {starved, rebuffer, s, tail: Array.from(q2[0].slice(60, 75)), head: Array.from(q4[0].slice(0, 4)),
              expectHead: Array.from(sine(4, 200, 48000, 440).filter((_, i) => i % 2 === 0))};
    """)
    s = result["s"]
    assert result["starved"] == "starved"
    assert s["underruns"] == 1
    assert s["underrunFrames"] == (128 - 72) + 128  # the rest of quantum 2, then all of quantum 3
    assert s["underrunsAt"] == [200]
    assert result["rebuffer"] >= 2_400  # waits for at least 50 ms more before resuming
    assert abs(result["tail"][-4]) < 0.02 and result["tail"][-1] == 0  # faded into the gap, then silence
    head, expect = result["head"], result["expectHead"]
    assert head[0] == 0 and abs(head[3]) < abs(expect[3])  # resumes with a fade-in
    assert s["framesRendered"] == s["framesReceived"] == 4200


def test_stop_fades_out_within_a_few_ms_and_clears_the_ring(js):
    start(js)
    result = run(js, SINE + """
      d.send({type: 'start', id: 7, inputRate: 48000, prebufferMs: 0});
      d.send({type: 'pcm', data: sine(48000, 0, 48000, 100)});
      for (let i = 0; i < 10; i++) d.quantum();
      d.send({type: 'stop'});
      const outs = [];
      for (let i = 0; i < 8; i++) outs.push(Array.from(d.quantum()[0]));
      const stopped = d.node.out.find((m) => m.type === 'stopped');
      return {outs, stopped: stopped && stopped.id, state: d.node.state, buffered: d.node.avail};
    """)
    assert result["stopped"] == 7 and result["state"] == "idle" and result["buffered"] == 0
    flat = [v for q in result["outs"] for v in q]
    fade = math.ceil(0.012 * 48_000)
    assert all(v == 0 for v in flat[fade + 1:])  # silent after the 12 ms fade
    assert float(np.abs(np.diff(flat)).max()) < 0.01  # no click: a 100 Hz sine fading out moves in tiny steps


def test_ring_grows_when_the_producer_is_far_ahead(js):
    start(js)
    result = run(js, SINE + """
      d.send({type: 'start', id: 1, inputRate: 48000, prebufferMs: 0});
      const cap = d.node.capacity;
      d.send({type: 'pcm', data: sine(cap + 5000, 0, 48000, 440)});
      return {cap, grown: d.node.capacity, avail: d.node.avail, first: d.quantum()[0][5],
              expect: sine(6, 0, 48000, 440)[10]};
    """)
    assert result["grown"] > result["cap"] and result["avail"] == result["cap"] + 5000
    assert result["first"] == pytest.approx(result["expect"], abs=1e-7)


def test_resampler_turns_48k_into_a_clean_44k1_sine(js):
    start(js, context_rate=44_100)
    result = run(js, SINE + """
      d.send({type: 'start', id: 1, inputRate: 48000, prebufferMs: 0});
      let from = 0;
      for (const n of [3840, 1000, 7, 3840, 2953]) { d.send({type: 'pcm', data: sine(n, from, 48000, 440)}); from += n; }
      d.send({type: 'end'});
      const out = [];
      while (d.node.state !== 'idle') { const [L] = d.quantum(); out.push(...L); }
      const s = d.node.out.find((m) => m.type === 'finished').stats;
      let err = 0;   // against the ideal 440 Hz sine at 44.1 kHz, away from the faded ends
      for (let i = 200; i < s.framesRendered - 200; i++) {
        err = Math.max(err, Math.abs(out[i] - 0.25 * Math.sin(2 * Math.PI * 440 * i / 44100)));
      }
      return {s, from, err};
    """)
    s = result["s"]
    assert s["resampling"] and s["contextRate"] == 44_100
    assert abs(s["framesRendered"] - round(result["from"] * 44_100 / 48_000)) <= 2
    assert result["err"] < 1e-3  # cubic interpolation of a 440 Hz tone: no seams at chunk joins
    assert s["underruns"] == 0


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


PACED_CASES = {
    # name: (schedule, prebuffer ms, provably in time)
    "server-like, RTF 0.3": (paced_schedule([1, 1, 1, 2, 2, 4, 4, 8, 8], 0.3, 150), 200, True),
    "one frame per chunk, RTF 0.9": (paced_schedule([1] * 30, 0.9, 100), 200, True),
    "RTF 1.0: the prebuffer is the only cushion": (paced_schedule([1] * 20, 1.0, 100), 200, True),
    "shorter than the prebuffer": (paced_schedule([1], 0.5, 100), 200, True),
    "RTF 1.3": (paced_schedule([1] * 12, 1.3, 100), 200, False),
    "1.5 s stall after 10 frames": (paced_schedule([1] * 15, 0.2, 100, stall_after=9, stall_ms=1500), 200, False),
}


@pytest.mark.parametrize("case", PACED_CASES)
def test_paced_source_gapless_exactly_when_chunks_arrive_in_time(js, case):
    schedule, prebuffer_ms, in_time = PACED_CASES[case]
    start(js)
    result = js.evaluate(f"(args) => {{ const d = window.driver; {SINE} {PACED} }}", [schedule, prebuffer_ms])
    s, total = result["s"], result["total"]
    # The harness's own clock: a chunk ready at a quantum boundary is in time for that quantum, so
    # the margin is one quantum (a real playhead reads a whole quantum at its start).
    proved = chunks_arrived_in_time(result["arrivals"], total_frames=total, prebuffer_ms=prebuffer_ms,
                                    margin_ms=QUANTUM_MS)
    assert proved == in_time
    assert s["framesReceived"] == s["framesRendered"] == total  # every frame played, gaps or not
    # Every output quantum is accounted for: silence before the start, audio, counted gap silence, and
    # the unfilled rest of the last quantum.
    tail = result["quanta"] * 128 - result["lead"] // 2 - s["framesRendered"] - s["underrunFrames"]
    assert 0 <= tail < 128
    assert len(s["underrunsAt"]) == s["underruns"] and (s["underruns"] == 0) == (s["underrunFrames"] == 0)
    if proved:
        assert s["underruns"] == 0, s
        assert result["mismatches"] == 0  # the source, sample for sample, across every chunk join
    else:
        assert s["underruns"] >= 1  # these sources are slow enough to starve any real-time player
        assert result["sumSq"] < result["srcSumSq"]  # gaps are silence, faded in and out
    # Playback began in the very quantum the prebuffer filled (or the stream ended), not before.
    prebuffer_frames = 48 * prebuffer_ms
    filled = next((ms for ms, frames in result["arrivals"] if frames >= prebuffer_frames), result["arrivals"][-1][0])
    assert result["lead"] // 2 == round(filled / QUANTUM_MS) * 128


def test_start_resets_a_stream_that_is_still_playing(js):
    start(js)
    result = run(js, SINE + """
      d.send({type: 'start', id: 1, inputRate: 48000, prebufferMs: 0});
      d.send({type: 'pcm', data: sine(10000, 0, 48000, 440)});
      for (let i = 0; i < 5; i++) d.quantum();
      d.send({type: 'start', id: 2, inputRate: 48000, prebufferMs: 0});
      const reset = {state: d.node.state, buffered: d.node.avail, rendered: d.node.s.framesRendered};
      const fresh = sine(1000, 0, 48000, 1000);
      d.send({type: 'pcm', data: fresh});
      d.send({type: 'end'});
      const out = [];
      while (d.node.state !== 'idle') { const [L, R] = d.quantum(); for (let i = 0; i < 128; i++) out.push(L[i], R[i]); }
      let mismatches = 0;
      for (let i = 0; i < fresh.length - 2 * 96; i++) if (fresh[i] !== out[i]) mismatches += 1;
      const fin = d.node.out.filter((m) => m.type === 'finished');
      return {reset, mismatches, finished: fin.map((m) => [m.id, m.stats.framesRendered])};
    """)
    assert result["reset"] == {"state": "prebuffering", "buffered": 0, "rendered": 0}
    assert result["mismatches"] == 0  # only the new stream is heard, from its first sample
    assert result["finished"] == [[2, 1000]]  # the replaced stream never reports, the new one in full


def test_stop_before_playback_answers_at_once_and_ignores_late_chunks(js):
    start(js)
    result = run(js, SINE + """
      d.send({type: 'start', id: 3, inputRate: 48000, prebufferMs: 200});
      d.send({type: 'pcm', data: sine(2000, 0, 48000, 440)});   // below the 9600-frame prebuffer
      d.quantum();
      d.send({type: 'stop'});
      const stopped = d.node.out.filter((m) => m.type === 'stopped').map((m) => m.id);
      d.send({type: 'pcm', data: sine(20000, 2000, 48000, 440)});   // still in flight when stop was sent
      let loud = 0;
      for (let i = 0; i < 100; i++) { const [L] = d.quantum(); loud += L.filter((v) => v !== 0).length; }
      return {stopped, state: d.node.state, buffered: d.node.avail, loud};
    """)
    assert result == {"stopped": [3], "state": "idle", "buffered": 0, "loud": 0}


# ---- the adaptive start: an estimate of the total length lets a slow stream play through -------------

ENGINE_CHUNKS = [1, 1, 1, 1, 2, 2, 2, 4, 4, 4] + [8] * 30  # frames per chunk, as the engine streams them


def engine_chunks(total_frames: int) -> list[int]:
    out, left = [], total_frames
    for n in ENGINE_CHUNKS:
        if left <= 0:
            break
        out.append(min(n, left))
        left -= out[-1]
    return out


def run_paced(js, schedule, prebuffer_ms=200, estimated_s=None, start_quantum=None) -> dict:
    start(js)
    return js.evaluate(f"(args) => {{ const d = window.driver; {SINE} {PACED} }}",
                       [schedule, prebuffer_ms, estimated_s, start_quantum])


ADAPTIVE_CASES = {
    # name: (frames per chunk, RTF, ms to the first chunk, estimate / true length, most underruns)
    "RTF 1.5, 6 s, exact estimate": (engine_chunks(75), 1.5, 300, 1.0, 0),
    "RTF 1.5, 6 s, one frame per chunk": ([1] * 75, 1.5, 300, 1.0, 0),
    "RTF 1.5, 10 s, estimate 30 % short": (engine_chunks(125), 1.5, 300, 0.7, 1),
    "RTF 1.5, 6 s, estimate 20 % long": (engine_chunks(75), 1.5, 300, 1.2, 0),
    "RTF 2.5, 4 s, exact estimate": (engine_chunks(50), 2.5, 300, 1.0, 0),
    "RTF 1.05, 8 s, exact estimate": (engine_chunks(100), 1.05, 300, 1.0, 0),
    "RTF 0.9, 8 s, exact estimate": (engine_chunks(100), 0.9, 200, 1.0, 0),
}


@pytest.mark.parametrize("case", ADAPTIVE_CASES)
def test_adaptive_start_plays_a_slow_stream_through_with_at_most_one_rebuffer(js, case):
    chunks, rtf, first_ms, estimate_ratio, most_underruns = ADAPTIVE_CASES[case]
    total_s = sum(chunks) * 0.08
    result = run_paced(js, paced_schedule(chunks, rtf, first_ms), estimated_s=total_s * estimate_ratio)
    s = result["s"]
    assert s["framesReceived"] == s["framesRendered"] == result["total"] == sum(chunks) * FRAME  # all audio played
    assert s["underruns"] <= most_underruns, (s["underruns"], s["underrunsAt"], s["startBufferedFrames"])
    if s["underruns"] == 0:
        assert result["mismatches"] == 0  # no gap: the source sample for sample
    # It waited, and said how long: once the rate was measured, the expected wait was about right.
    start_s = result["lead"] / 2 / 48_000
    waits = [(t, wait) for t, state, wait in result["plans"] if state == "prebuffering" and wait is not None]
    if rtf > 1:
        assert s["startBufferedFrames"] > 0.2 * 48_000  # more than the short start
        assert waits, result["plans"]
        t, wait = next((t, w) for t, w in waits if t >= first_ms / 1000 + 0.5)  # half a second of measuring
        assert abs(t + wait - start_s) < 0.25 * start_s + 0.3, (t, wait, start_s)


def test_a_late_bunch_of_first_chunks_does_not_make_a_slow_stream_look_fast(js):
    """The headers came on time, but a busy page delivered the first three chunks 250 ms late, at once:
    measured from the stream's start, the rate stays slow and the plan holds (no underrun)."""
    chunks = engine_chunks(75)
    schedule = paced_schedule(chunks, 1.5, 300)
    late = schedule[2][0] + math.ceil(250 / QUANTUM_MS)
    bunched = [[late, frames] for _, frames in schedule[:3]] + schedule[3:]
    result = run_paced(js, bunched, estimated_s=sum(chunks) * 0.08, start_quantum=schedule[0][0])
    s = result["s"]
    assert s["underruns"] == 0, (s["underrunsAt"], s["startBufferedFrames"])
    assert s["framesRendered"] == result["total"] and s["startBufferedFrames"] > 2 * 48_000


def test_without_an_estimate_a_slow_stream_chops(js):
    """The reason for the plan: the same RTF 1.5 stream with the fixed short start runs dry again and again."""
    result = run_paced(js, paced_schedule(engine_chunks(75), 1.5, 300), estimated_s=None)
    assert result["s"]["underruns"] >= 3
    assert result["s"]["framesRendered"] == result["total"]


@pytest.mark.parametrize("rtf", [0.1, 0.3, 0.6])
def test_fast_generation_keeps_the_short_start(js, rtf):
    """With an estimate and fast generation, playback starts as soon as 0.2 s is buffered, as before."""
    chunks = engine_chunks(40)
    schedule = paced_schedule(chunks, rtf, 150)
    planned = run_paced(js, schedule, estimated_s=sum(chunks) * 0.08)
    fixed = run_paced(js, schedule, estimated_s=None)
    assert planned["s"]["underruns"] == fixed["s"]["underruns"] == 0
    # Starts with the fixed start, or at most one arrival later (the rate needs two arrivals to measure).
    gap_quanta = max(b[0] - a[0] for a, b in itertools.pairwise(schedule[:5]))
    assert fixed["lead"] <= planned["lead"] <= fixed["lead"] + 2 * 128 * (gap_quanta + 1)
    assert planned["s"]["startBufferedFrames"] < 0.5 * 48_000


PLAN = """
async (cases) => {
  const { planStart } = await import('/buffering.js');
  return cases.map((c) => planStart(c));
}
"""


def test_plan_is_a_pure_function_of_what_arrived(js):
    base = {"now": 2.0, "firstArrival": 0.0, "lastArrival": 2.0, "arrivals": 11, "firstChunkS": 0.08,
            "receivedS": 1.08, "bufferedS": 1.08, "estimatedS": 6.0, "largestChunkS": 0.32, "ended": False,
            "rebuffering": False, "shortStartS": 0.2}
    cases = [
        base,                                                     # rate 0.5: needs 4.92 × (1.3) + lump
        {**base, "bufferedS": 5.0, "receivedS": 5.0, "now": 9.84, "lastArrival": 9.84},   # enough now
        {**base, "estimatedS": None},                             # nothing to plan with: the short start
        {**base, "ended": True},                                  # everything is here
        {**base, "now": 0.3, "lastArrival": 0.3, "receivedS": 2.08, "bufferedS": 2.08},   # fast: 6.7 × real time
        {**base, "arrivals": 1, "receivedS": 0.08, "bufferedS": 0.08},                      # one arrival
        {**base, "rebuffering": True, "receivedS": 7.0, "bufferedS": 0.0, "now": 14, "lastArrival": 14},
    ]
    slow, enough, unplanned, ended, fast, single, rebuffer = js.evaluate(PLAN, cases)
    assert slow["rate"] == pytest.approx(0.5)
    k = 1.15 / 0.5 - 1
    assert slow["targetS"] == pytest.approx(k * (6.0 - 1.08) + 0.32) and not slow["start"]
    assert slow["waitS"] == pytest.approx((slow["targetS"] - 1.08) / (0.5 * (1 + k)))
    assert enough["start"]
    assert unplanned["start"] and unplanned["targetS"] == 0.2
    assert ended["start"] and ended["waitS"] == 0
    assert fast["start"] and fast["targetS"] == 0.2
    assert not single["start"] and single["rate"] is None
    # Past its estimate: half of what already played is assumed still to come, with twice the lump.
    rate = (7.0 - 0.08) / 14
    assert rebuffer["rate"] == pytest.approx(rate)
    assert not rebuffer["start"] and rebuffer["targetS"] == pytest.approx((1.15 / rate - 1) * 3.5 + 0.64)
