"""Save a cloned voice from the page (issue 49, point 4), in headless Chromium: the Clone tab's
clip, named, goes into the server's voice library (the one POST /v1/audio/voices fills), appears
under "My voices", speaks from there, and is deleted from there.

The studio runs in-process on the tiny model (`studio_helpers.studio`).
"""

from __future__ import annotations

import re
import time

import httpx
import pytest
from support.studio_helpers import open_page, set_max_seconds, shot, wait_done

pytestmark = pytest.mark.e2e


def saved_named(url: str, name: str) -> list[dict]:
    return [v for v in httpx.get(url + "v1/audio/voices", timeout=10).json()["data"] if v["name"] == name]


def test_a_cloned_voice_is_saved_found_under_my_voices_used_and_deleted(browser_context, studio, data_dir,
                                                                         artifacts_dir):
    name = "Page saved voice"
    page, frame = open_page(browser_context, studio.url)
    set_max_seconds(page, 1.0)
    page.get_by_role("tab", name="Clone a voice").click()
    page.click("#save-voice-btn")  # nothing to save yet: the page says what to do
    page.wait_for_selector("#tts-message:has-text('Upload or record a reference clip first')", timeout=10_000)

    page.set_input_files("#ref-audio input[type=file]", str(data_dir / "finetune_sample" / "7.wav"))
    page.get_by_role("region", name="Clip check").locator(".clip-verdict").wait_for(timeout=30_000)
    page.fill("#ref-text textarea", "A transcript of the clip.")
    page.fill("#save-voice-name input", name)
    page.click("#save-voice-btn")
    page.wait_for_selector(f"#tts-message:has-text('Saved “{name}”')", timeout=60_000)
    (voice,) = saved_named(studio.url, name)  # in the server's library, as the API lists it
    assert voice["transcript"] == "A transcript of the clip."
    window = page.locator("#clip-check svg")
    chosen = float(window.get_attribute("data-end")) - float(window.get_attribute("data-start"))
    assert voice["sample_seconds"] == pytest.approx(chosen, abs=0.1)  # the clip check's window, not the whole clip
    assert page.input_value("#save-voice-name input") == ""
    shot(page, artifacts_dir, "saved-voice")

    page.get_by_role("tab", name="My voices").click()
    assert page.input_value("#saved-voice-select input") == name  # found there, chosen
    with page.expect_response(lambda r: "/api/tts/stream" in r.url and r.ok, timeout=30_000) as info:
        page.click("#generate-btn")
    assert info.value.request.post_data_json["voice"] == voice["id"]
    assert wait_done(frame)["state"] == "finished"

    page.locator("#saved-voice-more").get_by_text("delete").click()
    # Declined first: nothing is deleted (had it been, the accepted delete below would find no voice
    # and say so instead of "Deleted"); then accepted.
    asked: list[str] = []

    def answer(dialog) -> None:
        asked.append(dialog.message)
        dialog.accept() if len(asked) == 2 else dialog.dismiss()

    page.on("dialog", answer)
    page.click("#delete-voice-btn")
    deadline = time.monotonic() + 30  # a hang guard, not a speed check
    while not asked:
        assert time.monotonic() < deadline, "no confirmation was asked"
        page.wait_for_timeout(50)  # lets Playwright deliver the dialog event
    page.click("#delete-voice-btn")
    page.wait_for_selector(f"#tts-message:has-text('Deleted “{name}”')", timeout=30_000)
    assert len(asked) == 2 and "cannot be undone" in asked[0]
    assert saved_named(studio.url, name) == []
    page.click("#saved-voice-select input")
    assert page.get_by_role("option", name=re.compile(re.escape(name))).count() == 0
