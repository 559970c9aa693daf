"""Takes in headless Chromium: one voice, one sentence, two seeds side by side; the takes differ,
"Keep this take" pins the take's seed in the page, and generating with it again gives the same
audio (the server's kept 16-bit WAVs compared, bit for bit: tests/engine/test_cpu_determinism.py)."""

from __future__ import annotations

import io

import httpx
import numpy as np
import pytest
import soundfile

pytest.register_assert_rewrite("support.studio_helpers")
from support.studio_helpers import fix_seed, open_page, set_max_seconds, settle, stream_requests, wait_done  # noqa: E402

from studio.ui.handlers import take_seeds  # noqa: E402


def test_take_seeds_follow_the_chosen_seed() -> None:
    assert take_seeds(7, 1) == [7] and take_seeds(7, 3) == [7, 8, 9] and take_seeds(2**31 - 1, 2) == [2**31 - 1, 0]


def _pcm(url: str, request_id: str) -> np.ndarray:
    resp = httpx.get(f"{url}api/tts/result/{request_id}.wav", timeout=30)
    assert resp.status_code == 200, resp.text
    audio, rate = soundfile.read(io.BytesIO(resp.content), dtype="int16", always_2d=True)
    assert rate == 48_000 and len(audio) > 0
    return audio


@pytest.mark.e2e
def test_takes_differ_and_a_kept_take_repeats_bit_for_bit(browser_context, studio) -> None:
    page, frame = open_page(browser_context, studio.url)
    set_max_seconds(page, 1.0)
    fix_seed(page, 1234)
    page.get_by_role("tab", name="Voice audition").click()
    boxes = page.locator("#audition-voices input[type=checkbox]")
    for i in [i for i in range(boxes.count()) if boxes.nth(i).is_checked()][1:]:
        boxes.nth(i).uncheck()
    takes = page.get_by_label("Takes")
    takes.fill("2")
    takes.press("Tab")
    settle(page)
    requests = stream_requests(page)
    page.click("#audition-btn")
    frame.wait_for_function("window.playerStats.completed.length === 2", timeout=90_000)
    s = wait_done(frame)
    bodies = [r.post_data_json for r in requests if "/api/tts/stream" in r.url and r.method == "POST"]
    assert [b["seed"] for b in bodies] == [1234, 1235] and len({b["voice"] for b in bodies}) == 1
    first, second = (_pcm(studio.url, c["requestId"]) for c in s["completed"])
    assert first.shape != second.shape or not np.array_equal(first, second)  # another seed, another take
    labels = [c["label"] for c in s["completed"]]
    assert labels[0].endswith("take 1") and labels[1].endswith("take 2")

    frame.get_by_role("button", name=f"Keep {labels[1]} (seed 1235)").click()
    page.wait_for_function("document.querySelector('#seed input').value === '1235'", timeout=10_000)
    assert not page.locator("#random-seed input[type=checkbox]").is_checked()
    takes.fill("1")
    takes.press("Tab")
    settle(page)
    runs = frame.evaluate("window.playerStats.runs")
    before = len(requests)
    page.click("#audition-btn")
    frame.wait_for_function(f"window.playerStats.runs === {runs + 1} && window.playerStats.completed.length === 1",
                            timeout=60_000)
    again = wait_done(frame)
    body = next(r.post_data_json for r in requests[before:] if "/api/tts/stream" in r.url and r.method == "POST")
    assert body["seed"] == 1235
    repeat = _pcm(studio.url, again["completed"][0]["requestId"])
    assert repeat.shape == second.shape
    # The same take again, bit for bit (on the CPU a request's audio depends on nothing else);
    # a different seed differs everywhere.
    assert np.array_equal(repeat, second)
    assert np.abs(first.astype(np.int32)[: len(second)] - second[: len(first)]).max() > 1000
