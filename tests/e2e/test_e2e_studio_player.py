"""The studio page on a phone, with long text, captions, pushed audio, a slow generator, and the
features that depend on the server (speed, saved voices), in headless Chromium.

Same app as test_e2e_studio.py (`studio_helpers.studio`). Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile

pytest.register_assert_rewrite("support.studio_helpers")
from support.e2e_helpers import playwright_sync_api  # noqa: E402
from support.studio_helpers import (  # noqa: E402
    axe_serious,
    low_contrast,
    open_page,
    set_max_seconds,
    shot,
    wait_done,
)

pytestmark = pytest.mark.e2e

SAMPLES_PER_FRAME = 3840


# ---- phone, status, long text ---------------------------------------------------------------------


def test_phone_first_screen_has_text_voice_generate_and_the_player(browser, studio, artifacts_dir):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:
        page, frame = open_page(context, studio.url)
        title = page.locator("#header h1").bounding_box()
        status = page.locator("#model-status").bounding_box()
        assert status["y"] >= title["y"] + title["height"] - 1  # the header stacks
        for selector in ("#tts-text textarea", "#voice-select input", "#generate-btn"):
            box = page.locator(selector).bounding_box()
            assert box["y"] + box["height"] <= 844, f"{selector} is below the first screen"
        player = page.locator("#moss-player").bounding_box()
        assert player["y"] + 60 <= 844  # the player's status line and first figures are on screen
        assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing wider than the phone
        shot(page, artifacts_dir, "phone-first-screen")
        set_max_seconds(page, 1.0)  # scrolls down to the advanced settings ...
        page.locator("#generate-btn").tap()
        frame.wait_for_function("window.playerStats.state !== 'idle'", timeout=30_000)
        page.wait_for_timeout(800)  # the smooth scroll
        box = page.locator("#moss-player").bounding_box()
        assert 0 <= box["y"] < 844 - 60, box  # ... and the click brings the player on screen
        wait_done(frame)
        shot(page, artifacts_dir, "phone-after-generate")
    finally:
        context.close()


def test_over_long_text_is_announced_and_cut_at_a_sentence(browser_context, studio):
    page, frame = open_page(browser_context, studio.url)
    sentence = "This long text keeps going so that it will not fit in one request at all. "
    text = sentence * (5600 // len(sentence) + 1)
    page.fill("#tts-text textarea", text)
    page.wait_for_selector("#char-count:has-text('too long')")
    assert f"{len(text):,}" in page.inner_text("#char-count")
    with page.expect_response(lambda r: "/api/tts/stream" in r.url and r.ok, timeout=30_000) as info:
        page.click("#generate-btn")
    spoken = info.value.request.post_data_json["text"]
    assert len(spoken) <= 4096 and spoken.endswith("at all.") and text.startswith(spoken)
    message = page.inner_text("#tts-message")
    assert "limit is 4,096" in message and f"{len(text):,} characters" in message and "not spoken" in message
    assert page.get_attribute("#tts-message", "role") == "alert"  # read out when it appears
    assert page.get_attribute("#model-status", "aria-live") == "polite"
    frame.click("#stop")
    wait_done(frame, timeout_ms=10_000)
    assert frame.inner_text("#state") == "Stopped"
    assert axe_serious(page) == []


# ---- captions and read-along ----------------------------------------------------------------------


def test_the_streams_events_give_read_along_and_srt_vtt(browser_context, studio):
    page, frame = open_page(browser_context, studio.url)
    set_max_seconds(page, 2.0)
    page.fill("#tts-text textarea", "Captions come from the segment events.")
    with page.expect_response(lambda r: "/api/tts/stream" in r.url and r.ok, timeout=30_000) as info:
        page.click("#generate-btn")
    assert info.value.request.post_data_json["transport"] == "opus"  # where WebCodecs decodes it: here
    assert float(info.value.headers["x-estimated-duration"]) == pytest.approx(2.0, abs=0.01)
    frame.wait_for_function("document.querySelector('#readalong .segment.current')", timeout=30_000)
    assert "Captions come from" in frame.inner_text("#readalong .segment.current")
    s = wait_done(frame)
    assert s["segments"] == 1 and s["estimatedS"] == pytest.approx(2.0, abs=0.01)
    assert s["transport"] == "opus" and s["wire"] == "Opus 160 kb/s" and frame.text_content("#wire") == s["wire"]
    assert s["bytesReceived"] == s["framesReceived"] * 8  # the decoded float32 handed to the worklet
    with page.expect_download() as srt:
        frame.click("#dl-srt")
    assert srt.value.suggested_filename.endswith(".srt")
    cue = Path(srt.value.path()).read_text(encoding="utf-8").split("\n")
    assert cue[0] == "1" and cue[2].startswith("Captions come from")
    start, end = cue[1].split(" --> ")
    assert start == "00:00:00,000" and end == "00:00:02,000"
    with page.expect_download() as vtt:
        frame.click("#dl-vtt")
    text = Path(vtt.value.path()).read_text(encoding="utf-8")
    assert text.startswith("WEBVTT") and "00:00:00.000 --> 00:00:02.000" in text
    assert axe_serious(frame) == [] and not low_contrast(frame)  # read-along and caption links included


SEGMENTS = [("First sentence, one second long.", 0.0, 1.0), ("Second sentence here.", 1.0, 2.0),
            ("Third and last.", 2.0, 3.0)]


def test_pushed_audio_plays_with_read_along_following_the_sentence_heard(browser_context, studio, artifacts_dir):
    """Pushed audio (docs/PROTOCOL.md §3.2): the parent page posts PCM and events; the player plays,
    times and captions it."""
    page = browser_context.new_page()
    page.goto(studio.url + "player/studio/player.html?embed=1")
    page.wait_for_function("window.playerStats.workletLoaded")
    page.evaluate("""(segments) => {
      const post = (m, t) => window.postMessage(m, location.origin, t || []);
      post({type: 'tts:start', requestId: 'push-1', sampleRate: 48000, channels: 2, estimatedDuration: 3,
            text: segments.map((s) => s[0]).join(' '), label: 'pushed'});
      for (const [text, start, end] of segments) {
        const n = Math.round((end - start) * 48000), data = new Float32Array(2 * n);
        for (let i = 0; i < n; i++) { data[2 * i] = 0.2 * Math.sin(i / 10); data[2 * i + 1] = -data[2 * i]; }
        post({type: 'tts:pcm', requestId: 'push-1', data}, [data.buffer]);
        post({type: 'tts:event', requestId: 'push-1', event: {type: 'speech.segment', index: 0, text, start, end}});
      }
      post({type: 'tts:end', requestId: 'push-1'});
    }""", [list(s) for s in SEGMENTS])
    frame = page.main_frame
    heard = "window.playerStats.framesRendered / 48000"
    for text, start, end in SEGMENTS:  # each sentence is highlighted while (and only while) it is heard
        frame.wait_for_function(f"""(() => {{ const c = document.querySelector('#readalong .segment.current');
            return c && c.textContent.startsWith({json.dumps(text)}); }})()""", timeout=10_000)
        t = frame.evaluate(heard)
        assert start - 0.1 <= t <= end + 0.6, (text, t)
    s = wait_done(frame)
    assert s["state"] == "finished" and s["framesRendered"] == s["framesReceived"] == 3 * 48_000
    assert s["ttfpMs"] is not None and s["underruns"] == 0 and s["segments"] == 3
    assert page.get_attribute("#dl-mp3", "aria-disabled") == "true"  # the server keeps no pushed audio ...
    with page.expect_download() as wav:
        page.click("#dl-wav")  # ... the browser writes the WAV
    audio, rate = soundfile.read(wav.value.path(), dtype="float32", always_2d=True)
    assert rate == 48_000 and audio.shape == (3 * 48_000, 2)
    np.testing.assert_allclose(audio[:100, 0], 0.2 * np.sin(np.arange(100) / 10), atol=1 / 32767)


# ---- the adaptive start in the browser ------------------------------------------------------------

STATUS_LOG = """() => { window.statusLog = []; new MutationObserver(() => window.statusLog.push(
    document.getElementById('state').textContent)).observe(document.getElementById('state'),
    {childList: true, characterData: true, subtree: true}); }"""


def test_generation_at_rtf_1_5_plays_through_with_at_most_one_rebuffer(browser_context, studio, paced, artifacts_dir):
    """Issue 16's browser target: the stream arrives 1.5x slower than real time (paced server-side);
    the player buffers visibly, says how long, and then plays all of it with at most one rebuffer."""
    page, frame = open_page(browser_context, studio.url)
    set_max_seconds(page, 6.0)
    page.fill("#tts-text textarea", "A slower machine makes this sentence more slowly than it can be played, "
                                    "so the player has to wait for enough of it before it starts to speak.")
    frame.evaluate(STATUS_LOG)
    paced.rtf = 1.5
    with page.expect_response(lambda r: "/api/tts/stream" in r.url and r.ok, timeout=30_000) as info:
        page.click("#generate-btn")
    estimate = float(info.value.headers["x-estimated-duration"])
    assert estimate == pytest.approx(6.0, abs=0.01)  # the cap is below the text's estimate: exact
    frame.wait_for_function("/^Buffering — about \\d+ s$/.test(document.getElementById('state').textContent)",
                            timeout=15_000)
    shot(page, artifacts_dir, "buffering-rtf-1.5")
    s = wait_done(frame, timeout_ms=60_000)
    log = paced.paced[-1]["log"]
    assert s["state"] == "finished"
    assert s["framesReceived"] == s["framesRendered"] == 75 * SAMPLES_PER_FRAME  # all audio played
    assert s["underruns"] <= 1, (s["underruns"], s["underrunsAt"], s["startBufferedFrames"], log)
    # It really was slow: the last audio arrived about 1.5 x its length after the first.
    assert log[-1][0] >= 1.5 * (6.0 - log[0][1]) * 0.99
    assert s["startBufferedFrames"] > 2 * 48_000, (s["underruns"], s["plan"], s["arrivals"][:20], log[:20])  # it waited
    waits = [int(m.group(1)) for t in frame.evaluate("window.statusLog")
             if (m := re.fullmatch(r"Buffering — about (\d+) s", t))]
    # The expected wait was shown (its size follows the rate measured on this machine: not asserted).
    assert waits
    assert "Playing" in frame.evaluate("window.statusLog") and frame.inner_text("#state") == "Done"


def test_fast_generation_keeps_the_short_start(browser_context, studio):
    page, frame = open_page(browser_context, studio.url)
    set_max_seconds(page, 2.0)
    with page.expect_request(lambda r: "/api/tts/stream" in r.url, timeout=30_000) as request:
        page.click("#generate-btn")
    assert request.value.post_data_json["max_frames"] == 25
    s = wait_done(frame)
    assert s["state"] == "finished" and s["estimatedS"] == pytest.approx(2.0, abs=0.01)
    from support.e2e_helpers import chunks_arrived_in_time
    # Where generation provably ran ahead of playback (it may not on a loaded machine), the player
    # planned the short start, not a wait of seconds. (What was buffered when it started is not the
    # measure: chunks that reach the audio thread together, as on a busy machine, are all buffered
    # by its first render quantum. The exact short start is shown in test_worklet_adaptive.py.)
    if chunks_arrived_in_time(s["arrivals"], total_frames=s["framesReceived"], prebuffer_ms=200):
        assert s["plan"] is None or s["plan"]["targetS"] < 1.0, (s["plan"], s["arrivals"][:8])
        assert s["underruns"] == 0


# ---- features that depend on the server -----------------------------------------------------------


def test_speed_slider_is_offered_exactly_when_the_stream_route_takes_speed(browser_context, studio):
    from studio.ui.handlers import speed_supported

    page, frame = open_page(browser_context, studio.url)
    slider = page.locator("#speed input[type=number]")
    if not speed_supported():
        assert page.locator("#speed").count() == 0  # degrade: no control that cannot work
        with page.expect_request(lambda r: "/api/tts/stream" in r.url, timeout=30_000) as request:
            page.click("#generate-btn")
        assert "speed" not in request.value.post_data_json
        frame.click("#stop")
        return
    assert slider.is_visible()
    set_max_seconds(page, 1.0)
    slider.fill("1.5")
    slider.press("Enter")
    page.wait_for_function("Number(document.querySelector('#speed input[type=range]').value) === 1.5")
    with page.expect_response(lambda r: "/api/tts/stream" in r.url and r.ok, timeout=30_000) as info:
        page.click("#generate-btn")
    assert info.value.request.post_data_json["speed"] == 1.5
    s = wait_done(frame)
    assert s["state"] == "finished" and s["audioSeconds"] == pytest.approx(12 * 0.08 / 1.5, abs=0.1)


def test_my_voices_tab_shows_the_servers_saved_voices(browser_context, studio, data_dir):
    voices = httpx.get(studio.url + "api/voices", timeout=10).json()
    if "saved" not in voices:  # this server keeps no voices: no empty tab
        page, _ = open_page(browser_context, studio.url)
        assert page.get_by_role("tab", name="My voices").count() == 0
        return
    clip = (data_dir / "finetune_sample" / "7.wav").read_bytes()
    made = httpx.post(studio.url + "v1/audio/voices", data={"name": "Test voice"},
                      files={"audio_sample": ("7.wav", clip, "audio/wav")}, timeout=120)
    assert made.status_code < 300, made.text
    voice_id = made.json()["id"]
    page, frame = open_page(browser_context, studio.url)
    page.get_by_role("tab", name="My voices").click()
    page.click("#saved-voice-select input")
    page.get_by_role("option", name=re.compile("Test voice")).click()
    set_max_seconds(page, 1.0)
    with page.expect_response(lambda r: "/api/tts/stream" in r.url and r.ok, timeout=30_000) as info:
        page.click("#generate-btn")
    assert info.value.request.post_data_json["voice"] == voice_id
    assert wait_done(frame)["state"] == "finished"
    # Saved after the page loaded: there when the tab is opened again, without a reload.
    later = httpx.post(studio.url + "v1/audio/voices", data={"name": "Later voice"},
                       files={"audio_sample": ("7.wav", clip, "audio/wav")}, timeout=120)
    assert later.status_code < 300, later.text
    # Opening the tab reads the list again, by a queued server event. Typing in the box lists the
    # choices that match (Gradio filters the list by the box's text, which still shows "Test voice").
    # Until the new voice is listed, the tab is opened again: a loaded machine may see the event land
    # late, and one tab switch lost among the queue's events must not fail the check.
    later_option = page.get_by_role("option", name=re.compile("Later voice"))
    deadline = time.monotonic() + 60  # a hang guard, not a speed check
    while True:
        page.get_by_role("tab", name="Preset voice").click()
        page.get_by_role("tab", name="My voices").click()
        page.fill("#saved-voice-select input", "Later")
        try:
            later_option.wait_for(state="visible", timeout=3_000)
            break
        except playwright_sync_api().TimeoutError:
            assert time.monotonic() < deadline, "the My voices list never showed the voice saved after load"
            page.keyboard.press("Escape")
