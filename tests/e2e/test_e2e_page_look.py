"""The page reads like a product (issue 49, point 5), in headless Chromium: one typeface across the
page and the player, from this machine; status marks by shape and colour, never an emoji; the main
screen shows what a listener needs and the engineering read-outs sit behind one "Details" toggle;
"speed" means the speech rate only; on a phone every voice source is one tap away and the
audition's voices are a compact grid.

Same app as test_e2e_studio.py (`studio_helpers.studio`). The page's screenshots at desktop
(1366x900) and phone (390x844) sizes go to test-artifacts/ (ui-desktop-*.png, ui-phone-*.png).
"""

from __future__ import annotations

import math
import re

import pytest
from support.studio_helpers import open_page, wait_done

pytestmark = pytest.mark.e2e

DESKTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}
# An emoji drawn as a picture by default, or a text symbol asked to be one (U+FE0F): without an
# emoji font both render as a box.
EMOJI = re.compile("[\U0001f000-\U0001faff\u231a\u231b\u23e9-\u23f3\u25fd\u25fe\u2614\u2615\u26a1\u26aa\u26ab"
                   "\u26bd\u26be\u26c4\u26c5\u26d4\u26ea\u26f2-\u26f5\u26fa\u26fd\u2705\u270a\u270b\u2728\u274c"
                   "\u274e\u2753-\u2755\u2757\u2795-\u2797\u27b0\u27bf\u2b1b\u2b1c\u2b50\u2b55\ufe0f]")


def _family(doc, selector: str) -> str:
    family = doc.evaluate("(s) => getComputedStyle(document.querySelector(s)).fontFamily", selector)
    return family.replace("'", '"')


def _screens(page, artifacts_dir, name: str) -> None:
    page.screenshot(path=str(artifacts_dir / f"ui-{name}.png"))
    page.screenshot(path=str(artifacts_dir / f"ui-{name}-full.png"), full_page=True)


def test_one_typeface_from_this_machine_across_the_page_and_the_player(browser, studio):
    context = browser.new_context(viewport=DESKTOP)
    fonts: list[str] = []
    context.on("request", lambda r: fonts.append(r.url) if r.resource_type == "font" or "/fonts/" in r.url
               or re.search(r"\.(woff2?|ttf|otf)(\?|$)", r.url) else None)
    try:
        page, frame = open_page(context, studio.url)
        page.evaluate("document.fonts.ready.then(() => true)")  # every face the styles asked for has loaded
        page_font = _family(page, "#generate-btn")
        assert page_font == _family(page, "#voice-select input") == _family(page, "#model-status")
        assert page_font == _family(frame, "body") == _family(frame, "#stop"), (page_font, _family(frame, "body"))
        assert page_font.startswith("system-ui"), page_font  # the system's UI face: nothing to download
        assert fonts == []  # no webfont, from a CDN or from Gradio's own folder
        faces = page.evaluate("[...document.fonts].map((f) => f.family)")
        assert not [f for f in faces if "Montserrat" in f], faces
    finally:
        context.close()


def test_status_marks_are_shapes_and_colours_not_emoji(browser_context, studio):
    page, frame = open_page(browser_context, studio.url)
    mark = page.locator("#model-status .ind")
    assert mark.count() == 1 and "ind-ok" in mark.get_attribute("class")
    box = mark.bounding_box()
    assert box["width"] > 4 and box["height"] > 4
    assert page.evaluate("getComputedStyle(document.querySelector('#model-status .ind')).backgroundColor") \
        not in ("rgba(0, 0, 0, 0)", "transparent")
    for doc in (page, frame):
        text = doc.evaluate("document.body.innerText")
        assert not EMOJI.findall(text), EMOJI.findall(text)
    # a warning is a triangle too: the over-long text's count under the box
    page.fill("#tts-text textarea", "x" * 5000)
    page.wait_for_selector("#char-count .ind-warn")
    assert not EMOJI.findall(page.inner_text("#char-count"))


def test_the_main_screen_shows_what_a_listener_needs_and_details_the_rest(browser, studio, artifacts_dir):
    context = browser.new_context(viewport=DESKTOP)
    try:
        page, frame = open_page(context, studio.url)
        page.fill("#tts-text textarea", "Hello there.")
        page.click("#generate-btn")
        s = wait_done(frame)
        assert s["state"] == "finished", s
        # a closed <details> is not rendered: its text is not in innerText
        main = frame.inner_text("#player").lower()
        for shown in ("ttfp", "rtf", "done", "mp3", "details"):
            assert shown in main, shown
        for hidden in ("buffer", "mb/s", "kb/s", "underruns", "request", "network reads", s["requestId"]):
            assert hidden not in main, hidden
        # one meaning of "speed": the speech rate (the page's slider); the player says RTF in words
        assert "speed" not in main
        assert re.fullmatch(r"generated \d+\.\d× (faster|slower) than real time", frame.inner_text("#m-xrt"))
        header = page.inner_text("#model-status")
        assert "RTF" not in header and "measured" not in header and len(header) < 80, header
        _screens(page, artifacts_dir, "desktop-1366x900")

        frame.get_by_text("Details", exact=True).click()
        details = frame.inner_text("#engineering").lower()
        for shown in ("underruns", "stream", "buffer", f"request {s['requestId']}"):
            assert shown in details, (shown, details)
    finally:
        context.close()


def test_on_a_phone_clone_is_one_tap_away_and_the_audition_is_compact(browser, studio, artifacts_dir):
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        page, _ = open_page(context, studio.url)
        _screens(page, artifacts_dir, "phone-390x844")
        assert page.locator("#voice-tabs .overflow-menu button:visible").count() == 0  # no "⋯" menu
        clone = page.locator("#voice-tabs").get_by_role("tab", name="Clone a voice")
        box = clone.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
        assert box["y"] + box["height"] <= PHONE["height"]  # on the first screen
        clone.tap()
        page.wait_for_selector("#ref-audio", state="visible", timeout=10_000)

        page.get_by_role("tab", name="Voice audition").tap()
        labels = page.locator("#audition-voices label")
        labels.first.wait_for(state="visible")
        boxes = [labels.nth(i).bounding_box() for i in range(labels.count())]
        columns = {round(b["x"]) for b in boxes}
        rows = {round(b["y"]) for b in boxes}
        assert len(columns) >= 2, columns
        assert len(rows) <= math.ceil(len(boxes) / 2), (len(rows), len(boxes))
        assert all(b["x"] + b["width"] <= PHONE["width"] for b in boxes)
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        _screens(page, artifacts_dir, "phone-390x844-audition")
    finally:
        context.close()
