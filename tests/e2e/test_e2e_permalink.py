"""Audition permalinks in headless Chromium: the board's "Copy link" pins text, voices, seeds and
sampling settings in `?audition=...`; the link opened in a fresh browser context plays the same
requests again and the same PCM comes back; a link made on another engine build says so."""

from __future__ import annotations

import base64
import io
import json

import httpx
import numpy as np
import pytest
import soundfile

pytest.register_assert_rewrite("support.studio_helpers")
from support.studio_helpers import fix_seed, open_page, set_max_seconds, stream_requests, wait_done  # noqa: E402

pytestmark = pytest.mark.e2e


def _pcm(url: str, request_id: str) -> np.ndarray:
    resp = httpx.get(f"{url}api/tts/result/{request_id}.wav", timeout=30)
    assert resp.status_code == 200, resp.text
    return soundfile.read(io.BytesIO(resp.content), dtype="int16", always_2d=True)[0]


def _decode(link: str) -> dict:
    value = link.split("audition=", 1)[1].split("&", 1)[0]
    return json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))


def _posted(requests: list) -> list[dict]:
    """The stream bodies sent, less what the player's delivery adds (the `transport` it picks for
    this browser: how the audio travels, not what it is)."""
    bodies = [r.post_data_json for r in requests if "/api/tts/stream" in r.url and r.method == "POST"]
    return [{k: v for k, v in b.items() if k != "transport"} for b in bodies]


def _opened(browser, link: str):
    context = browser.new_context(viewport={"width": 1360, "height": 1000})
    seen: list = []
    context.on("request", lambda r: seen.append(r))  # before the page opens: the link may play at once
    _, frame = open_page(context, link)
    return context, seen, frame


def test_a_permalink_replays_the_same_audio_in_a_fresh_context(browser, browser_context, studio) -> None:
    page, frame = open_page(browser_context, studio.url)
    set_max_seconds(page, 1.0)
    fix_seed(page, 4321)
    page.get_by_role("tab", name="Voice audition").click()
    boxes = page.locator("#audition-voices input[type=checkbox]")
    for i in [i for i in range(boxes.count()) if boxes.nth(i).is_checked()][2:]:
        boxes.nth(i).uncheck()
    requests = stream_requests(page)
    page.click("#audition-btn")
    frame.wait_for_function("window.playerStats.completed.length === 2", timeout=90_000)
    made = wait_done(frame)
    bodies = _posted(requests)
    frame.get_by_role("button", name="Copy link").click()
    frame.wait_for_function("document.querySelector('#permalink').value.includes('audition=')")
    link = frame.input_value("#permalink")
    pinned = _decode(link)
    assert [i["request"] for i in pinned["items"]] == bodies and pinned["build"]
    assert all(i["request"]["seed"] == 4321 for i in pinned["items"])

    context, again, frame2 = _opened(browser, link)
    try:
        # The link plays once the model is ready; where the browser wants a gesture first, the player asks.
        frame2.wait_for_function("window.playerStats.completed.length === 2 || "
                                 "!document.querySelector('#unlock').hidden", timeout=90_000)
        if frame2.locator("#unlock").is_visible():
            frame2.locator("#unlock").click()
        frame2.wait_for_function("window.playerStats.completed.length === 2", timeout=90_000)
        replayed = wait_done(frame2)
        assert _posted(again) == bodies
        assert [c["label"] for c in replayed["completed"]] == [c["label"] for c in made["completed"]]
        for old, new in zip(made["completed"], replayed["completed"], strict=True):
            before, after = _pcm(studio.url, old["requestId"]), _pcm(studio.url, new["requestId"])
            assert before.shape == after.shape
            # Same seed and settings: the same audio, bit for bit (tests/engine/test_cpu_determinism.py)
            assert np.array_equal(before, after)
        assert frame2.locator("#link-note").is_hidden()  # the same engine build: nothing to say
    finally:
        context.close()

    other = dict(pinned, build="0123456789ab")
    value = base64.urlsafe_b64encode(json.dumps(other).encode()).decode().rstrip("=")
    context, _, frame3 = _opened(browser, f"{studio.url}?audition={value}")
    try:
        frame3.wait_for_selector("#link-note:not([hidden])", timeout=15_000)
        assert "another engine build" in frame3.inner_text("#link-note")
    finally:
        context.close()
