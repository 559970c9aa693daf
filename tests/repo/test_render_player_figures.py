"""scripts/figures_player.py: docs/PLAYER.md's table is rendered from a player-links record."""

from __future__ import annotations

from support.figures import render_figures

render_player = render_figures().render_player


def _row(transport: str, rebuffers: list[int], played: bool = True) -> dict:
    runs = [{"transport": transport, "rebuffers": n, "silence_s": 0.5 * n, "ttfp_ms": 300.0 + n,
             "bytes_per_audio_s": 20_100, "all_played": played, "audio_s": 2.0, "link_bytes_per_s": 1e5}
            for n in rebuffers]
    return {"runs": runs, "rebuffers_max": max(rebuffers), "rebuffers": sorted(rebuffers)[len(rebuffers) // 2],
            "silence_s": 0.5 * sorted(rebuffers)[len(rebuffers) // 2], "ttfp_ms": 301.0,
            "bytes_per_audio_s": 20_100, "all_played": played, "transports": [transport]}


RECORD = {
    "kind": "player-links", "date": "2026-12-02T07:00:00Z", "command": "python bench/player_links.py",
    "machine": {"cpu_model": "Test CPU", "usable_cpus": 2, "logical_cpus": 2, "torch_threads": 1, "torch": "2.13.0"},
    "load_average_1m": 3.0, "notes": [], "args": {"repeats": 3, "long_repeats": 1},
    "setup": {"checkpoint": "tiny parity checkpoints", "browser": "headless Chromium",
              "links": {"unthrottled": None, "1 Mbit/s": {"bytes_per_s": 125_000, "latency_ms": 100}},
              "utterances_s": {"short": 2.0, "long": 30.0}},
    "opus_quality": {"bit_rate": 160_000, "speech_snr_db": 30.1, "speech_clip": "presets/en_2.wav",
                     "speech_bytes_per_audio_s": 20_075, "tiny_snr_db_vs_clipped": 4.8, "tiny_peak": 5.53},
    "links": {"1 Mbit/s": {"short": {"opus": _row("opus", [0, 0, 1]), "auto-first": _row("f32", [1, 0, 1], False)},
                           "long": {"auto": {**_row("opus", [0]), "runs": [_row("opus", [0])["runs"][0]]}}}},
}


def test_player_table_comes_from_the_record():
    text = render_player([("player-links.json", RECORD)])
    lines = text.splitlines()
    assert lines[0].startswith("**The player on throttled links.** Test CPU, 2 of 2 CPUs usable")
    assert "`bench/results/player-links.json`" in lines[0]
    assert "| 1 Mbit/s (125 kB/s, 100 ms) | 2 s | Opus (forced) | opus | 0 (max 1) | 0.00 | 301 | 20.1 | yes |" in lines
    assert "| 1 Mbit/s (125 kB/s, 100 ms) | 2 s | auto, first click | f32 | 1 (max 1) | 0.50 | 301 | 20.1 | NO |" in lines
    assert "| 1 Mbit/s (125 kB/s, 100 ms) | 30 s | auto, next click | opus | 0 | 0.00 | 301 | 20.1 | yes |" in lines
    assert "**30.1 dB SNR** at 20.1 kB per audio second" in text
    assert render_player([("player-links.json", RECORD)]) == text  # the same record, the same text


def test_without_a_record_the_block_says_pending():
    assert render_player([]).startswith("Player figures pending")
