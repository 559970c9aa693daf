"""End to end, ZeroGPU mode with the visitor's quota out: `python app.py --zerogpu` (tiny
checkpoints, the local harness keeping a 10-second anonymous quota, less than any call asks for) and
the page in headless Chromium. The click's GPU call is refused before it starts; the page says so in
plain words and offers the server's CPU engine, and that offer plays the audio."""

from __future__ import annotations

import json
import os
import re

import pytest
from support.e2e_helpers import REPO_ROOT, STARTUP_TIMEOUT_S, AppServer, app_command, free_port
from support.server_helpers import app_process, wait_until_ready
from support.studio_helpers import player_frame

pytestmark = pytest.mark.e2e

DONE = "['finished', 'stopped', 'error'].includes(window.playerStats.state)"


@pytest.fixture(scope="module")
def quota_app(data_dir, artifacts_dir, tmp_path_factory):
    port = free_port()
    env = {**os.environ, "PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1", "MOSS_TTS_CACHE_DIR": str(tmp_path_factory.mktemp("quota-cache")),
           "PYTHONUNBUFFERED": "1", "MOSS_TTS_NUM_THREADS": os.environ.get("MOSS_TTS_NUM_THREADS", "1"),
           "MOSS_TTS_ZEROGPU_QUOTA": "anonymous=10"}
    env.pop("SPACE_ID", None)
    env.pop("SPACES_ZERO_GPU", None)
    log_path = artifacts_dir / "app-zerogpu-quota.log"
    with app_process([*app_command(data_dir), "--zerogpu"], cwd=REPO_ROOT, env=env, log_path=log_path) as process:
        server = AppServer(url=f"http://127.0.0.1:{port}/", process=process, log_path=log_path)
        wait_until_ready(server, STARTUP_TIMEOUT_S)
        yield server


def test_quota_out_is_said_plainly_and_the_cpu_engine_plays_instead(browser_context, quota_app):
    page = browser_context.new_page()
    fetched = []
    page.on("request", lambda r: fetched.append(r.url) if "/api/tts/stream" in r.url else None)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(quota_app.url)
    page.wait_for_selector("#model-status:has-text('Ready')", timeout=30_000)
    page.wait_for_function("document.querySelector('#voice-select input')?.value", timeout=10_000)
    page.wait_for_function("window.mossZeroGPUNotice !== undefined", timeout=10_000)
    frame = player_frame(page)
    frame.wait_for_function("window.playerStats && window.playerStats.workletLoaded", timeout=10_000)

    page.fill("#tts-text textarea", "Out of quota, this still gets said on the CPU.")
    page.click("#generate-btn")
    notice = page.locator("#zerogpu-notice")
    notice.locator("text=Your ZeroGPU quota for today is used up").wait_for(timeout=60_000)
    text = notice.inner_text()
    assert re.search(r"\(\d+s requested vs\. 10s left\)\. Try again in \d\d:\d\d:\d\d", text), text
    assert "Traceback" not in text and "Error:" not in text  # plain words, no raw error
    assert notice.get_attribute("role") == "alert"
    stats = page.evaluate("window.mossZeroGPUNotice.stats")
    assert stats["unavailable"] == 1 and stats["shownGpuSeconds"] >= 20  # the ask was shown first
    assert fetched == [], "nothing plays before the visitor accepts the offer"
    assert page.evaluate("window.mossZeroGPU.stats.pcmMessages") == 0

    button = page.locator("#zerogpu-cpu-btn")
    assert button.is_visible() and "CPU" in button.inner_text()
    before = frame.evaluate("window.playerStats.runId")
    button.click()
    # The fallback's own run: the state of the refused attempt must not count as its end.
    frame.wait_for_function(f"window.playerStats.runId !== {json.dumps(before)} && {DONE}", timeout=60_000)
    s = frame.evaluate("JSON.parse(JSON.stringify(window.playerStats))")
    assert s["state"] == "finished", s
    assert len(fetched) == 1, "the offer plays through the server's CPU engine (/api/tts/stream)"
    assert s["framesReceived"] == s["framesRendered"] > 0 and s["streamChannels"] == 2
    assert "Generating on the server's CPU" in notice.inner_text() and not button.is_visible()
    assert page.evaluate("window.mossZeroGPUNotice.stats.fallbacks") == 1
    assert errors == []
    log = quota_app.log_tail(20_000)
    assert "forked worker" not in log, "the refused call must never reach a GPU worker"
