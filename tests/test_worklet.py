"""static/worklet.js driven quantum by quantum in Chromium's JS engine, without an audio device.

Deterministic checks of the ring buffer arithmetic: bit-exact joins across odd chunk sizes, the
prebuffer, underrun accounting with fades, the stop fade, ring growth, and the resampler.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

pytest_plugins = ["e2e_helpers"]
pytestmark = pytest.mark.e2e

WORKLET = (Path(__file__).resolve().parent.parent / "static" / "worklet.js").read_text()

# Stubs for the AudioWorkletGlobalScope, then the worklet itself; returns a small driver.
HARNESS = """
([source, contextRate]) => {
  const make = new Function('contextRate', `
    let sampleRate = contextRate, currentFrame = 0, currentTime = 0, Proc = null;
    class AudioWorkletProcessor { constructor() { this.port = { postMessage: (m) => this.out.push(m) }; this.out = []; } }
    function registerProcessor(name, cls) { Proc = cls; }
    ${source}
    return {
      node: new Proc(),
      send(m) { this.node.port.onmessage({ data: m }); },
      quantum() {   // one render quantum: 128 frames, two channels
        const L = new Float32Array(128), R = new Float32Array(128);
        this.node.process([], [[L, R]]);
        currentFrame += 128; currentTime = currentFrame / sampleRate;
        return [L, R];
      },
    };
  `);
  window.driver = make(contextRate);
  return true;
}
"""


@pytest.fixture
def js(browser):
    page = browser.new_page()
    yield page
    page.close()


def start(js, context_rate=48_000):
    js.evaluate(HARNESS, [WORKLET, context_rate])


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
