"""The player as a component another page embeds: docs/PLAYER.md's example, served as a bare page
of its own on the server's origin, imports `StreamPlayer` from /player/player/ and plays a stream
from the server in headless Chromium. What it shows is compared with what the server sent (its kept
copy); and a source longer than the worklet's ring plays whole, held back in the page."""

from __future__ import annotations

import io
import re
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile
from support import audio_tap
from support.e2e_helpers import assert_underruns_accounted

pytestmark = pytest.mark.e2e

PLAYER_DOC = Path(__file__).resolve().parents[2] / "docs" / "PLAYER.md"
SHOWN = re.compile(r"(finished|stopped|error): (\d+) of (\d+) samples played, (\d+) underruns")


SHOWN_LOG = """() => { window.shown = []; const el = document.getElementById('status');
  new MutationObserver(() => window.shown.push(el.textContent)).observe(el, {childList: true, characterData: true,
                                                                            subtree: true}); }"""


def embed_example() -> str:
    """The HTML block between the doc's embed-example markers."""
    text = PLAYER_DOC.read_text(encoding="utf-8")
    block = text.split("<!-- embed-example:start -->", 1)[1].split("<!-- embed-example:end -->", 1)[0]
    return block.split("```html\n", 1)[1].rsplit("```", 1)[0]


def test_a_bare_page_plays_a_stream_with_the_component(browser_context, studio):
    page = browser_context.new_page()
    url = studio.url + "embed-example.html"  # nothing of the studio's page: only the doc's block
    page.route(url, lambda route: route.fulfill(body=embed_example(), content_type="text/html"))
    modules: list[str] = []
    page.on("request", lambda r: modules.append(r.url) if r.url.endswith(".js") else None)
    page.goto(url)
    assert page.evaluate("typeof window.mossPlayer") == "undefined"
    page.evaluate(SHOWN_LOG)
    with page.expect_response(lambda r: "/api/tts/stream" in r.url, timeout=30_000) as info:
        page.click("#speak")
    response = info.value
    assert response.ok and response.request.post_data_json["transport"] == "opus"
    page.wait_for_function(f"/{SHOWN.pattern}/.test(document.getElementById('status').textContent)",
                           timeout=60_000)
    outcome, rendered, received, underruns = SHOWN.search(page.inner_text("#status")).groups()
    kept = httpx.get(f"{studio.url}api/tts/result/{response.headers['x-request-id']}.wav", timeout=30)
    sent, _ = soundfile.read(io.BytesIO(kept.content), dtype="int16", always_2d=True)  # what the server sent
    assert outcome == "finished" and int(underruns) >= 0
    assert int(received) == int(rendered) == len(sent) > 0  # every sample the server sent was played
    shown = page.evaluate("window.shown")
    assert any(re.fullmatch(r"first sound after \d+ ms", text) for text in shown), shown  # the firstsound event
    assert studio.url + "player/player/stream-player.js" in modules
    assert not [m for m in modules if "/player/studio/" in m]  # none of the studio's features


BARE = "<!doctype html><title>a page of its own</title><p>nothing of the studio here</p>"
MAKE_PLAYER = """async (ringSeconds) => {
  const { StreamPlayer } = await import('/player/player/stream-player.js');
  const player = window.player = new StreamPlayer({ ringSeconds });
  await player.ready;
  return true;
}"""
TONE = """async (seconds) => {
  const n = Math.round(48000 * seconds), pcm = new Float32Array(2 * n);
  for (let i = 0; i < n; i++) { const v = 0.3 * Math.sin(2 * Math.PI * 330 * i / 48000); pcm[2 * i] = v; pcm[2 * i + 1] = -0.5 * v; }
  const { memorySource } = await import('/player/player/stream-player.js');
  const outcome = await window.player.play(memorySource(pcm, 48000), { prebufferMs: 0 });
  return { outcome, stats: JSON.parse(JSON.stringify(window.player.stats)) };
}"""


def test_audio_longer_than_the_ring_waits_its_turn_and_plays_bit_exact(browser_context, studio):
    """The worklet's ring is made once (here a quarter of a second); a source far longer is held by the
    component and posted as the ring drains: every sample plays, none is dropped, in order."""
    page = browser_context.new_page()
    url = studio.url + "bare.html"
    page.route(url, lambda route: route.fulfill(body=BARE, content_type="text/html"))
    page.goto(url)
    page.evaluate(MAKE_PLAYER, 0.25)
    audio_tap.install(page, "window.player")
    result = page.evaluate(TONE, 1.5)
    s = result["stats"]
    assert result["outcome"] == "finished", s
    assert s["framesReceived"] == s["framesRendered"] == 72_000 and s["overflowFrames"] == 0
    assert s["heldBackFrames"] > 48_000  # most of it waited in the page, not in the audio thread
    assert_underruns_accounted(s)
    if s["underruns"] == 0:  # a loaded machine may be late refilling the ring: then only counted
        heard = audio_tap.take(page, s["firstAudioFrame"], s["framesRendered"])
        t = np.arange(72_000) / 48_000
        left = np.float32(0.3) * np.sin(2 * np.pi * 330 * t).astype(np.float32)
        assert np.abs(heard[:-96, 0] - left[:-96]).max() < 1e-6  # the source, sample for sample
        assert np.abs(heard[:-96, 1] + 0.5 * heard[:-96, 0]).max() < 1e-6  # both channels, each its own
