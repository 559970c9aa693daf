"""Favourite voices and notes in headless Chromium: a star and a note set under the Speak tab's picker
or on an audition card show in every voice picker (favourites first, the note after the name) and on
the cards, persist in the browser across a reload, survive corrupt storage, leave with a deleted saved
voice, and work by keyboard and on a phone, axe-clean."""

from __future__ import annotations

import re

import httpx
import pytest

pytest.register_assert_rewrite("support.studio_helpers")
from support.studio_helpers import axe_serious, open_page, player_frame, set_max_seconds, wait_done  # noqa: E402

pytestmark = pytest.mark.e2e
KEY = "moss-tts-voice-marks-v1"


def _labels(page) -> list[str]:
    labels = page.locator("#audition-voices label")
    return [labels.nth(i).inner_text().strip() for i in range(labels.count())]


def _open_editor(page, accordion: str = "#voice-more") -> None:
    page.locator(accordion).get_by_role("button").first.click()
    page.locator(f"{accordion} input[type=checkbox]").first.wait_for(state="visible")


def _audition_two(page, frame) -> list[str]:
    """Compare the first two voices ticked (favourites come first in the list)."""
    page.get_by_role("tab", name="Voice audition").click()
    boxes = page.locator("#audition-voices input[type=checkbox]")
    for i in [i for i in range(boxes.count()) if boxes.nth(i).is_checked()][2:]:
        boxes.nth(i).uncheck()
    runs = frame.evaluate("window.playerStats.runs")
    page.click("#audition-btn")
    frame.wait_for_function(f"window.playerStats.runs === {runs + 2} && window.playerStats.completed.length === 2",
                            timeout=90_000)
    return [c["label"] for c in wait_done(frame)["completed"]]


def test_a_star_and_a_note_show_in_the_pickers_and_on_the_cards(browser_context, studio) -> None:
    page, frame = open_page(browser_context, studio.url)
    set_max_seconds(page, 1.0)
    page.get_by_role("tab", name="Speak").click()
    voice = re.search(r"· (\S+) \(", page.input_value("#voice-select input")).group(1)
    _open_editor(page)
    page.locator("#voice-star").get_by_label("★ Favourite").check()
    page.wait_for_function("document.querySelector('#voice-select input').value.startsWith('★ ')", timeout=10_000)
    note = page.locator("#voice-note").get_by_label("Your note on this voice")
    note.fill("warm, good for audiobooks")
    note.press("Enter")
    page.wait_for_function("document.querySelector('#voice-select input').value.endsWith('— warm, good for audiobooks')",
                           timeout=10_000)
    assert axe_serious(page) == []
    marks = page.evaluate(f"JSON.parse(localStorage.getItem('{KEY}'))")
    assert marks["v"] == 1 and {k: v for k, v in marks["marks"][voice].items() if k != "at"} == {
        "star": True, "note": "warm, good for audiobooks"}

    page.get_by_role("tab", name="Voice audition").click()
    labels = _labels(page)
    assert labels[0].startswith("★ ") and f"· {voice} (" in labels[0] and labels[0].endswith("audiobooks")
    assert not any(label.startswith("★") for label in labels[1:])  # the favourite first, the rest as before

    cards = _audition_two(page, frame)  # the board keeps the list's own order (by language, then name)
    assert voice in cards
    board = frame.locator("#cards .card")
    mine, theirs = board.nth(cards.index(voice)), board.nth(1 - cards.index(voice))
    star = mine.get_by_role("button", name=f"Favourite: {voice}")
    assert star.get_attribute("aria-pressed") == "true" and "warm, good for audiobooks" in mine.inner_text()
    other = cards[1 - cards.index(voice)]
    other_star = theirs.get_by_role("button", name=f"Favourite: {other}")
    assert other_star.get_attribute("aria-pressed") == "false"

    # On a card, by keyboard: star the other voice, then write it a note.
    other_star.focus()
    frame.page.keyboard.press("Enter")
    frame.wait_for_function(f"document.querySelector('#cards .card[data-voice=\"{other}\"] .card-star')"
                            ".getAttribute('aria-pressed') === 'true'")
    theirs.get_by_role("button", name=f"Note on {other}").click()
    box = frame.get_by_label(f"Your note on {other}")
    assert box.evaluate("(el) => el === document.activeElement")
    frame.page.keyboard.type("bright, quick")
    frame.page.keyboard.press("Enter")
    frame.wait_for_selector("#note-editor", state="hidden")
    assert frame.evaluate("document.activeElement.getAttribute('aria-label')") == f"Note on {other}"
    assert "bright, quick" in theirs.inner_text()
    assert axe_serious(frame) == []

    # The page's pickers hear of it (another document of this site wrote the marks) without a reload.
    page.wait_for_function(f"""[...document.querySelectorAll('#audition-voices label')].some((l) =>
        l.innerText.includes('★') && l.innerText.includes('· {other} (') && l.innerText.includes('bright, quick'))""",
                           timeout=15_000)
    assert sum(label.startswith("★") for label in _labels(page)) == 2
    page.get_by_role("tab", name="Speak").click()
    page.click("#voice-select input")
    assert page.get_by_role("option", name=re.compile(rf"^★ .*· {other} \(.*— bright, quick$")).count() == 1
    page.keyboard.press("Escape")

    page.reload()  # kept in this browser
    page.wait_for_selector("#model-status:has-text('Ready')", timeout=30_000)
    page.wait_for_function("document.querySelector('#voice-select input').value.startsWith('★ ')", timeout=15_000)
    page.get_by_role("tab", name="Voice audition").click()
    assert [label.startswith("★") for label in _labels(page)][:2] == [True, True]


def test_corrupt_or_foreign_storage_is_read_as_no_marks(browser_context, studio) -> None:
    page, _ = open_page(browser_context, studio.url)
    page.evaluate(f"localStorage.setItem('{KEY}', '{{\"v\": 1, \"marks\": {{\"Quill\": ')")
    page.reload()
    page.wait_for_selector("#model-status:has-text('Ready')", timeout=30_000)
    frame = player_frame(page)
    frame.wait_for_function("window.playerStats.workletLoaded")
    page.get_by_role("tab", name="Voice audition").click()
    page.wait_for_function("document.querySelectorAll('#audition-voices label').length > 2", timeout=15_000)
    assert not any("★" in label for label in _labels(page))  # the pickers work, unmarked
    page.get_by_role("tab", name="Speak").click()
    _open_editor(page)
    page.locator("#voice-star").get_by_label("★ Favourite").check()
    page.wait_for_function("document.querySelector('#voice-select input').value.startsWith('★ ')", timeout=10_000)
    assert page.evaluate(f"JSON.parse(localStorage.getItem('{KEY}')).v") == 1  # written afresh
    # (browser_context fails the test on any JavaScript error in the page or the player)


def test_a_deleted_saved_voice_loses_its_mark(browser_context, studio, data_dir) -> None:
    if "saved" not in httpx.get(studio.url + "api/voices", timeout=10).json():
        pytest.skip("this server keeps no saved voices")
    clip = (data_dir / "finetune_sample" / "7.wav").read_bytes()
    made = httpx.post(studio.url + "v1/audio/voices", data={"name": "Marked voice"},
                      files={"audio_sample": ("7.wav", clip, "audio/wav")}, timeout=120)
    assert made.status_code < 300, made.text
    voice_id = made.json()["id"]
    page, _ = open_page(browser_context, studio.url)
    page.get_by_role("tab", name="My voices").click()
    page.click("#saved-voice-select input")
    page.get_by_role("option", name=re.compile("Marked voice")).click()
    _open_editor(page, "#saved-voice-more")
    page.locator("#saved-voice-star").get_by_label("★ Favourite").check()
    page.wait_for_function("document.querySelector('#saved-voice-select input').value.startsWith('★ Marked voice')",
                           timeout=10_000)
    assert voice_id in page.evaluate(f"JSON.parse(localStorage.getItem('{KEY}')).marks")

    assert httpx.delete(f"{studio.url}v1/audio/voices/{voice_id}", timeout=30).status_code == 200
    page.reload()
    page.wait_for_selector("#model-status:has-text('Ready')", timeout=30_000)
    page.wait_for_function(f"!(JSON.parse(localStorage.getItem('{KEY}')).marks['{voice_id}'])", timeout=15_000)
    page.get_by_role("tab", name="My voices").click()
    page.click("#saved-voice-select input")
    assert page.get_by_role("option", name=re.compile("Marked voice")).count() == 0


def test_cards_star_and_note_on_a_phone(browser, studio) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:
        page, frame = open_page(context, studio.url)
        set_max_seconds(page, 1.0)
        cards = _audition_two(page, frame)
        card = frame.locator("#cards .card").nth(0)
        star = card.get_by_role("button", name=f"Favourite: {cards[0]}")
        star.scroll_into_view_if_needed()
        star.tap()
        frame.wait_for_function("document.querySelector('#cards .card-star').getAttribute('aria-pressed') === 'true'")
        card.get_by_role("button", name=f"Note on {cards[0]}").tap()
        frame.get_by_label(f"Your note on {cards[0]}").fill("for the podcast intro")
        frame.get_by_role("button", name="Save note").tap()
        assert "for the podcast intro" in card.inner_text()
        for where in (page, frame):
            assert where.evaluate("document.documentElement.scrollWidth") <= 390  # nothing wider than the phone
        for element in (star, card.get_by_role("button", name=f"Note on {cards[0]}")):
            box = element.bounding_box()
            assert box["width"] >= 24 and box["height"] >= 24  # a finger can hit it (WCAG 2.2 target size)
        assert axe_serious(frame) == []
    finally:
        context.close()
