"""scripts/figures_player.py: docs/PLAYER.md's player-links block is rendered from the record of
`python -m bench.player_links`, each figure beside its target; an older record renders a pending line."""

from __future__ import annotations

from support.figures import render_figures

render_player = render_figures().render_player

QUALITY = {"bit_rate": 160_000, "speech_snr_db": 30.1, "speech_clip": "presets/en_2.wav",
           "speech_bytes_per_audio_s": 20_075, "tiny_snr_db_vs_clipped": 4.8, "tiny_peak": 5.53}
HEAD = {"kind": "player-links", "date": "2026-12-02T07:00:00Z",
        "machine": {"cpu_model": "Test CPU", "usable_cpus": 2, "logical_cpus": 2, "torch_threads": 1, "torch": "2.13.0"},
        "load_average_1m": 3.0, "notes": [], "opus_quality": QUALITY}


def _summary(transport: str, rebuffers: list[int], ttfps: list[float], played: bool = True) -> dict:
    runs = [{"transport": transport, "rebuffers": n, "silence_s": 0.5 * n, "ttfp_ms": t, "bytes_per_audio_s": 21_700,
             "all_played": played, "audio_s": 6.0} for n, t in zip(rebuffers, ttfps, strict=True)]
    return {"runs": runs, "rebuffers": sorted(rebuffers)[len(rebuffers) // 2], "rebuffers_max": max(rebuffers),
            "silence_s": 0.5 * sorted(rebuffers)[len(rebuffers) // 2], "silence_s_max": 0.5 * max(rebuffers),
            "ttfp_ms": sorted(ttfps)[len(ttfps) // 2], "ttfp_ms_min": min(ttfps), "ttfp_ms_max": max(ttfps),
            "bytes_per_audio_s": 21_700, "all_played": played, "transports": [transport]}


RECORD = {
    **HEAD, "command": "python -m bench.player_links --repeats 3", "load_average_1m_end": 2.5,
    "commit": "abc1234 Player: one transport", "args": {"repeats": 3, "startup_runs": 5},
    "targets": {"rebuffers_max": 1, "first_sound_ms_max": 1500, "opus_minus_s16_ms_max": 30},
    "setup": {"checkpoint": "tiny parity checkpoints", "browser": "headless Chromium", "utterance_s": 6.0,
              "startup_utterance_s": 2.0, "scenarios": {
                  "drop-230": {"label": "fast link, then 230 kB/s for the next utterance", "fresh_page": False,
                               "first": None, "measured": {"bytes_per_s": 230_000, "latency_ms": 100}},
                  "fresh-62.5": {"label": "62.5 kB/s from a fresh page", "fresh_page": True, "first": None,
                                 "measured": {"bytes_per_s": 62_500, "latency_ms": 150}}}},
    "scenarios": {"drop-230": _summary("opus", [0, 2, 1], [900.0, 1200.0, 1000.0]),
                  "fresh-62.5": _summary("opus", [0, 0, 1], [1400.0, 1700.0, 1600.0], played=False)},
    "startup": {"opus": _summary("opus", [0] * 5, [250.0, 260.0, 240.0, 255.0, 245.0]),
                "s16": _summary("s16", [0] * 5, [200.0, 210.0, 205.0, 215.0, 190.0]), "opus_minus_s16_ms": 45.0},
}


def test_each_scenario_sits_beside_its_targets():
    text = render_player([("player-links.json", RECORD)])
    lines = text.splitlines()
    assert lines[0].startswith("**The player on throttled links.** Test CPU, 2 of 2 CPUs usable")
    assert "`python -m bench.player_links --repeats 3` (`bench/results/player-links.json`)" in lines[0]
    assert "Load average at the end 2.5. Commit: abc1234 Player: one transport." in lines[0]
    # rebuffers judged on the worst run (2 > 1: missed), first sound on the median (1000 ms: met)
    assert ("| fast link, then 230 kB/s for the next utterance | 230 kB/s + 100 ms | opus | 1 (max 2) | **missed** "
            "| 0.50 | 1000 (900–1200) | met | yes | 21.7 |") in lines
    assert ("| 62.5 kB/s from a fresh page | 62.5 kB/s + 150 ms | opus | 0 (max 1) | met | 0.00 | 1600 (1400–1700) "
            "| **missed** | **no** | 21.7 |") in lines
    assert "| Opus | opus | 250 (240–260) | yes |" in lines
    assert "| 16-bit PCM | s16 | 205 (190–215) | yes |" in lines
    assert "Opus − 16-bit PCM, medians: **+45 ms** (target ≤ 30 ms: **missed**)." in lines
    assert "5 runs of each transport interleaved" in text
    assert "**30.1 dB SNR** at 20.1 kB per audio second" in text
    assert render_player([("player-links.json", RECORD)]) == text  # the same record, the same text


def test_a_record_from_before_the_scenarios_renders_them_pending():
    old = {**HEAD, "command": "python bench/player_links.py --repeats 3 --long-repeats 1",
           "args": {"repeats": 3, "long_repeats": 1}, "links": {"unthrottled": {}},
           "setup": {"checkpoint": "tiny parity checkpoints", "links": {"unthrottled": None}}}
    text = render_player([("player-links.json", old)])
    assert text.splitlines()[0].startswith("**The player on throttled links.** Test CPU")
    assert "scenarios pending: this record predates them (`python -m bench.player_links --json " in text
    assert "| " not in text  # no table typed from an old shape
    assert "**30.1 dB SNR**" in text


def test_without_a_record_the_block_says_pending():
    assert render_player([]).startswith("Player figures pending")


def test_when_play_was_clicked_is_said_when_the_record_says_it():
    clicked = {**RECORD, "setup": {**RECORD["setup"], "click": "once the page has loaded and gone idle"}}
    assert "(DevTools protocol). Play is clicked once the page has loaded and gone idle." in render_player(
        [("player-links.json", clicked)])
    assert "Play is clicked" not in render_player([("player-links.json", RECORD)])
