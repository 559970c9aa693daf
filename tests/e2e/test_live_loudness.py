"""The live play's loudness matching (static/studio/livegain.js, static/player/gainglide.js) in Chromium's JS engine,
on the real preset clips: deterministic (the audio's position, never a clock, decides every gain).

How the page uses them: the player feeds each chunk to a `LiveEstimator` as it arrives and sends the
gain it returns to the worklet, whose `GainGlide` scales the audio as it plays. Here the same two run
with a fixed look-ahead (how much audio has arrived beyond the sample being played): 0.2 s is a slow
server (generation at about real time, the 200 ms short start), 1 s a faster one, 60 s one that has
made the whole card before it starts playing (a GPU). The output is
measured by pyloudnorm against the target, as tests/test_e2e_loudness.py does at the worklet's output.
"""

from __future__ import annotations

import base64
import hashlib

import numpy as np
import pyloudnorm
import pytest
import soxr

from tts_core.audio.io import load_audio

VOICE_PRIOR_S = 2  # static/studio/livegain.js: the remembered loudness counts as this much audio heard

pytestmark = pytest.mark.e2e
RATE = 48_000
TARGET = -23.0
PRESETS = ("en_2", "en_3", "en_4", "en_6", "en_8", "jp_2", "zh_1", "zh_10", "zh_3", "zh_4", "zh_6")

# Chunks of 80 ms (the engine's frame) through the estimator, then the exact gain once the card is
# complete (as player.js does); the worklet's glide plays the audio in 128-frame render quanta,
# taking each gain once the audio it was estimated from is `look` s ahead.
SIMULATE = """
async ([url, prior, lookS]) => {
  const { LiveEstimator } = await import('/studio/livegain.js');
  const { GainGlide } = await import('/player/gainglide.js');
  const { matchGain, measure } = await import('/studio/loudness.js');
  const clips = (globalThis.__clips ||= {});   // each clip crosses into the page once
  const data = (clips[url] ||= new Float32Array(await (await fetch(url)).arrayBuffer()));
  const n = data.length / 2, chunk = 3840, rate = 48000;
  const estimator = new LiveEstimator(rate, { prior }), gains = [];
  for (let at = 0; at < n; at += chunk) {
    const next = estimator.observe(data.slice(2 * at, 2 * Math.min(n, at + chunk)));
    if (next) gains.push([Math.min(n, at + chunk), next.gain]);
  }
  gains.push([n, matchGain(measure([data], rate)).gain]);   // the stream is complete: the exact gain
  const glide = new GainGlide(rate), L = new Float32Array(n), R = new Float32Array(n), look = lookS * rate;
  for (let i = 0; i < n; i++) { L[i] = data[2 * i]; R[i] = data[2 * i + 1]; }
  let g = 0;
  for (let at = 0; at < n; at += 128) {
    while (g < gains.length && gains[g][0] <= at + look) glide.set(gains[g++][1]);
    glide.apply(L.subarray(at, at + 128), R.subarray(at, at + 128), Math.min(128, n - at));
  }
  const out = new Float32Array(2 * n);
  for (let i = 0; i < n; i++) { out[2 * i] = L[i]; out[2 * i + 1] = R[i]; }
  const bytes = new Uint8Array(out.buffer);
  let text = '';
  for (let at = 0; at < bytes.length; at += 0x8000) text += String.fromCharCode(...bytes.subarray(at, at + 0x8000));
  return btoa(text);
}
"""


@pytest.fixture(scope="module")
def clips(data_dir) -> dict[str, np.ndarray]:
    """The preset clips as 48 kHz interleaved stereo float32 (mono clips on both channels)."""
    out = {}
    for name in PRESETS:
        wav, rate = load_audio(data_dir / "presets" / f"{name}.wav")
        mono = soxr.resample(wav.mean(axis=0), rate, RATE)
        out[name] = np.stack([mono, mono], axis=1).astype(np.float32)
    return out


def _lufs(stereo: np.ndarray) -> float:
    return float(pyloudnorm.Meter(RATE).integrated_loudness(np.asarray(stereo, np.float64).reshape(-1, 2)))


def _played(page, clip: np.ndarray, prior: dict | None, look_s: float) -> float:
    """The integrated loudness of `clip` as the live play scales it (the page keeps each clip it
    fetched, by URL: one URL per clip's content)."""
    body = clip.tobytes()
    url = f"http://player.test/clip-{hashlib.sha1(body).hexdigest()[:16]}.f32"
    page.route(url, lambda route: route.fulfill(body=body))
    out = np.frombuffer(base64.b64decode(page.evaluate(SIMULATE, [url, prior, look_s])), np.float32)
    return _lufs(out)


def test_the_incremental_meter_is_the_one_that_measures_whole_results(static_page, clips) -> None:
    clip = clips["en_2"][: 3 * RATE]
    got = static_page.evaluate("""async (data) => {
      const m = await import('/studio/loudness.js');
      const all = new Float32Array(data), meter = new m.LoudnessMeter(48000), seen = [];
      for (let at = 0; at < all.length; at += 2 * 3840) {
        meter.push(all.subarray(at, at + 2 * 3840));
        seen.push(meter.integrated());
      }
      return {seen, whole: m.measure([all], 48000).lufs, running: meter.running()};
    }""", clip.ravel().tolist())
    assert got["seen"][-1] == pytest.approx(got["whole"], abs=1e-9)
    assert got["whole"] == pytest.approx(_lufs(clip), abs=0.05)  # pyloudnorm's figure
    assert got["running"]["lufs"] == pytest.approx(got["whole"], abs=1e-9) and got["running"]["seconds"] > 2


def test_estimates_blend_the_remembered_loudness_with_what_is_heard(static_page) -> None:
    got = static_page.evaluate("""async () => {
      const { LiveEstimator } = await import('/studio/livegain.js');
      const tone = (amp, seconds) => { const n = seconds * 48000, d = new Float32Array(2 * n);
        for (let i = 0; i < n; i++) d[2 * i] = d[2 * i + 1] = amp * Math.sin(2 * Math.PI * 1000 * i / 48000);
        return d; };
      const silent = new LiveEstimator(48000).observe(new Float32Array(7680));
      const fresh = new LiveEstimator(48000), remembered = new LiveEstimator(48000, {prior: {lufs: -30, weightS: 1}});
      const first = [fresh.observe(tone(0.05, 0.08)), remembered.observe(tone(0.05, 0.08))];
      const later = [];
      for (let i = 0; i < 50; i++) later.push(fresh.observe(tone(0.05, 0.08)));
      return {silent, first, last: later[later.length - 1]};
    }""")
    assert got["silent"] is None  # nothing audible, nothing remembered: no gain yet
    fresh, remembered = got["first"]
    # A quiet tone (about -29 LUFS): without a memory the gain may not rise before a second of audio ...
    assert not fresh["sure"] and fresh["gain"] == pytest.approx(1.0)
    # ... with one, it starts from the memory, nudged by the 80 ms heard.
    assert remembered["sure"] and -30 < remembered["estimate"] < -29 and remembered["gain"] > 1.5
    assert got["last"]["sure"] and got["last"]["gain"] == pytest.approx(10 ** ((TARGET - got["last"]["estimate"]) / 20))


def test_the_glide_rises_gently_falls_fast_and_never_clips(static_page) -> None:
    got = static_page.evaluate("""async () => {
      const { GainGlide, UP_S, DOWN_S } = await import('/player/gainglide.js');
      const run = (start, want, seconds, amp = 0.1) => {
        const g = new GainGlide(48000), n = seconds * 48000;
        g.set(start);
        g.apply(new Float32Array([amp]), new Float32Array([amp]), 1);   // playing: from now on it glides
        g.set(want);
        const L = new Float32Array(n).fill(amp), R = new Float32Array(n).fill(amp);
        g.apply(L, R, n);
        return {gain: g.gain, peak: Math.max(...L)};
      };
      const early = new GainGlide(48000);
      for (const want of [0.5, 0.25, 0.125]) early.set(want);   // estimates that came before playback
      return {UP_S, DOWN_S, up: run(1, 2, UP_S), down: run(2, 1, DOWN_S), loud: run(1, 4, 1, 0.5),
              early: early.gain,
              untouched: (() => { const g = new GainGlide(48000), L = new Float32Array([0.3]); g.apply(L, L, 1); return L[0]; })()};
    }""")
    one_tau = 1 - np.exp(-1)  # a one-pole glide covers this share of the way in one time constant
    assert got["up"]["gain"] == pytest.approx(1 + one_tau, abs=1e-3)
    assert got["down"]["gain"] == pytest.approx(2 - one_tau, abs=1e-3)
    assert got["UP_S"] > got["DOWN_S"]
    assert got["loud"]["peak"] <= 0.999 + 1e-6 and got["loud"]["gain"] == pytest.approx(0.999 / 0.5, abs=1e-6)
    assert got["untouched"] == pytest.approx(0.3)  # before any gain is set, samples pass as they are
    assert got["early"] == 0.125  # the first sample played gets the latest estimate, not the first


def test_live_matching_of_real_speech_stays_near_the_target(static_page, clips) -> None:
    """The whole table, printed (docs/AUDITION.md quotes it). Each clip is a card; its "memory" is
    what this browser remembered of the voice: none, the clip's own loudness (a second take of the
    same sentence), or that ±2 LU (another sentence that came out louder or quieter)."""
    rows, worst = [], {}
    for look in (0.2, 1.0, 60.0):
        for memory in ("none", "exact", "+2 LU", "-2 LU"):
            errors = []
            for clip in clips.values():
                offset = {"exact": 0, "+2 LU": 2, "-2 LU": -2}.get(memory)
                prior = None if offset is None else {"lufs": _lufs(clip) + offset, "weightS": VOICE_PRIOR_S}
                errors.append(_played(static_page, clip, prior, look) - TARGET)
            worst[(look, memory)] = max(abs(e) for e in errors)
            rows.append(f"look-ahead {look} s, memory {memory:6s}: " + " ".join(f"{e:+.1f}" for e in errors)
                        + f"  (worst {worst[(look, memory)]:.2f} LU)")
    print("\nlive play, integrated loudness minus the target (LU), clips " + " ".join(PRESETS), *rows, sep="\n")
    # What the method gives on these eleven clips of real speech (one to several sentences each; as
    # generated they lie from 2 LU below to 10 LU above the target): within 1 LU of the target once the
    # voice is remembered from the same sentence, within 1.8 LU otherwise (as run: 0.71, 0.81; 1.68);
    # exact when the card is complete before it plays (the stream's end brings the exact gain).
    assert worst[(0.2, "exact")] <= 1.0 and worst[(1.0, "exact")] <= 1.0
    assert max(worst.values()) <= 1.8
    assert all(worst[(60.0, memory)] <= 0.1 for memory in ("none", "exact", "+2 LU", "-2 LU"))
