"""End to end: `python app.py` (tiny checkpoints) + the Gradio page in headless Chromium.

A real click in the page, audio streamed through the AudioWorklet player; the assertions read
`window.playerStats` in the player iframe and compare it with what the server sent.
Screenshots of every page are kept under test-artifacts/.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest
from support import audio_tap
from support.e2e_helpers import assert_gapless_where_provable, assert_no_underruns
from support.studio_helpers import open_page, player_frame, set_max_seconds, wait_done
from support.studio_helpers import player_stats as stats

from bench.lib.player_stream import player_stream

pytestmark = pytest.mark.e2e

SAMPLES_PER_FRAME = 3840
LONG_TEXT = " ".join(f"Sentence number {i} keeps this stream going for quite a while." for i in range(30))


def open_studio(context, app_server):
    """The Gradio page, ready (voices loaded), with its player iframe pre-warmed and tapped
    (support.audio_tap: what the player renders, sample by sample)."""
    page, frame = open_page(context, app_server.url)
    audio_tap.install(frame, "window.mossPlayer.player")
    return page, frame


def pick_voice(page, name: str) -> None:
    page.click("#voice-select input")
    page.get_by_role("option", name=re.compile(rf"· {re.escape(name)} \(")).click()


def generate(page, button: str = "#generate-btn"):
    """Click and return the /api/tts/stream response the player played."""
    with page.expect_response(lambda r: "/api/tts/stream" in r.url and r.ok, timeout=30_000) as info:
        page.click(button)
    return info.value


def generated_pcm(app_server, response, transport: str | None = None) -> np.ndarray:
    """What the server generates for the request the player made, as [n, 2] float32: in the
    player's transport (Opus decoded by FFmpeg), or in `transport`.

    The request carries an explicit seed, so asking again over plain HTTP gives the same samples;
    this is an independent count of "samples generated" to compare with what the worklet played.
    """
    body = {**response.request.post_data_json, **({"transport": transport} if transport else {})}
    assert body.get("seed") is not None
    again = httpx.post(app_server.url + "api/tts/stream", json=body, timeout=60)
    assert again.status_code == 200
    assert again.headers["x-sample-rate"] == "48000" and again.headers["x-channels"] == "2"
    return player_stream(again.content, again.headers["x-sample-format"])[0].T


def played(pcm: np.ndarray, fade_frames: int = 96) -> np.ndarray:
    """What the worklet should output for `pcm`: the same samples, the last 2 ms faded to silence."""
    out = pcm.astype(np.float64)
    f = min(fade_frames, len(out))
    out[len(out) - f:] *= ((f - np.arange(f)) / (f + 1))[:, None]
    return out


def assert_played_everything(frame, s: dict, pcm: np.ndarray) -> None:
    """Every generated frame went through the worklet, at 48 kHz, in two channels, without a gap.
    `pcm` is the stream decoded by FFmpeg; the page decoded it with the browser's own Opus decoder,
    which agrees within 2e-3 per sample (tests/e2e/test_player_opus.py). What the worklet rendered
    is read from a tap on its output (support.audio_tap)."""
    assert s["state"] == "finished", s
    assert s["workletLoaded"] and s["sampleRate"] == 48_000 and not s["resampling"]
    assert s["streamSampleRate"] == 48_000 and s["streamChannels"] == 2 and s["streamFormat"] == "opus"
    assert s["outputChannels"] == 2 and s["destinationChannels"] == 2
    assert len(pcm) > 0
    assert s["bytesReceived"] == pcm.size * 4
    assert s["framesReceived"] == len(pcm) == s["framesRendered"] and s["overflowFrames"] == 0
    gapless = assert_gapless_where_provable(s)
    assert s["trailingBytes"] == 0
    heard = audio_tap.take(frame, s["firstAudioFrame"], s["framesRendered"] + s["underrunFrames"])
    src = played(pcm)
    if gapless:
        # The worklet rendered these very samples, per channel (not a mono mix), in order and without a
        # seam of its own.
        assert len(heard) == len(src)
        np.testing.assert_allclose(heard, src, rtol=0, atol=4e-3)
        diff = float(np.sqrt(((src[:, 0] - src[:, 1]) ** 2).mean()))
        assert diff > 1e-3, "the test clip is mono, so it cannot show that both channels are kept"
    else:  # the generator starved the player: the fades around its gaps only remove energy
        assert float((heard[:, 0] ** 2).sum()) <= float((src[:, 0] ** 2).sum()) * (1 + 2e-3)
        assert float((heard[:, 1] ** 2).sum()) <= float((src[:, 1] ** 2).sum()) * (1 + 2e-3)
    assert 0 < s["ttfpMs"] < 60_000 and s["ttfbMs"] <= s["ttfpMs"]
    assert 0 < s["rtf"] < 100 and s["xRealtime"] == pytest.approx(1 / s["rtf"])
    assert s["audioSeconds"] == pytest.approx(len(pcm) / 48_000)


# ---- tests --------------------------------------------------------------------------------------


def test_generate_with_a_preset_plays_every_frame_gaplessly(browser_context, app_server):
    page, frame = open_studio(browser_context, app_server)
    voices = app_server_voices(app_server)
    chosen = next(v for v in voices["voices"] if v["available"] and v["name"] != voices["default"])["name"]
    pick_voice(page, chosen)
    page.fill("#tts-text textarea", "Hello from the studio.")
    assert "22 / " in page.inner_text("#char-count")

    response = generate(page)
    assert response.status == 200
    headers = response.all_headers()
    assert headers["x-sample-rate"] == "48000" and headers["x-channels"] == "2"
    assert headers["x-sample-format"] == "opus"
    request = response.request.post_data_json
    assert request["voice"] == chosen and request["text"] == "Hello from the studio."
    assert request.get("max_frames") is None  # automatic length, proportional to the text

    s = wait_done(frame)
    pcm = generated_pcm(app_server, response)
    assert_played_everything(frame, s, pcm)
    assert s["requestId"] == headers["x-request-id"]
    assert s["label"] == chosen
    assert len(pcm) % SAMPLES_PER_FRAME == 0
    # The metrics are on screen, not only on window.
    assert re.fullmatch(r"\d+ ms", frame.inner_text("#m-ttfp"))
    assert re.fullmatch(r"\d+\.\d\d", frame.inner_text("#m-rtf"))
    assert re.fullmatch(r"generated \d+\.\d× (faster|slower) than real time", frame.inner_text("#m-xrt"))
    assert frame.text_content("#m-underruns") == str(s["underruns"])
    assert frame.inner_text("#state") == "Done"


def test_stop_mid_stream_silences_and_cancels(browser_context, app_server):
    page, frame = open_studio(browser_context, app_server)
    before = app_server.wait_for_idle()
    page.fill("#tts-text textarea", LONG_TEXT)
    response = generate(page)
    assert response.status == 200
    frame.wait_for_function("window.playerStats.framesRendered > 48000 * 0.3", timeout=30_000)
    frame.click("#stop")  # the one Stop, in the player
    s = wait_done(frame, timeout_ms=5_000)
    assert s["state"] == "stopped"
    # The worklet confirms: faded out, ring cleared, silent.
    frame.wait_for_function("window.playerStats.workletState === 'idle'", timeout=2_000)
    rendered = stats(frame)["framesRendered"]
    time.sleep(0.5)
    assert stats(frame)["framesRendered"] == rendered, "audio kept playing after Stop"
    assert frame.inner_text("#state") == "Stopped"
    after = app_server.wait_for_idle(timeout_s=10)
    # The server saw the disconnect: the request was cancelled, not run to its end.
    assert after["cancelled"] == before["cancelled"] + 1, (before, after)
    assert frame.get_attribute("#dl-wav", "href")  # what was heard can still be saved


def test_uploaded_clip_clones_a_voice(browser_context, app_server, data_dir):
    page, frame = open_studio(browser_context, app_server)
    page.get_by_role("tab", name="Clone a voice").click()
    page.set_input_files("#ref-audio input[type=file]", str(data_dir / "finetune_sample" / "7.wav"))
    page.wait_for_selector("#ref-info:has-text('Reference:')", timeout=15_000)
    set_max_seconds(page, 1.5)
    page.fill("#tts-text textarea", "A voice cloned from a short clip.")

    response = generate(page)
    assert response.status == 200
    request = response.request.post_data_json
    assert request.get("ref_audio_id") and not request.get("voice")
    assert request["max_frames"] == 18  # at most 1.5 s
    s = wait_done(frame)
    pcm = generated_pcm(app_server, response)
    assert_played_everything(frame, s, pcm)
    assert len(pcm) == 18 * SAMPLES_PER_FRAME
    assert s["label"] == "your reference clip"


def test_empty_text_shows_an_error_in_the_page(browser_context, app_server):
    page, frame = open_studio(browser_context, app_server)
    streams: list[str] = []
    page.on("request", lambda r: streams.append(r.url) if "/api/tts/stream" in r.url else None)
    page.fill("#tts-text textarea", "   ")
    page.click("#generate-btn")
    message = page.locator("#tts-message")
    message.wait_for(state="visible")
    page.wait_for_selector("#tts-message:has-text('empty')", timeout=10_000)
    assert "text" in message.inner_text().lower()
    time.sleep(0.3)
    assert not streams and stats(frame)["runs"] == 0


def test_unusable_upload_shows_an_error_in_the_page(browser_context, app_server, tmp_path):
    import soundfile
    clip = tmp_path / "phone.wav"  # 8 kHz: too narrow-band to clone a 48 kHz voice
    soundfile.write(clip, 0.1 * np.sin(np.arange(16_000) * 0.3), 8_000)
    page, frame = open_studio(browser_context, app_server)
    page.get_by_role("tab", name="Clone a voice").click()
    page.set_input_files("#ref-audio input[type=file]", str(clip))
    page.wait_for_selector("#ref-info:has-text('8 kHz')", timeout=15_000)
    page.fill("#tts-text textarea", "This should not start.")
    page.click("#generate-btn")
    page.wait_for_selector("#tts-message:has-text('8000 Hz')", timeout=10_000)
    assert stats(frame)["runs"] == 0


def test_voice_audition_plays_each_voice_in_turn(browser_context, app_server):
    page, frame = open_studio(browser_context, app_server)
    set_max_seconds(page, 1.0)
    page.get_by_role("tab", name="Voice audition").click()
    boxes = page.locator("#audition-voices input[type=checkbox]")
    checked = [i for i in range(boxes.count()) if boxes.nth(i).is_checked()]
    assert len(checked) >= 2
    for i in checked[2:]:
        boxes.nth(i).uncheck()
    labels = page.locator("#audition-voices label")
    expected = [re.search(r"· (.+?) \(", labels.nth(i).inner_text()).group(1) for i in checked[:2]]

    page.click("#audition-btn")
    frame.wait_for_function("window.playerStats.completed.length === 2", timeout=60_000)
    s = wait_done(frame)
    assert s["state"] == "finished"
    assert [c["label"] for c in s["completed"]] == expected
    for item in s["completed"]:
        assert item["frames"] == 12 * SAMPLES_PER_FRAME == item["framesRendered"]  # at most 1 s
        assert item["ttfpMs"] > 0
    # Arrival times are kept for the last voice only: its gaps are judged, the first one's cannot be.
    assert s["completed"][-1]["underruns"] == s["underruns"]
    assert_gapless_where_provable(s)


def test_replay_and_16_bit_wav_download(browser_context, app_server, artifacts_dir):
    import soundfile
    page, frame = open_studio(browser_context, app_server)
    set_max_seconds(page, 1.0)
    page.fill("#tts-text textarea", "Play it again.")
    response = generate(page)
    first = wait_done(frame)
    pcm = generated_pcm(app_server, response)
    assert_played_everything(frame, first, pcm)

    frame.click("#replay")
    frame.wait_for_function(f"window.playerStats.runs === {first['runs'] + 1}")
    again = wait_done(frame)
    assert again["state"] == "finished" and again["framesRendered"] == len(pcm)
    assert again["label"].endswith("(replay)")
    assert_no_underruns(again)  # all of it reaches the worklet in one message before 'end': nothing can starve it

    with page.expect_download() as info:
        frame.click("#dl-wav")
    path = artifacts_dir / "download.wav"
    info.value.save_as(path)
    assert soundfile.info(path).subtype == "PCM_16"
    audio, rate = soundfile.read(path, dtype="float32", always_2d=True)
    assert rate == 48_000 and audio.shape == pcm.shape
    # The audio the server generates for this request in 16 bits, not the Opus the page played (the
    # server kept its float32 source; asked again it is equal up to codec float rounding).
    source = generated_pcm(app_server, response, "s16")
    step = 1 / 32767
    np.testing.assert_allclose(audio, source, rtol=0, atol=1e-4 + step + 1e-7)


def test_standalone_player_resamples_when_the_context_is_not_48k(browser_context, app_server):
    page = browser_context.new_page()
    # A 44.1 kHz context makes Chromium resample again on its way out, which loads this small box:
    # a longer prebuffer keeps this test about the resampler, not about CPU contention.
    page.goto(app_server.url + "player/studio/player.html?ctxRate=44100&max_frames=12&seed=5&prebufferMs=1000")
    page.wait_for_function("document.querySelector('#voice').options.length > 1")
    page.wait_for_function("window.playerStats.workletLoaded")
    page.fill("#text", "Resampled in the worklet.")
    page.click("#start")
    s = wait_done(page.main_frame)
    assert s["state"] == "finished", s
    assert s["sampleRate"] == 44_100 and s["resampling"] and s["streamSampleRate"] == 48_000
    assert s["framesReceived"] == 12 * SAMPLES_PER_FRAME
    assert abs(s["framesRendered"] - round(s["framesReceived"] * 44_100 / 48_000)) <= 2
    assert s["outputChannels"] == 2
    assert_gapless_where_provable(s, prebuffer_ms=1000)


def test_player_shows_server_errors(browser_context, app_server):
    page = browser_context.new_page()
    page.goto(app_server.url + "player/studio/player.html")
    page.wait_for_function("window.playerStats.workletLoaded")
    page.evaluate("window.mossPlayer.play({items: [{label: 'x', request: {text: 'hi', voice: 'NoSuchVoice'}}]})")
    s = wait_done(page.main_frame)
    assert s["state"] == "error"
    status = page.inner_text("#state")  # the one status line says what failed
    assert status.startswith("Failed:") and "NoSuchVoice" in status and "voice" in s["error"]
    assert page.get_attribute("#status", "aria-live") == "polite"


def app_server_voices(app_server) -> dict:
    return httpx.get(app_server.url + "api/voices", timeout=10).json()


# ---- model loading and load failures ------------------------------------------------------------


@pytest.fixture
def loading_app():
    """The real app around a model that is still 'downloading' until the test lets it fail."""
    import uvicorn
    from support.e2e_helpers import free_port

    from studio.app import create_app
    from studio.service import SynthesizerService
    from studio.settings import ServerSettings
    from tts_core.errors import ModelLoadError

    gate = threading.Event()

    def factory(report):
        report("downloading weights (test)")
        gate.wait(60)
        raise ModelLoadError("no network: pass local directories with --lm and --codec (test)")

    service = SynthesizerService(factory)
    server = uvicorn.Server(uvicorn.Config(create_app(service, ServerSettings()), host="127.0.0.1",
                                           port=free_port(), log_config=None, access_log=False,
                                           timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "in-process server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{server.config.port}/", gate
    gate.set()
    server.should_exit = True
    thread.join(10)


def test_status_line_while_loading_and_after_a_failure(loading_app, browser_context):
    url, gate = loading_app
    page = browser_context.new_page()
    page.goto(url)
    page.wait_for_selector("#model-status:has-text('downloading weights (test)')", timeout=30_000)
    assert "Loading the model" in page.inner_text("#model-status")
    page.fill("#tts-text textarea", "Too early.")
    page.click("#generate-btn")
    page.wait_for_selector("#tts-message:has-text('still loading')", timeout=10_000)
    player = player_frame(page)  # the player's status line tells the same truth
    player.wait_for_selector("#state:has-text('Loading the model')", timeout=10_000)
    assert "downloading weights (test)" in player.inner_text("#state")
    early = httpx.post(url + "api/tts/stream", json={"text": "Too early."}, timeout=10)
    assert early.status_code == 503 and early.headers["retry-after"]
    assert early.json()["error"]["type"] == "model_loading"

    gate.set()  # the load now fails; the page's poller shows it without a reload
    page.wait_for_selector("#model-status:has-text('could not be loaded')", timeout=10_000)
    assert "--lm and --codec" in page.inner_text("#model-status")
    player.wait_for_selector("#state:has-text('could not be loaded')", timeout=10_000)
    assert player.get_attribute("#status", "role") == "status"
    health = httpx.get(url + "health", timeout=10).json()
    assert health["status"] == "failed" and "--lm" in health["error"]


def test_missing_weights_give_one_clear_line_not_a_traceback(tmp_path):
    """`python app.py` with weights it cannot get: the server stays up and says what to do."""
    from support.e2e_helpers import REPO_ROOT, free_port

    port = free_port()
    log_path = tmp_path / "app.log"
    env = {**os.environ, "PORT": str(port), "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "app.py", "--lm", str(tmp_path / "no-such-lm")], cwd=REPO_ROOT,
                                   env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        health: dict = {}
        while time.monotonic() < deadline and health.get("status") != "failed":
            assert process.poll() is None, log_path.read_text()
            with contextlib.suppress(httpx.HTTPError):
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json()
            time.sleep(0.25)
        assert health.get("status") == "failed", health
        assert "no-such-lm" in health["error"] and "\n" not in health["error"].strip()
        assert "Traceback" not in log_path.read_text()
    finally:
        process.terminate()
        process.wait(timeout=15)
