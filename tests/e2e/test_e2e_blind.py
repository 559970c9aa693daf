"""Blind audition in headless Chromium: with "Blind" on, the board's cards are named A, B and no
voice name shows until the listener has ranked them and pressed Reveal; A/B/X for two voices; the
ranking is kept in the browser (localStorage) and listed again after a reload.

"Shows" is taken strictly: every text node of the player (closed panels such as "Use from code"
included), every attribute (titles, labels, links, values) and the page around it outside the form
where the voices were picked are searched for every voice name, after each step before the reveal.
"""

from __future__ import annotations

import random

import pytest

pytest.register_assert_rewrite("support.studio_helpers")
from support.studio_helpers import axe_serious, open_page, set_max_seconds, stream_requests, wait_done  # noqa: E402

from studio.ui.handlers import blind_items  # noqa: E402

# Everything a document holds as text: its text nodes (hidden or not), every attribute's value and
# every field's value; outside `skip` (the page's form, where the listener picked the voices).
EVERY_TEXT = """(skip) => {
  const out = [], skipped = (el) => !!(skip && el && el.closest(skip));
  const walker = document.createTreeWalker(document.documentElement, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) if (!skipped(n.parentElement)) out.push(n.data);
  for (const el of document.querySelectorAll('*')) {
    if (skipped(el)) continue;
    for (const a of el.attributes) out.push(a.value);
    if (typeof el.value === 'string') out.push(el.value);
  }
  return out.join('\\n');
}"""


def assert_no_voice_named(page, frame, voices: list[str], when: str) -> None:
    seen = {"player": frame.evaluate(EVERY_TEXT, None), "page": page.evaluate(EVERY_TEXT, "#form-column")}
    for where, text in seen.items():
        named = [v for v in voices if v in text]
        assert not named, f"{when}: the {where} names {named} before the reveal"


def test_blind_items_are_shuffled_and_lettered() -> None:
    items = [{"label": name, "request": {"voice": name}} for name in ("Ava", "Bo", "Cy", "Di")]
    orders = set()
    for seed in range(20):
        blind = blind_items(items, random.Random(seed))
        assert [b["label"] for b in blind] == ["A", "B", "C", "D"]
        assert sorted(b["voice"] for b in blind) == ["Ava", "Bo", "Cy", "Di"]
        assert all(b["request"]["voice"] == b["voice"] for b in blind)
        orders.add(tuple(b["voice"] for b in blind))
    assert len(orders) > 5 and items[0]["label"] == "Ava"  # shuffled; the input is left alone


@pytest.mark.e2e
def test_blind_mode_hides_names_until_reveal_and_keeps_the_ranking(browser_context, studio) -> None:
    page, frame = open_page(browser_context, studio.url)
    set_max_seconds(page, 1.0)
    page.get_by_role("tab", name="Voice audition").click()
    boxes = page.locator("#audition-voices input[type=checkbox]")
    for i in [i for i in range(boxes.count()) if boxes.nth(i).is_checked()][2:]:
        boxes.nth(i).uncheck()
    page.get_by_label("Blind").check()
    requests = stream_requests(page)
    page.click("#audition-btn")
    frame.wait_for_function("window.playerStats.completed.length === 2", timeout=90_000)
    s = wait_done(frame)
    voices = [r.post_data_json["voice"] for r in requests if "/api/tts/stream" in r.url and r.method == "POST"]
    assert len(set(voices)) == 2 and [c["label"] for c in s["completed"]] == ["A", "B"]
    board = frame.locator("#board")
    shown = board.inner_text() + frame.inner_text("#state-line" if frame.locator("#state-line").count() else "body")
    assert not any(v in board.inner_text() for v in voices), board.inner_text()
    assert not any(v in shown for v in voices)
    assert_no_voice_named(page, frame, voices, "after the audition")
    frame.click("#code summary")  # "Use from code": the request would name the voice
    assert "after the reveal" in frame.inner_text("#code") and frame.locator("#snippet-curl").is_hidden()
    assert frame.locator("#cards .card-star, #cards .card-note-edit").count() == 0  # a star or note names it too
    runs = frame.evaluate("window.playerStats.runs")
    frame.get_by_role("button", name="Play A", exact=True).click()
    frame.wait_for_function(f"window.playerStats.runs === {runs + 1}")
    wait_done(frame)
    assert_no_voice_named(page, frame, voices, "after replaying card A")

    reveal = frame.get_by_role("button", name="Reveal")
    assert reveal.is_disabled()  # rank first
    frame.get_by_label("Rank of A").select_option("2")
    frame.get_by_label("Rank of B").select_option("1")
    runs = frame.evaluate("window.playerStats.runs")
    frame.get_by_role("button", name="Play X").click()
    frame.wait_for_function(f"window.playerStats.runs === {runs + 1}")
    assert wait_done(frame)["label"] == "X (replay)"
    assert frame.get_attribute("#dl-wav", "aria-disabled") == "true"  # X's download link would name its card
    frame.get_by_role("button", name="X is A").click()
    assert not any(v in board.inner_text() for v in voices)
    assert_no_voice_named(page, frame, voices, "after playing X")
    assert axe_serious(frame) == []
    reveal.click()

    text = board.inner_text()
    assert f"A ({voices[0]})" in text and f"B ({voices[1]})" in text  # the cards in the order generated
    x_voice = voices[ord(frame.evaluate("JSON.parse(localStorage.getItem('moss-tts-blind-v1'))")[0]["abx"]["x"]) - 65]
    assert f'"voice":"{x_voice}"' in frame.text_content("#snippet-curl")  # the request is shown now
    assert frame.locator("#cards .card-star").count() == 2  # and the stars are back
    kept = frame.evaluate("JSON.parse(localStorage.getItem('moss-tts-blind-v1'))")
    assert kept[0]["ranking"] == [
        {"letter": "B", "voice": voices[1], "rank": 1, "requestId": s["completed"][1]["requestId"]},
        {"letter": "A", "voice": voices[0], "rank": 2, "requestId": s["completed"][0]["requestId"]},
    ]
    assert kept[0]["abx"]["answer"] == "A" and kept[0]["abx"]["x"] in ("A", "B")

    page.reload()
    page.wait_for_selector("#model-status:has-text('Ready')", timeout=30_000)
    again = page.frame(url=lambda url: "/player/studio/player.html" in url)
    again.wait_for_selector("#blind-results:not([hidden])", timeout=10_000)
    again.locator("#blind-results summary").click()
    assert f"1. {voices[1]} (B), 2. {voices[0]} (A)" in again.inner_text("#blind-results")
