"""The player on a slow link, in headless Chromium: the transport it asks for (Opus where WebCodecs
decodes it, 16-bit PCM otherwise), and how it buffers when the network (throttled through the
DevTools protocol's `Network.emulateNetworkConditions`) is slower than the audio.

Same in-process studio as test_e2e_studio_player.py (`studio_helpers.studio`). As in the other
browser tests, what is asserted is counted (rebuffers, samples played), never a wall-clock figure
of this (shared, slow) machine; the first-sound times are measured by bench/player_links.py.
"""

from __future__ import annotations

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


def test_the_page_streams_opus_and_plays_every_sample(browser_context, studio):
    page, frame = open_page(browser_context, studio.url)
    set_max_seconds(page, 2.0)
    body = generate(page)
    s = wait_done(frame)
    assert body["transport"] == "opus" and "framing" not in body
    assert s["state"] == "finished" and s["transport"] == "opus"
    assert s["framesReceived"] == s["framesRendered"] == 25 * SAMPLES_PER_FRAME  # exact after the trims
    assert s["trailingBytes"] == 0
    assert s["streamBytes"] < s["framesReceived"] * 8 / 10  # far fewer bytes than float32
    assert s["wire"] == "Opus 160 kb/s" and frame.text_content("#wire") == s["wire"]
    assert s["segments"] > 0  # captions still come in the event frames


def test_without_audio_decoder_the_page_streams_16_bit(browser_context, studio):
    browser_context.add_init_script(NO_DECODER)  # every frame of the page, the player's too
    page, frame = open_page(browser_context, studio.url)
    assert frame.evaluate("typeof window.AudioDecoder") == "undefined"
    set_max_seconds(page, 2.0)
    body = generate(page)
    s = wait_done(frame)
    assert body["transport"] == "s16"
    assert s["state"] == "finished" and s["transport"] == "s16"
    assert s["framesReceived"] == s["framesRendered"] == 25 * SAMPLES_PER_FRAME
    assert s["wire"] == "16-bit PCM"


# ---- throttled links (DevTools protocol) ------------------------------------------------------------

LONG_TEXT = ("A visitor on an ordinary connection hears this sentence while it is being generated, and it "
             "keeps going for a good while so that the cap on its length, not the text, ends it.")
PLAY = "([text, frames]) => window.mossPlayer.play({items: [{label: 'link', request: {text, seed: 3, max_frames: frames}}]})"


def player_page(context, studio, query: str = ""):
    """The player page opened directly, its network under the DevTools protocol's control."""
    page = context.new_page()
    page.goto(studio.url + "player/studio/player.html" + query)
    page.wait_for_function("window.playerStats && window.playerStats.workletLoaded", timeout=10_000)
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    return page, cdp


def throttle(cdp, bytes_per_s: int, latency_ms: int) -> None:
    cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": latency_ms,
                                                  "downloadThroughput": bytes_per_s, "uploadThroughput": bytes_per_s})


def play_utterance(page, frames: int, run: int) -> dict:
    page.evaluate(PLAY, [LONG_TEXT, frames])
    return wait_runs(page, run, timeout_ms=120_000)


def assert_all_played(s: dict, frames: int) -> None:
    assert s["transport"] == "opus" and s["state"] == "finished", s.get("error")
    assert s["framesReceived"] == s["framesRendered"] == frames * SAMPLES_PER_FRAME
    assert s["underruns"] <= 1, (s["underrunsAt"], s["startBufferedFrames"], s["arrivals"][:10])


def test_a_fast_link_then_230_kb_s_for_the_next_utterance(browser_context, studio):
    """A phone moving from Wi-Fi to a weak cell between two clicks: the second utterance needs no
    knowledge of the link (Opus is a tenth of 230 kB/s), so it plays all of its audio with at most
    one rebuffer, as the first did. (`frames` is capped below the text's length: the estimate is exact.)"""
    page, cdp = player_page(browser_context, studio)
    assert_all_played(play_utterance(page, 50, 1), 50)
    throttle(cdp, 230_000, 20)
    assert_all_played(play_utterance(page, 50, 2), 50)


@pytest.mark.parametrize(("bytes_per_s", "latency_ms", "frames"), [(125_000, 80, 50), (62_500, 150, 25)])
def test_a_slow_link_from_the_first_utterance_of_a_fresh_page(browser_context, studio, bytes_per_s, latency_ms,
                                                              frames):
    page, cdp = player_page(browser_context, studio)
    throttle(cdp, bytes_per_s, latency_ms)
    s = play_utterance(page, frames, 1)
    assert_all_played(s, frames)
    assert s["streamBytes"] < frames * 0.08 * 25_000  # Opus: about 21 kB per audio second, a fraction of the link


def test_a_link_that_slows_mid_utterance_costs_at_most_one_rebuffer(browser_context, studio):
    """16-bit (forced) over a link that carries it twice over, until 1.5 s of audio has arrived;
    then the link drops to 110 kB/s (0.57 audio seconds per second). The player runs dry once at
    most: the rebuffer is planned at the new pace, and all audio is played."""
    frames = 75  # 6 s, capped below the text's length: the estimate is exact
    page, cdp = player_page(browser_context, studio, "?transport=s16")
    throttle(cdp, 400_000, 20)
    page.evaluate(PLAY, [LONG_TEXT, frames])
    page.wait_for_function("window.playerStats.framesReceived >= 1.5 * 48000", timeout=60_000)
    throttle(cdp, 110_000, 20)
    s = wait_runs(page, 1, timeout_ms=120_000)
    assert s["transport"] == "s16" and s["state"] == "finished", s.get("error")
    assert s["framesReceived"] == s["framesRendered"] == frames * SAMPLES_PER_FRAME
    assert s["underruns"] <= 1, (s["underrunsAt"], s["underrunFrames"], s["arrivals"][-10:])
