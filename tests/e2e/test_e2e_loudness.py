"""Loudness-matched audition, Play all and the board's keys, in headless Chromium.

- The page's BS.1770 meter (static/loudness.js) agrees with pyloudnorm on real preset clips.
- An audition's cards, replayed with "Match loudness" on, measure -23 LUFS +-1 LU at the worklet's
  output: a tap (a ScriptProcessor the init script connects beside the worklet's own connection to
  the speakers) records what the worklet really plays, and pyloudnorm measures it. With the switch
  off, a card plays at its own loudness, and its WAV download is the unmodified generation.
- Play all replays every card in order; the keys 1-8 play a card.
"""

from __future__ import annotations

import re

import numpy as np
import pyloudnorm
import pytest
import soundfile
import soxr

pytest.register_assert_rewrite("support.studio_helpers")
from support.studio_helpers import axe_serious, open_page, set_max_seconds, wait_done  # noqa: E402

from tts_core.audio.io import load_audio  # noqa: E402

pytestmark = pytest.mark.e2e
TARGET = -23.0

# Record what every pcm-player worklet node sends to the speakers while window.__tap.on.
TAP = """
(() => {
  const tap = window.__tap = { on: false, left: [], right: [] };
  const connect = AudioNode.prototype.connect;
  AudioNode.prototype.connect = function (dest, ...rest) {
    const out = connect.call(this, dest, ...rest);
    if (this instanceof AudioWorkletNode && dest instanceof AudioDestinationNode && !this.__tapped) {
      this.__tapped = true;
      const rec = this.context.createScriptProcessor(2048, 2, 2);
      rec.onaudioprocess = (e) => {
        if (!tap.on) return;
        tap.left.push(...e.inputBuffer.getChannelData(0));
        tap.right.push(...e.inputBuffer.getChannelData(1));
      };
      connect.call(this, rec);
      connect.call(rec, dest);   // a processor runs only when connected; its output is silence
    }
    return out;
  };
})();
"""


def _lufs(left, right, rate: int = 48_000) -> float:
    stereo = np.stack([np.asarray(left, np.float64), np.asarray(right, np.float64)], axis=1)
    loud = np.flatnonzero(np.abs(stereo).max(axis=1) > 1e-6)
    assert loud.size, "the tap recorded only silence"
    stereo = stereo[loud[0]:loud[-1] + 1]  # what played, without the silence around it
    return float(pyloudnorm.Meter(rate).integrated_loudness(stereo))


def _tapped_replay(frame, card, label: str) -> float:
    runs = frame.evaluate("window.playerStats.runs")
    frame.evaluate("() => { Object.assign(window.__tap, {on: true, left: [], right: []}); }")
    card.get_by_role("button", name=f"Play {label}").click()
    frame.wait_for_function(f"window.playerStats.runs === {runs + 1}")
    assert wait_done(frame)["state"] == "finished"
    frame.wait_for_timeout(300)  # the last render quanta through the tap
    tapped = frame.evaluate("() => { window.__tap.on = false; return [window.__tap.left, window.__tap.right]; }")
    return _lufs(*tapped)


@pytest.fixture
def board(browser, studio):
    context = browser.new_context(viewport={"width": 1360, "height": 1000}, accept_downloads=True)
    context.add_init_script(TAP)
    try:
        page, frame = open_page(context, studio.url)
        set_max_seconds(page, 1.5)
        page.get_by_role("tab", name="Voice audition").click()
        boxes = page.locator("#audition-voices input[type=checkbox]")
        checked = [i for i in range(boxes.count()) if boxes.nth(i).is_checked()]
        for i in checked[2:]:
            boxes.nth(i).uncheck()
        page.click("#audition-btn")
        frame.wait_for_function("window.playerStats.completed.length === 2", timeout=90_000)
        s = wait_done(frame)
        yield page, frame, [c["label"] for c in s["completed"]]
    finally:
        context.close()


@pytest.mark.parametrize(("preset", "rate"), [("en_2", 48_000), ("zh_1", 48_000), ("en_3", 44_100)])
def test_the_pages_meter_agrees_with_pyloudnorm(browser, studio, data_dir, preset: str, rate: int) -> None:
    wav, native = load_audio(data_dir / "presets" / f"{preset}.wav")
    mono = soxr.resample(wav[0], native, rate)[: 4 * rate]
    stereo = np.stack([mono, 0.5 * mono], axis=1).astype(np.float32)  # two different channels
    expected = pyloudnorm.Meter(rate).integrated_loudness(stereo.astype(np.float64))
    context = browser.new_context()
    try:
        _, frame = open_page(context, studio.url, ready=False)
        measured = frame.evaluate("""async ([data, rate]) => {
            const m = await import('./loudness.js');
            return m.measure([new Float32Array(data)], rate).lufs; }""", [stereo.ravel().tolist(), rate])
    finally:
        context.close()
    assert measured == pytest.approx(expected, abs=0.05)


def test_matched_cards_play_at_the_target_and_downloads_stay_as_made(board, tmp_path) -> None:
    page, frame, labels = board
    cards = frame.locator("#cards .card")
    assert "matched to -23 LUFS" in frame.inner_text("#loudness-note")
    for i, label in enumerate(labels):
        assert _tapped_replay(frame, cards.nth(i), label) == pytest.approx(TARGET, abs=1.0)
        assert "LUFS" in cards.nth(i).inner_text()  # the card shows its own measured loudness

    page.get_by_label("Match loudness").uncheck()
    frame.wait_for_function("document.querySelector('#loudness-note').textContent.includes('off')")
    unmatched = _tapped_replay(frame, cards.nth(0), labels[0])
    shown = float(re.search(r"LOUDNESS\s+(-?\d+\.\d) LUFS", cards.nth(0).inner_text().upper()).group(1))
    assert unmatched == pytest.approx(shown, abs=0.5)  # its own loudness, as the card says
    assert abs(shown - TARGET) > 2.0  # (so the matched replays above were really moved to the target)
    with page.expect_download() as info:
        cards.nth(0).get_by_role("link", name=f"Download {labels[0]} as WAV").click()
    audio, rate = soundfile.read(info.value.path(), dtype="float32", always_2d=True)
    as_made = pyloudnorm.Meter(rate).integrated_loudness(audio.astype(np.float64))
    assert abs(as_made - TARGET) > 2.0  # the download is the generation, never the matched playback
    assert axe_serious(frame) == []


def test_play_all_plays_every_card_in_order_and_keys_pick_cards(board) -> None:
    page, frame, labels = board
    frame.evaluate("""() => { window.__heard = []; setInterval(() => {
        const s = window.playerStats, last = window.__heard[window.__heard.length - 1];
        if (s.state === 'playing' && s.label !== last) window.__heard.push(s.label); }, 10); }""")
    runs = frame.evaluate("window.playerStats.runs")
    frame.get_by_role("button", name="Play all").click()
    frame.wait_for_function(f"window.playerStats.runs === {runs + len(labels)} && "
                            "window.playerStats.state === 'finished'", timeout=30_000)
    assert frame.evaluate("window.__heard") == [f"{label} (replay)" for label in labels]

    frame.locator("#board-title").click()  # focus in the player, outside any input
    frame.evaluate("() => { window.__heard = []; }")
    page.keyboard.press("2")
    frame.wait_for_function(f"window.__heard.includes('{labels[1]} (replay)')", timeout=10_000)
    wait_done(frame)
