"""The static build of the tiny checkpoints in headless Chromium, against the torch engine.

The build (`export-web`) is served as `serve-web` serves it, with the cross-origin isolation
headers of its Space front matter; the page runs onnxruntime-web (wasm, fp32) in the tab.
Greedy codes must equal the torch `Synthesizer`'s exactly and its PCM within 1e-4, for voice clone
(a preset, and {codes}) and continuation (text only, and after a reference with its transcript);
the Speak button must play through the studio's AudioWorklet: non-silent, two distinct channels,
48 kHz. Start-up: speaking fetches only one precision's speaking graphs (the clip encoder on the
first clone), a second visit reads them from the Cache API, and a backend that is not the last
resort must pass the self-test against the torch reference, else the page falls back (no WebGPU
here: its absence, and a failing self-test, are what is checked).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil

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
    assert info["backend"] == "wasm" and info["precision"] == "fp32" and info["fallback"] == []
    assert page.evaluate("crossOriginIsolated") is True  # the server's COOP/COEP reached the page
    # Isolated, the wasm backend gets threads (one per core, up to 4); without isolation it gets one.
    assert info["threads"] == min(4, page.evaluate("navigator.hardwareConcurrency"))
    assert "Runs in this browser: wasm" in page.locator("#engine-info").inner_text()


def _open(browser, url: str, init_script: str | None = None):
    """A fresh context (its own Cache API) on `url`, ready; returns (context, tab, model requests)."""
    context = browser.new_context()
    if init_script:
        context.add_init_script(init_script)
    onnx: list[str] = []
    context.on("request", lambda r: onnx.append(r.url.rsplit("/", 1)[-1]) if r.url.endswith(".onnx") else None)
    tab = context.new_page()
    tab.goto(url)
    tab.wait_for_function("window.mossTTS !== undefined")
    tab.evaluate("mossTTS.ready")
    return context, tab, onnx


def test_speaking_fetches_its_graphs_once_and_the_encoder_on_first_clone(browser, site, data_dir):
    graphs = json.loads((tiny_build(data_dir) / "models" / "graphs.json").read_text())
    fp32 = graphs["precisions"]["fp32"]
    context, tab, onnx = _open(browser, f"{site}index.html?backend=wasm")
    try:
        assert sorted(onnx) == sorted(fp32[k] for k in ("global", "local", "codec"))  # no encoder, no fp16
        assert tab.evaluate("mossTTS.info().fromCache") is False
        onnx.clear()
        tab.reload()
        tab.wait_for_function("window.mossTTS !== undefined")
        tab.evaluate("mossTTS.ready")
        assert onnx == [] and tab.evaluate("mossTTS.info().fromCache") is True  # the Cache API kept them
        codes = tab.evaluate("async () => Array.from(await mossTTS.encodeClip([new Float32Array(48000)]))")
        assert onnx == [fp32["encoder"]] and len(codes) == 12 * 16
    finally:
        context.close()


def test_self_test_passes_for_fp32_and_the_fp16_graphs(page, browser, site):
    check = page.evaluate("mossTTS.selfTest()")
    assert check["ok"] and check["cosine"] > 0.9999 and check["snrDb"] > 60, check
    context, tab, _ = _open(browser, f"{site}index.html?backend=wasm&precision=fp16")
    try:
        assert tab.evaluate("mossTTS.info().precision") == "fp16"
        check = tab.evaluate("mossTTS.selfTest()")  # the WebGPU graphs, run by wasm here
        assert check["ok"] and check["cosine"] > 0.99, check
    finally:
        context.close()


def test_no_webgpu_falls_back_to_wasm(browser, site):
    context, tab, _ = _open(browser, f"{site}index.html",  # default order: webgpu, then wasm
                            init_script="delete Navigator.prototype.gpu;")
    try:
        info = tab.evaluate("mossTTS.info()")
        assert info["backend"] == "wasm" and info["fallback"] == ["webgpu: this browser offers no WebGPU adapter"]
        assert "no WebGPU adapter" in tab.locator("#engine-info").inner_text()
    finally:
        context.close()


def test_a_failing_self_test_falls_back_to_the_next_backend(browser, data_dir, tmp_path):
    """A build whose reference audio was altered: the first backend fails its self-test (wrong
    audio, as a GPU with broken fp16 would give) and the page starts the next one."""
    build = tmp_path / "site"
    shutil.copytree(tiny_build(data_dir), build, symlinks=True)
    selftest = build / "models" / "selftest.json"
    reference = json.loads(selftest.read_text())
    pcm = np.frombuffer(base64.b64decode(reference["pcm"]), "<f4")
    reference["pcm"] = base64.b64encode((-pcm).astype("<f4").tobytes()).decode("ascii")
    selftest.write_text(json.dumps(reference))
    manifest = json.loads((build / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["path"] == "models/selftest.json":
            entry.update(size=selftest.stat().st_size, sha256=hashlib.sha256(selftest.read_bytes()).hexdigest())
    (build / "manifest.json").write_text(json.dumps(manifest))
    with serve_static(build) as url:
        context, tab, _ = _open(browser, f"{url}index.html?backend=wasm,wasm")
        try:
            info = tab.evaluate("mossTTS.info()")
            assert info["backend"] == "wasm" and len(info["fallback"]) == 1
            assert info["fallback"][0].startswith("wasm fp32: self-test failed: codec audio off (SNR -"), info
        finally:
            context.close()


def test_voice_clone_preset_equals_torch(page, synth):
    text = "Hello world, this is a parity test for MOSS TTS Nano."
    ref = _torch(synth, text=text, voice="Cedar", max_frames=12, normalize_text=False)
    for _ in range(2):  # the voice's prefix computed, then copied from the engine's prefix cache
        _assert_same(_browser(page, text=text, voice="Cedar", greedy=True, maxFrames=12, normalizeText=False), ref, 12)


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


def test_the_page_has_the_studios_look_and_states(browser, site, artifacts_dir):
    """The page wears the studio player's styles (player.css: its typeface, status mark, buttons,
    figures) and states: Speak waits for the engine, Stop is there only while it speaks."""
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        tab.goto(f"{site}index.html?backend=wasm")
        assert tab.locator("#speak").is_disabled() and tab.locator("#stop").is_disabled()
        assert tab.evaluate("getComputedStyle(document.body).fontFamily").startswith("system-ui")
        assert tab.locator("main.player .status #dot.dot").count() == 1
        assert "primary" in tab.get_attribute("#speak", "class")
        tab.wait_for_function("!document.getElementById('speak').disabled", timeout=READY_TIMEOUT_MS)
        assert tab.inner_text("#status") == "Ready" and "ready" in tab.get_attribute("#dot", "class")
        assert tab.locator("#stop").is_disabled()
        tab.locator("#ttfp.value").wait_for()  # the figures are the player's tiles
        tab.screenshot(path=str(artifacts_dir / "ui-engine-page-ready.png"))

        tab.fill("#text", "A long sentence to speak, so that there is time to stop it. " * 4)
        tab.click("#speak")
        tab.wait_for_function("!document.getElementById('stop').disabled")
        assert tab.locator("#speak").is_disabled()
        tab.click("#stop")
        tab.wait_for_function("document.getElementById('status').textContent === 'Stopped'",
                              timeout=READY_TIMEOUT_MS)
        assert tab.evaluate("window.mossPlayback.outcome") == "stopped"
        assert "stopped" in tab.get_attribute("#dot", "class")
        assert not tab.locator("#speak").is_disabled() and tab.locator("#stop").is_disabled()
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
