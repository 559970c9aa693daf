"""The static build of the tiny checkpoints in headless Chromium, against the torch engine.

The build (`export-web`) is served by a plain static file server with the cross-origin isolation
headers of its Space front matter; the page runs onnxruntime-web (wasm, fp32) in the tab.
Greedy codes must equal the torch `Synthesizer`'s exactly and its PCM within 1e-4, for voice clone
(a preset, and {codes}) and continuation (text only, and after a reference with its transcript);
the Speak button must play through the studio's AudioWorklet: non-silent, two distinct channels,
48 kHz.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from support import audio_tap
from support.browser_engine_helpers import serve_static, tiny_build
from support.e2e_helpers import playwright_sync_api

from tts_core.config import EngineConfig, SamplingParams
from tts_core.synthesizer import Synthesizer
from tts_core.types import SynthesisRequest, Voice

playwright_sync_api()  # skip, or fail under MOSS_TTS_REQUIRE_BROWSER, without playwright

PCM_TOL = 1e-4
READY_TIMEOUT_MS = 120_000

STREAM_JS = """async (options) => {
  if (options.voice && options.voice.codes) options.voice = {codes: Int32Array.from(options.voice.codes)};
  const codes = [], left = [], right = [];
  let last = 0, items = 0;
  for await (const item of mossTTS.stream(options)) {
    items++;
    if (item.isLast) last++;
    codes.push(...item.codes);
    for (let i = 0; i < item.pcm.length; i += 2) { left.push(item.pcm[i]); right.push(item.pcm[i + 1]); }
  }
  return {codes, left, right, last, items};
}"""


@pytest.fixture(scope="module")
def site(data_dir):
    with serve_static(tiny_build(data_dir)) as url:
        yield url


@pytest.fixture(scope="module")
def page(browser, site):
    """One tab on the build (wasm backend), loaded once for the module; no page error allowed."""
    context = browser.new_context()
    errors: list[str] = []
    context.on("page", lambda p: p.on("pageerror", lambda exc: errors.append(str(exc))))
    context.on("request", lambda r: None if r.url.startswith(("http://127.0.0.1", "data:", "blob:"))
               else errors.append(f"external request {r.url}"))
    context.on("response", lambda r: errors.append(f"HTTP {r.status} for {r.url}") if r.status >= 400 else None)
    tab = context.new_page()
    tab.goto(f"{site}index.html?backend=wasm")
    tab.wait_for_function("window.mossTTS !== undefined")
    tab.evaluate("mossTTS.ready")
    yield tab
    context.close()
    assert not errors, errors


@pytest.fixture(scope="module")
def synth(data_dir, tmp_path_factory):
    parity = data_dir / "parity"
    s = Synthesizer.from_pretrained(str(parity / "tiny_lm"), str(parity / "tiny_codec"),
                                    tokenizer=str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"),
                                    voices_dir=data_dir / "presets", cache_dir=tmp_path_factory.mktemp("cache"),
                                    allow_download=False, engine_config=EngineConfig(max_active_streams=1))
    yield s
    s.close()


@pytest.fixture(scope="module")
def voices(data_dir):
    return json.loads((tiny_build(data_dir) / "models" / "voices.json").read_text())


def _browser(page, **options) -> tuple[np.ndarray, np.ndarray, dict]:
    out = page.evaluate(STREAM_JS, options)
    assert out["last"] == 1, "exactly one item must carry isLast"
    codes = np.array(out["codes"], dtype=np.int64).reshape(-1, 16)
    return codes, np.array([out["left"], out["right"]], dtype=np.float32), out


def _torch(synth, **request) -> tuple[np.ndarray, np.ndarray]:
    result = synth.synthesize(SynthesisRequest(sampling=SamplingParams.greedy(), seed=0, **request))
    return result.codes, result.pcm


def _assert_same(browser, torch_out, frames: int) -> None:
    (codes, pcm), (ref_codes, ref_pcm) = browser[:2], torch_out
    assert codes.shape == (frames, 16)
    np.testing.assert_array_equal(codes, ref_codes)
    assert pcm.shape == ref_pcm.shape == (2, frames * 3840)
    assert float(np.abs(pcm - ref_pcm).max()) <= PCM_TOL
    assert float(np.abs(ref_pcm).max()) > 0.05


def test_page_reports_its_backend(page):
    info = page.evaluate("mossTTS.info()")
    assert info["backend"] == "wasm" and info["precision"] == "fp32"
    assert page.evaluate("crossOriginIsolated") is True  # the server's COOP/COEP reached the page
    assert info["threads"] >= 1
    assert "Runs in this browser: wasm" in page.locator("#engine-info").inner_text()


def test_voice_clone_preset_equals_torch(page, synth):
    text = "Hello world, this is a parity test for MOSS TTS Nano."
    out = _browser(page, text=text, voice="Cedar", greedy=True, maxFrames=12, normalizeText=False)
    _assert_same(out, _torch(synth, text=text, voice="Cedar", max_frames=12, normalize_text=False), 12)


def test_voice_clone_codes_and_normalised_text_equal_torch(page, synth, voices):
    """A voice as {codes} (another preset's), and the text cleanup on (numbers read out) in both."""
    preset = next(p for p in voices["presets"] if p["language"] == "zh")
    codes = np.array(preset["codes"], dtype=np.int64).reshape(-1, 16)
    text = "今天有3个人去公园。"
    out = _browser(page, text=text, voice={"codes": preset["codes"]}, greedy=True, maxFrames=10, normalizeText=True)
    _assert_same(out, _torch(synth, text=text, voice=Voice.from_codes(codes), max_frames=10), 10)


def test_continuation_text_only_equals_torch(page, synth):
    text = "Good morning! How are you today?"
    out = _browser(page, text=text, mode="continuation", greedy=True, maxFrames=8, normalizeText=False)
    _assert_same(out, _torch(synth, text=text, mode="continuation", max_frames=8, normalize_text=False), 8)


def test_continuation_after_reference_equals_torch(page, synth, voices):
    preset = next(p for p in voices["presets"] if p["transcript"])
    text = "我们一起去公园散步吧。"
    out = _browser(page, text=text, mode="continuation", voice=preset["name"], promptText=preset["transcript"],
                   greedy=True, maxFrames=8, normalizeText=False)
    ref = _torch(synth, text=text, mode="continuation", voice=preset["name"], max_frames=8, normalize_text=False)
    _assert_same(out, ref, 8)


def test_sampling_repeats_with_its_seed(page):
    options = {"text": "Sampling check.", "voice": "Cedar", "seed": 7, "maxFrames": 6, "normalizeText": False}
    first, _, _ = _browser(page, **options)
    again, _, _ = _browser(page, **options)
    other, _, _ = _browser(page, **{**options, "seed": 8})
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_bad_arguments_name_the_field(page):
    message = page.evaluate("""async () => { try { for await (const _ of mossTTS.stream({text: 'x', voice: 'Nobody'})) {} }
      catch (e) { return e.message; } return 'no error'; }""")
    assert message.startswith("voice: unknown preset") and "Cedar" in message
    message = page.evaluate("""async () => { try { for await (const _ of mossTTS.stream({text: 'x', mode: 'sing'})) {} }
      catch (e) { return e.message; } return 'no error'; }""")
    assert message.startswith("mode must be")


def test_speak_plays_through_the_worklet(browser, site):
    """The page's own form: Speak -> the engine -> audio.js/worklet.js -> what the context renders."""
    context = browser.new_context()
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        tab.goto(f"{site}index.html?backend=wasm")
        tab.wait_for_function("!document.getElementById('speak').disabled", timeout=READY_TIMEOUT_MS)
        audio_tap.install(tab, "window.mossTTS.player")  # what the page's player renders
        tab.fill("#text", "Hello from the browser.")
        tab.check("#greedy")
        tab.click("#speak")
        tab.wait_for_function("document.getElementById('status').textContent.startsWith('Spoke')",
                              timeout=READY_TIMEOUT_MS)
        played = tab.evaluate("window.mossPlayback")  # the player's outcome and figures
        assert played["outcome"] == "finished" and played["sampleRate"] == 48000, played
        assert played["framesRendered"] == played["framesReceived"] >= 3840, played
        heard = audio_tap.take(tab, played["firstAudioFrame"], played["framesRendered"]).astype(np.float64)
        rms = np.sqrt((heard**2).mean(axis=0))
        assert rms[0] > 1e-3 and rms[1] > 1e-3, rms
        assert np.sqrt(((heard[:, 0] - heard[:, 1]) ** 2).mean()) > 1e-4  # two distinct channels, not one copied
        assert tab.locator("#download").get_attribute("href").startswith("blob:")
        assert tab.locator("#ttfp").inner_text().endswith("ms")
    finally:
        context.close()
    assert not errors, errors


def test_clone_from_a_clip_file_encodes_as_the_server(page, synth, tmp_path, parity_dir):
    """A 48 kHz stereo WAV through the page's clip input (decodeAudioData, then the encoder graph):
    the codes equal the server's voice bank's for the same file (load_audio, to_codec_input, the
    torch encoder)."""
    import soundfile
    from safetensors.torch import load_file

    wav = load_file(str(parity_dir / "tiny_codec_vectors.safetensors"))["encode.input_waveform"].numpy()
    path = tmp_path / "clip.wav"
    soundfile.write(path, wav.T, 48000, subtype="PCM_16")
    server_codes = synth.voices.resolve(Voice.from_audio(path.read_bytes())).codes
    page.set_input_files("#clip", str(path))
    page.wait_for_function("document.getElementById('status').textContent.startsWith('Voice ready')")
    clone = page.evaluate("window.mossClone")
    codes = np.array(clone["codes"], dtype=np.int64).reshape(-1, 16)
    assert codes.shape == (12, 16)
    np.testing.assert_array_equal(codes, server_codes)
    assert page.locator("#voice").input_value() == "__clip__"
