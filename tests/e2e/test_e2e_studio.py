"""The studio page as a visitor meets it, in headless Chromium (issue 17, and the player part of 16).

The real app runs in-process on the tiny model (`studio_helpers.studio`), its stream route
answering the framed stream of docs/PROTOCOL.md §2.3 itself. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile

pytest.register_assert_rewrite("support.studio_helpers")
from support.studio_helpers import (  # noqa: E402
    axe_serious,
    fix_seed,
    low_contrast,
    open_page,
    set_max_seconds,
    shot,
    stream_requests,
    wait_done,
    wait_runs,
)

pytestmark = pytest.mark.e2e

SAMPLES_PER_FRAME = 3840


# ---- theme and contrast ---------------------------------------------------------------------------


@pytest.mark.parametrize(("system", "query", "shown"), [
    ("dark", "?__theme=light", "light"),   # the OS says dark, Gradio shows light
    ("light", "?__theme=dark", "dark"),    # Spaces adds ?__theme=dark for dark-mode visitors
])
def test_player_follows_the_theme_shown_with_aa_contrast(browser, studio, artifacts_dir, system, query, shown):
    context = browser.new_context(viewport={"width": 1440, "height": 900}, color_scheme=system)
    try:
        page, frame = open_page(context, studio.url + query)
        assert page.evaluate("document.body.classList.contains('dark')") == (shown == "dark")
        frame.wait_for_function(f"document.documentElement.dataset.theme === '{shown}'", timeout=5_000)
        # The player paints its own background in the page's theme: dark text on a dark page is gone.
        background = frame.evaluate("getComputedStyle(document.body).backgroundColor")
        channels = [int(v) for v in re.findall(r"\d+", background)[:3]]
        assert (sum(channels) < 150) == (shown == "dark"), background
        assert not low_contrast(frame), low_contrast(frame)
        assert not low_contrast(page), low_contrast(page)
        assert axe_serious(page) == []
        assert axe_serious(frame) == []
        shot(page, artifacts_dir, f"theme-{shown}-on-{system}-system")
        # Switched while open (Gradio's settings panel does this): the player follows at once.
        other = "light" if shown == "dark" else "dark"
        page.evaluate("document.body.classList.toggle('dark')")
        frame.wait_for_function(f"document.documentElement.dataset.theme === '{other}'", timeout=5_000)
        assert not low_contrast(frame)
    finally:
        context.close()


# ---- first visit, tabs, keyboard ------------------------------------------------------------------


def test_first_visit_prefilled_examples_in_view_and_the_first_click_plays(browser_context, studio, artifacts_dir):
    page, frame = open_page(browser_context, studio.url)
    text = page.input_value("#tts-text textarea")
    assert text.startswith("Streaming speech") and len(text) > 20  # an English example, matching ...
    assert page.input_value("#voice-select input").startswith("English ·")  # ... the English default voice
    height = page.viewport_size["height"]
    for i in range(4):
        box = page.locator(f"#example-{i}").bounding_box()
        assert box and box["y"] + box["height"] <= height, f"example {i} is below the fold"
    shot(page, artifacts_dir, "first-visit-desktop")
    set_max_seconds(page, 1.0)
    with page.expect_response(lambda r: "/api/tts/stream" in r.url and r.ok, timeout=30_000) as info:
        page.click("#generate-btn")
    assert info.value.request.post_data_json["max_frames"] == 12, info.value.request.post_data_json
    s = wait_done(frame)
    assert s["state"] == "finished" and s["framesRendered"] == 12 * SAMPLES_PER_FRAME
    assert page.inner_text("#tts-message").strip() == ""  # no stale "Speaking ..." next to "Done"
    assert frame.inner_text("#state") == "Done"

    page.click("#example-2")  # 日本語: the text and a Japanese voice
    page.wait_for_function("document.querySelector('#tts-text textarea').value.startsWith('こんにちは')")
    page.wait_for_function("document.querySelector('#voice-select input').value.startsWith('Japanese ·')")


def test_each_tab_has_its_own_primary_action_and_there_is_one_stop(browser_context, studio):
    page, frame = open_page(browser_context, studio.url)
    assert page.locator("#generate-btn").is_visible() and not page.locator("#audition-btn").is_visible()
    page.get_by_role("tab", name="Voice audition").click()
    assert page.locator("#audition-btn").is_visible() and not page.locator("#generate-btn").is_visible()
    for where in (page, frame):
        assert where.locator("button.primary, button.primary-btn, button[class*='primary']").filter(
            visible=True).count() <= 1
    stops = page.get_by_role("button", name=re.compile("stop", re.I)).filter(visible=True).count()
    stops += frame.get_by_role("button", name=re.compile("stop", re.I)).filter(visible=True).count()
    assert stops == 1  # the player's; the page's stop events ride on a button out of sight


def test_the_players_stop_runs_the_pages_stop_events(browser_context, studio):
    """A Gradio-event audio source cancels its server work from the page's stop events: the player's
    Stop (and Esc) must reach them."""
    page, frame = open_page(browser_context, studio.url)
    page.evaluate("""() => { window.pageStops = 0;
        document.getElementById('stop-btn').addEventListener('click', () => { window.pageStops += 1; }); }""")
    page.fill("#tts-text textarea", "A long enough sentence to stop while it plays. " * 6)
    page.click("#generate-btn")
    frame.wait_for_function("window.playerStats.framesRendered > 0", timeout=30_000)
    frame.click("#stop")
    page.wait_for_function("window.pageStops === 1")
    assert wait_done(frame, timeout_ms=10_000)["state"] == "stopped"


def test_keyboard_only(browser_context, studio, artifacts_dir):
    page, frame = open_page(browser_context, studio.url)
    set_max_seconds(page, 4.0)
    page.click("#tts-text textarea")
    page.keyboard.press("Control+a")
    page.keyboard.type("Typed and spoken without the mouse.")
    with page.expect_response(lambda r: "/api/tts/stream" in r.url and r.ok, timeout=30_000) as info:
        page.keyboard.press("Control+Enter")
    assert info.value.request.post_data_json["text"] == "Typed and spoken without the mouse."
    frame.wait_for_function("window.playerStats.framesRendered > 0", timeout=30_000)
    bar = frame.locator("[role=progressbar]")
    assert bar.get_attribute("aria-labelledby") == "buf-name" and bar.get_attribute("aria-valuemax") == "3000"
    assert int(bar.get_attribute("aria-valuenow")) >= 0 and "ms buffered" in bar.get_attribute("aria-valuetext")
    page.keyboard.press("Escape")  # Esc stops, from the page
    s = wait_done(frame, timeout_ms=10_000)
    assert s["state"] in ("stopped", "finished")
    # Every control in the player can be reached with Tab and has a name.
    frame.locator("#replay").focus()
    names = []
    for _ in range(12):
        names.append(frame.evaluate("""() => { const e = document.activeElement;
            return e && (e.getAttribute('aria-label') || e.textContent.trim()) || ''; }"""))
        page.keyboard.press("Tab")
    assert all(names) and any("Download MP3" in n for n in names) and any("Use from code" in n for n in names)
    # The Voice audition tab: Ctrl+Enter runs its own action.
    page.get_by_role("tab", name="Voice audition").click()
    page.click("#audition-text textarea")
    with page.expect_request(lambda r: "/api/tts/stream" in r.url, timeout=30_000) as request:
        page.keyboard.press("Control+Enter")
    assert request.value.post_data_json["text"] == page.input_value("#audition-text textarea")
    frame.click("#stop")
    shot(page, artifacts_dir, "keyboard")


# ---- the comparison board -------------------------------------------------------------------------


def test_audition_board_keeps_every_voice_to_replay_without_a_new_request(browser_context, studio, artifacts_dir):
    page, frame = open_page(browser_context, studio.url)
    set_max_seconds(page, 1.0)
    page.get_by_role("tab", name="Voice audition").click()
    boxes = page.locator("#audition-voices input[type=checkbox]")
    checked = [i for i in range(boxes.count()) if boxes.nth(i).is_checked()]
    assert len(checked) == 3  # the default voice and one voice of each other language
    requests = stream_requests(page)
    page.click("#audition-btn")
    frame.wait_for_function("window.playerStats.completed.length === 3", timeout=90_000)
    s = wait_done(frame)
    streams = [r for r in requests if "/api/tts/stream" in r.url and r.method == "POST"]
    bodies = [r.post_data_json for r in streams]
    assert len({b["voice"] for b in bodies}) == 3
    assert len({(b["text"], b["seed"]) for b in bodies}) == 1  # the same sentence and seed for all
    cards = frame.locator("#cards .card")
    assert cards.count() == 3 and frame.locator("#board").is_visible()
    labels = [c["label"] for c in s["completed"]]
    for i, label in enumerate(labels):
        card = cards.nth(i)
        assert label in card.inner_text()
        assert re.search(r"TTFP\s+\d+ ms", card.inner_text()) and re.search(r"RTF\s+\d+\.\d\d", card.inner_text())
        mp3 = card.get_by_role("link", name=f"Download {label} as MP3").get_attribute("href")
        assert "/api/tts/result/" in mp3 and f"name={label}" in mp3.replace("+", " ").replace("%20", " ")
    shot(page, artifacts_dir, "audition-board")
    assert axe_serious(frame) == [] and not low_contrast(frame)  # cards, links and figures too

    before = len(requests)
    cards.nth(0).get_by_role("button", name=f"Play {labels[0]}").click()  # the first voice again
    frame.wait_for_function(f"window.playerStats.runs === {s['runs'] + 1}")
    again = wait_done(frame)
    assert again["state"] == "finished" and again["label"] == f"{labels[0]} (replay)"
    assert again["framesRendered"] == s["completed"][0]["frames"] == 12 * SAMPLES_PER_FRAME
    ours = [r.url for r in requests[before:] if "/api/" in r.url or "/v1/" in r.url]
    assert ours == []  # not a single request for audio: it plays from memory (Gradio's heartbeats aside)
    # A card's download is the kept result, not a new generation.
    with page.expect_download() as info:
        cards.nth(1).get_by_role("link", name=f"Download {labels[1]} as WAV").click()
    assert info.value.suggested_filename.startswith(f"{labels[1]} - Hello")
    audio, rate = soundfile.read(info.value.path(), dtype="int16", always_2d=True)
    assert rate == 48_000 and audio.shape == (12 * SAMPLES_PER_FRAME, 2)
    assert not [r for r in requests[before:] if "/api/tts/stream" in r.url]


# ---- downloads, history, code ---------------------------------------------------------------------


def test_downloads_history_and_code_snippet(browser_context, studio, artifacts_dir, tmp_path):
    page, frame = open_page(browser_context, studio.url)
    set_max_seconds(page, 1.5)
    fix_seed(page, 7)
    page.fill("#tts-text textarea", "Hello from the download test. It has two sentences.")
    with page.expect_response(lambda r: "/api/tts/stream" in r.url and r.ok, timeout=30_000) as info:
        page.click("#generate-btn")
    s = wait_done(frame)
    voice = info.value.request.post_data_json["voice"]
    frames = 18 * SAMPLES_PER_FRAME
    assert s["framesRendered"] == frames
    sizes = {}
    for fmt in ("mp3", "flac", "wav"):
        with page.expect_download() as download:
            frame.click(f"#dl-{fmt}")
        name = download.value.suggested_filename
        assert name.startswith(f"{voice} - Hello from the download test") and name.endswith(f".{fmt}"), name
        data = Path(download.value.path()).read_bytes()
        sizes[fmt] = len(data)
        info_ = soundfile.info(io.BytesIO(data))
        assert info_.samplerate == 48_000 and info_.channels == 2
        if fmt != "mp3":
            assert info_.subtype == "PCM_16" and info_.frames == frames
    assert sizes["mp3"] * 4 < sizes["wav"]  # MP3 is the small one
    # History: kept in this browser across a reload, replayed from the server's kept copy.
    page.reload()
    page.wait_for_selector("#model-status:has-text('Ready')", timeout=30_000)
    from support.studio_helpers import player_frame
    frame = player_frame(page)
    frame.wait_for_function("window.playerStats.workletLoaded")
    frame.click("#history-panel summary")
    entry = frame.locator("#history .entry").first
    assert "Hello from the download test" in entry.inner_text() and voice in entry.inner_text()
    assert re.search(r"TTFP \d+ ms · RTF \d+\.\d\d", entry.inner_text())
    requests = stream_requests(page)
    entry.get_by_role("button", name=re.compile("Replay")).click()
    again = wait_runs(frame, 1)
    assert again["state"] == "finished" and again["framesRendered"] == frames
    assert [r.url.split("?")[0].rsplit("/", 1)[-1] for r in requests if "/api/" in r.url] == [
        f"{s['requestId']}.wav"]  # the server's copy, no generation
    shot(page, artifacts_dir, "history")
    assert axe_serious(frame) == [] and not low_contrast(frame)

    # The snippet reproduces the request with the openai client (and curl), same voice, seed, length.
    frame.click("#code summary")
    python = frame.inner_text("#snippet-python")
    assert f'voice="{voice}"' in python and '"seed": 7' in python and '"max_frames": 18' in python
    script = tmp_path / "snippet.py"
    script.write_text(python)
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    audio, rate = soundfile.read(tmp_path / "speech.mp3", dtype="float32", always_2d=True)
    assert rate == 48_000 and abs(len(audio) - frames) < 0.1 * 48_000
    curl = frame.inner_text("#snippet-curl")
    assert curl.startswith(f"curl -sS {studio.url}v1/audio/speech")
    run = subprocess.run(["bash", "-c", curl], cwd=tmp_path / ".", capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert abs(soundfile.info(tmp_path / "speech.mp3").frames - frames) < 0.1 * 48_000
