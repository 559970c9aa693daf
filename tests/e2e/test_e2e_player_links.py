"""The player on a slow link, in headless Chromium: the transports it asks for, what it measures,
what it chooses, and how it buffers when the network (throttled through the DevTools protocol's
`Network.emulateNetworkConditions`) is slower than the audio.

Same in-process studio as test_e2e_studio_player.py (`studio_helpers.studio`). As in the other
browser tests, what is asserted follows from the arrival times the player recorded, never from a
wall-clock figure of this (shared, slow) machine.
"""

from __future__ import annotations

import re

import pytest

pytest.register_assert_rewrite("support.studio_helpers")
from support.studio_helpers import open_page, set_max_seconds, wait_done, wait_runs  # noqa: E402

pytestmark = pytest.mark.e2e

SAMPLES_PER_FRAME = 3840
NO_DECODER = "delete window.AudioDecoder; delete window.EncodedAudioChunk;"


def generate(page) -> dict:
    """Click Generate; the stream request's JSON body."""
    with page.expect_request(lambda r: "/api/tts/stream" in r.url, timeout=30_000) as request:
        page.click("#generate-btn")
    return request.value.post_data_json


def test_compressed_mode_streams_opus_and_plays_every_sample(browser_context, studio):
    page, frame = open_page(browser_context, studio.url)
    set_max_seconds(page, 2.0)
    frame.select_option("#transport-mode", "compressed")
    body = generate(page)
    s = wait_done(frame)
    assert body["transport"] == "opus" and body["framing"] == "events"
    assert s["state"] == "finished" and s["transport"] == "opus"
    assert s["framesReceived"] == s["framesRendered"] == 25 * SAMPLES_PER_FRAME  # exact after the trims
    assert s["trailingBytes"] == 0
    assert s["streamBytes"] < s["framesReceived"] * 8 / 10  # far fewer bytes than float32
    assert s["wire"].startswith("Opus 160 kb/s · link ≥ "), s["wire"]
    assert frame.inner_text("#wire") == s["wire"]
    assert s["segments"] > 0  # captions still come in the event frames


def test_without_audio_decoder_compressed_falls_back_to_16_bit(browser_context, studio):
    browser_context.add_init_script(NO_DECODER)  # every frame of the page, the player's too
    page, frame = open_page(browser_context, studio.url)
    assert frame.evaluate("typeof window.AudioDecoder") == "undefined"
    set_max_seconds(page, 2.0)
    frame.select_option("#transport-mode", "compressed")
    body = generate(page)
    s = wait_done(frame)
    assert body["transport"] == "s16"
    assert s["state"] == "finished" and s["transport"] == "s16"
    assert s["framesReceived"] == s["framesRendered"] == 25 * SAMPLES_PER_FRAME
    assert s["wire"].startswith("16-bit PCM (lossless)"), s["wire"]


def test_lossless_mode_and_the_first_automatic_utterance_stay_float32(browser_context, studio, paced):
    # Paced at twice real time: the utterance's reads then span ~0.5 s whatever this machine's speed
    # (an unpaced tiny model can deliver it all within the meter's shortest span, leaving no reading).
    paced.rtf = 0.5
    page, frame = open_page(browser_context, studio.url)
    set_max_seconds(page, 1.0)
    body = generate(page)  # auto, nothing measured yet: float32 as before, and the link is measured
    s = wait_done(frame)
    assert body["transport"] == "f32" and s["transport"] == "f32"
    assert s["linkBytesPerS"] and s["linkBytesPerS"] > 0
    assert frame.evaluate("JSON.parse(localStorage.getItem('moss-tts:link')).transport") == "f32"
    frame.select_option("#transport-mode", "lossless")
    body = generate(page)
    s = wait_runs(frame, 2)
    assert body["transport"] in ("f32", "s16")  # the lossless tier the measured link carries
    assert s["transport"] in ("f32", "s16") and s["framesReceived"] == s["framesRendered"]


# ---- throttled links (DevTools protocol), automatic mode ------------------------------------------

LONG_TEXT = ("A visitor on an ordinary connection hears this sentence while it is being generated, and it "
             "keeps going for a good while so that the cap on its length, not the text, ends it.")
PLAY = "([text, frames]) => window.mossPlayer.play({items: [{label: 'link', request: {text, seed: 3, max_frames: frames}}]})"


def throttled_player(context, studio, bytes_per_s: int, latency_ms: int):
    """The player page opened directly, its network throttled by Chromium itself."""
    page = context.new_page()
    page.goto(studio.url + "player/studio/player.html")
    page.wait_for_function("window.playerStats && window.playerStats.workletLoaded", timeout=10_000)
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": latency_ms,
                                                  "downloadThroughput": bytes_per_s, "uploadThroughput": bytes_per_s})
    return page


def play_utterance(page, frames: int, run: int) -> dict:
    page.evaluate(PLAY, [LONG_TEXT, frames])
    return wait_runs(page, run, timeout_ms=120_000)


STATUS_LOG = """() => { window.statusLog = []; new MutationObserver(() => window.statusLog.push(
    document.getElementById('state').textContent)).observe(document.getElementById('state'),
    {childList: true, characterData: true, subtree: true}); }"""


@pytest.mark.parametrize(("bytes_per_s", "latency_ms", "frames"),
                         [(230_000, 20, 50), (125_000, 80, 50), (62_500, 150, 25)])
def test_automatic_mode_on_a_throttled_link(browser_context, studio, bytes_per_s, latency_ms, frames):
    """The first utterance knows nothing of the link: float32, as on localhost, which this link
    cannot carry in real time, so it waits (as long as the arrival rate says, and says so) and plays
    all of it with at most one rebuffer. Its reading of the link picks the next one's transport:
    Opus, which then fits easily; it too plays all of its audio with at most one rebuffer.
    (`frames` is capped below the text's length, so the server's estimate is exact.)"""
    page = throttled_player(browser_context, studio, bytes_per_s, latency_ms)
    page.evaluate(STATUS_LOG)
    first = play_utterance(page, frames, 1)
    # The longer first wait is shown: "Buffering — about N s" while float32 trickles in.
    assert any(re.fullmatch(r"Buffering — about \d+ s", t) for t in page.evaluate("window.statusLog"))
    assert first["transport"] == "f32" and first["state"] == "finished", first.get("error")
    assert first["framesReceived"] == first["framesRendered"] == frames * SAMPLES_PER_FRAME
    assert first["underruns"] <= 1, (first["underrunsAt"], first["startBufferedFrames"], first["arrivals"][:10])
    # What the arrivals make possible: the link carried under real time for float32, and the player
    # measured that (Chromium's throttle is an upper bound on what any reading can show).
    measured = first["linkBytesPerS"]
    assert measured <= bytes_per_s * 1.15, measured
    audio_s = frames * 0.08
    arrived_in_s = (first["arrivals"][-1][0] - first["arrivals"][0][0]) / 1000
    assert arrived_in_s > audio_s / 1.3  # float32 did not fit with headroom: Opus is the right call
    second = play_utterance(page, frames, 2)
    assert second["transport"] == "opus" and second["state"] == "finished", second.get("error")
    assert second["framesReceived"] == second["framesRendered"] == frames * SAMPLES_PER_FRAME
    assert second["underruns"] <= 1, (second["underrunsAt"], second["startBufferedFrames"])
    assert second["streamBytes"] < first["streamBytes"] / 10
    assert second["wire"].startswith("Opus 160 kb/s · link ≈ "), second["wire"]
    assert page.inner_text("#wire") == second["wire"]


def test_a_link_that_slows_mid_utterance_costs_at_most_one_rebuffer(browser_context, studio):
    """16-bit (forced) over a link that carries it twice over, until 1.5 s of audio has arrived;
    then the link drops to 110 kB/s (0.57 audio seconds per second). The player runs dry once at
    most: the rebuffer is planned at the new pace, and all audio is played."""
    frames = 75  # 6 s, capped below the text's length: the estimate is exact
    page = browser_context.new_page()
    page.goto(studio.url + "player/studio/player.html?transport=s16")
    page.wait_for_function("window.playerStats && window.playerStats.workletLoaded", timeout=10_000)
    cdp = browser_context.new_cdp_session(page)
    cdp.send("Network.enable")
    conditions = {"offline": False, "latency": 20, "downloadThroughput": 400_000, "uploadThroughput": 400_000}
    cdp.send("Network.emulateNetworkConditions", conditions)
    page.evaluate(PLAY, [LONG_TEXT, frames])
    page.wait_for_function("window.playerStats.framesReceived >= 1.5 * 48000", timeout=60_000)
    cdp.send("Network.emulateNetworkConditions", {**conditions, "downloadThroughput": 110_000})
    s = wait_runs(page, 1, timeout_ms=120_000)
    assert s["transport"] == "s16" and s["state"] == "finished", s.get("error")
    assert s["framesReceived"] == s["framesRendered"] == frames * SAMPLES_PER_FRAME
    assert s["underruns"] <= 1, (s["underrunsAt"], s["underrunFrames"], s["arrivals"][-10:])
