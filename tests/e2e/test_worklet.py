"""static/player/worklet.js driven quantum by quantum in Chromium's JS engine, without an audio device.

Deterministic checks of the ring buffer arithmetic: bit-exact joins across odd chunk sizes, the
prebuffer, underrun accounting with fades, the stop fade, the fixed ring, the resampler, restart and
stop. Paced sources (chunks arriving at chosen render quanta) tie `chunks_arrived_in_time`, which
decides where the browser tests may demand "no gap", to what this worklet actually does (the start
planned from a length estimate: test_worklet_adaptive.py). Nothing here depends on the machine's
speed: time is the count of quanta the test runs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from support.e2e_helpers import chunks_arrived_in_time
from support.worklet_harness import PACED, QUANTUM_MS, SINE, paced_schedule, run, start

pytestmark = pytest.mark.e2e


@pytest.fixture
def js(static_page):
    return static_page


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


def test_the_ring_is_made_once_and_a_frame_that_does_not_fit_is_counted_not_grown_into(js):
    """The producer (stream-player.js) posts only what fits; were it not to, the excess is dropped and
    counted, and a full ring plays whatever start the plan wanted (nothing more could arrive)."""
    start(js, ring_seconds=0.5)
    result = run(js, SINE + """
      d.send({type: 'start', id: 1, inputRate: 48000, prebufferMs: 5000});   // a start the ring cannot hold
      const cap = d.node.capacity, ring = d.node.L;
      d.send({type: 'pcm', data: sine(cap + 4800, 0, 48000, 440)});
      const held = {avail: d.node.avail, same: d.node.L === ring && d.node.capacity === cap};
      const first = d.quantum()[0][5];
      d.send({type: 'end'});
      while (d.node.state !== 'idle') d.quantum();
      const s = d.node.out.find((m) => m.type === 'finished').stats;
      return {cap, held, first, expect: sine(6, 0, 48000, 440)[10], s};
    """)
    assert result["cap"] == 24_000 and result["held"] == {"avail": 24_000, "same": True}
    assert result["first"] == pytest.approx(result["expect"], abs=1e-7)  # full: it played at once
    s = result["s"]
    assert s["overflowFrames"] == 4_800 and s["framesRendered"] == 24_000 and s["framesReceived"] == 28_800


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


# ---- a paced source: chunks arrive at chosen times (worklet_harness.PACED) -----------------------

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

