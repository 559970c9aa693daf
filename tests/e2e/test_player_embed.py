"""The player as a component another page embeds: docs/PLAYER.md's example, served as a bare page
of its own on the server's origin, imports `StreamPlayer` from /player/player/ and plays a stream
from the server in headless Chromium. What it shows is compared with the stream the server sent."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.stream_decoding import player_stream

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
    pcm, events = player_stream(response.body(), response.headers["x-sample-format"])
    assert outcome == "finished" and int(underruns) >= 0
    assert int(received) == int(rendered) == pcm.shape[1] > 0  # every sample the server sent was played
    assert events[-1]["type"] == "speech.done"
    shown = page.evaluate("window.shown")
    assert any(re.fullmatch(r"first sound after \d+ ms", text) for text in shown), shown  # the firstsound event
    assert studio.url + "player/player/stream-player.js" in modules
    assert not [m for m in modules if "/player/studio/" in m]  # none of the studio's features
