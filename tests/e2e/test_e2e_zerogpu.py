"""End to end in ZeroGPU mode: `python app.py --zerogpu` (tiny checkpoints, the local ZeroGPU
harness) and the page in headless Chromium. The click runs a Gradio event whose audio is made in a
forked GPU worker and reaches the AudioWorklet player as Gradio updates (static/zerogpu/bridge-zerogpu.js
-> docs/PROTOCOL.md §3.2 push messages); the page never fetches /api/tts/stream itself."""

from __future__ import annotations

import os
import re
import time

import httpx
import numpy as np
import pytest
from support import audio_tap
from support.e2e_helpers import (
    REPO_ROOT,
    STARTUP_TIMEOUT_S,
    AppServer,
    app_command,
    assert_gapless_where_provable,
    free_port,
)
from support.server_helpers import app_process, wait_until_ready
from support.studio_helpers import player_frame

from bench.lib.player_stream import player_stream

pytestmark = pytest.mark.e2e

LONG_TEXT = " ".join(f"Sentence number {i} keeps this stream going for quite a while." for i in range(30))
DONE = "['finished', 'stopped', 'error'].includes(window.playerStats.state)"


@pytest.fixture(scope="module")
def zerogpu_app(data_dir, artifacts_dir, tmp_path_factory):
    port = free_port()
    env = {**os.environ, "PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1", "MOSS_TTS_CACHE_DIR": str(tmp_path_factory.mktemp("zerogpu-cache")),
           "PYTHONUNBUFFERED": "1", "MOSS_TTS_NUM_THREADS": os.environ.get("MOSS_TTS_NUM_THREADS", "1"),
           # a PRO-sized day for one visitor: the long text's call asks for more than the anonymous 2 min
           "MOSS_TTS_ZEROGPU_QUOTA": "anonymous=2400"}
    env.pop("SPACE_ID", None)
    env.pop("SPACES_ZERO_GPU", None)
    # fp32 on the server's CPU engine too, so the API's audio can be compared with the page's.
    command = [*app_command(data_dir), "--zerogpu", "--quantize", "fp32"]
    log_path = artifacts_dir / "app-zerogpu.log"
    with app_process(command, cwd=REPO_ROOT, env=env, log_path=log_path) as process:
        server = AppServer(url=f"http://127.0.0.1:{port}/", process=process, log_path=log_path)
        wait_until_ready(server, STARTUP_TIMEOUT_S)
        yield server


def open_page(context, server):
    page = context.new_page()
    fetched = []
    page.on("request", lambda r: fetched.append(r.url) if "/api/tts/stream" in r.url else None)
    page.goto(server.url)
    page.wait_for_selector("#model-status:has-text('Ready')", timeout=30_000)
    page.wait_for_function("document.querySelector('#voice-select input')?.value", timeout=10_000)
    page.wait_for_function("window.mossZeroGPU !== undefined", timeout=10_000)
    frame = player_frame(page)
    frame.wait_for_function("window.playerStats && window.playerStats.workletLoaded", timeout=10_000)
    return page, frame, fetched


def stats(frame) -> dict:
    return frame.evaluate("JSON.parse(JSON.stringify(window.playerStats))")


def test_health_names_the_mode(zerogpu_app):
    health = zerogpu_app.health()
    assert health["status"] == "ready" and health["device"] == "cpu"
    assert health["mode"].startswith("zerogpu (the local ZeroGPU harness)")


def test_page_streams_from_the_gpu_worker_through_gradio_events(browser_context, zerogpu_app):
    page, frame, fetched = open_page(browser_context, zerogpu_app)
    page.fill("#tts-text textarea", "Hello from the ZeroGPU worker, through Gradio events.")
    page.click("#generate-btn")
    frame.wait_for_function(DONE, timeout=60_000)
    s = stats(frame)
    assert s["state"] == "finished", s
    assert fetched == [], "in ZeroGPU mode the page's audio must not come from /api/tts/stream"
    bridge = page.evaluate("window.mossZeroGPU.stats")
    assert bridge["lost"] == 0 and bridge["relays"] == 1
    assert bridge["pcmMessages"] == s["chunksPosted"] > 0
    assert s["framesReceived"] == s["framesRendered"] > 0 and s["framesReceived"] % 3840 == 0
    assert s["streamSampleRate"] == 48_000 and s["streamChannels"] == 2
    assert s["transport"] == "opus" and frame.text_content("#wire") == "Opus 160 kb/s"  # the compressed relay
    assert_gapless_where_provable(s)  # 0 underruns wherever the chunks provably arrived in time
    assert 0 < s["ttfpMs"] < 60_000 and 0 < s["rtf"] < 100
    assert re.fullmatch(r"\d+ ms", frame.inner_text("#m-ttfp"))
    assert frame.text_content("#m-underruns") == str(s["underruns"])
    log = zerogpu_app.log_tail(20_000)
    worker = re.search(r"ZeroGPU harness: forked worker pid (\d+)", log)
    assert worker and int(worker.group(1)) != zerogpu_app.process.pid
    assert f"ZeroGPU stream {s['requestId']} done" in log


def test_page_audio_equals_what_the_server_engine_makes(browser_context, zerogpu_app):
    page, frame, _ = open_page(browser_context, zerogpu_app)
    audio_tap.install(frame, "window.mossPlayer.player")
    page.locator("#advanced").get_by_role("button", name=re.compile("Advanced sampling")).click()
    page.locator("#random-seed input").uncheck()
    page.locator("#seed input").fill("7")
    page.locator("#seed input").press("Enter")
    text = "The same seed gives the same audio."
    page.fill("#tts-text textarea", text)
    page.click("#generate-btn")
    frame.wait_for_function(DONE, timeout=60_000)
    s = stats(frame)
    assert s["state"] == "finished", s
    # The relay carries the player's Opus transport: compare with the server's CPU engine through the
    # same encoder, decoded by FFmpeg (the page decoded the relay with the browser's own decoder).
    again = httpx.post(zerogpu_app.url + "api/tts/stream", timeout=60,
                       json={"text": text, "voice": s["label"], "seed": 7, "transport": "opus"})
    assert again.headers["x-sample-format"] == "opus" and s["transport"] == "opus"
    pcm = player_stream(again.content, "opus")[0].T.astype(np.float64)
    assert s["framesReceived"] == len(pcm)
    if assert_gapless_where_provable(s):  # the rendered energy is then the source's, up to the final fade
        heard = audio_tap.take(frame, s["firstAudioFrame"], s["framesRendered"]).astype(np.float64)
        assert (heard[:, 0] ** 2).sum() == pytest.approx(float((pcm[:, 0] ** 2).sum()), rel=2e-3)
        assert (heard[:, 1] ** 2).sum() == pytest.approx(float((pcm[:, 1] ** 2).sum()), rel=2e-3)


def test_stop_cancels_the_gpu_call_and_the_next_generation_works(browser_context, zerogpu_app):
    page, frame, _ = open_page(browser_context, zerogpu_app)
    page.fill("#tts-text textarea", LONG_TEXT)
    page.click("#generate-btn")
    frame.wait_for_function("window.playerStats.framesRendered > 48000 * 0.3", timeout=30_000)
    frame.click("#stop")  # the player's Stop (it presses the page's hidden stop button for Gradio's cancels)
    frame.wait_for_function(DONE, timeout=10_000)
    assert stats(frame)["state"] == "stopped"
    deadline = time.monotonic() + 15
    while "stopped by the page" not in zerogpu_app.log_tail(20_000):
        assert time.monotonic() < deadline, "the relay was not cancelled:\n" + zerogpu_app.log_tail()
        time.sleep(0.2)
    runs = stats(frame)["runs"]
    page.fill("#tts-text textarea", "And once more.")
    page.click("#generate-btn")
    frame.wait_for_function(f"window.playerStats.runs > {runs} && {DONE}", timeout=60_000)
    s = stats(frame)
    assert s["state"] == "finished" and s["framesReceived"] == s["framesRendered"] > 0, s


def test_openai_api_runs_on_the_cpu_engine_in_zerogpu_mode(zerogpu_app):
    response = httpx.post(zerogpu_app.url + "v1/audio/speech", timeout=60,
                          json={"model": "moss-tts-nano", "input": "Hello.", "voice": "alloy", "response_format": "wav",
                                "max_frames": 8})
    assert response.status_code == 200, response.text
    assert response.content[:4] == b"RIFF" and len(response.content) > 44
