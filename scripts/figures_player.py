"""Renderer of `scripts/render_figures.py` for the player-on-slow-links record (`bench/player_links.py`):
rebuffers, silence, time to first sound and bytes per audio second per link, utterance and
transport, and Opus's quality against its source."""

from __future__ import annotations

from figures_common import _caption

NAMES = {"f32": "float32 (forced)", "s16": "16-bit (forced)", "opus": "Opus (forced)",
         "auto-first": "auto, first click", "auto": "auto, next click"}


def _link(setup: dict, name: str) -> str:
    link = setup["links"].get(name)
    return name if link is None else f"{name} ({link['bytes_per_s'] / 1000:g} kB/s, {link['latency_ms']} ms)"


def _count(row: dict) -> str:
    runs = len(row["runs"])
    median = row["rebuffers"]
    text = f"{median:g}" if runs == 1 else f"{median:g} (max {row['rebuffers_max']})"
    return text


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def _kb(value: float | None) -> str:
    return "–" if value is None else f"{value / 1000:.1f}"


def _peak(quality: dict) -> str:
    return f"peaking at {quality['tiny_peak']:g}× full scale" if "tiny_peak" in quality else "over full scale"


def render_player(records: list[tuple[str, dict]]) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "player-links"]
    if not chosen:
        return "Player figures pending: no record in `bench/results/` yet (`python bench/player_links.py`)."
    source, r = chosen[-1]
    setup, quality = r["setup"], r["opus_quality"]
    repeats, long_repeats = r["args"]["repeats"], r["args"]["long_repeats"]
    lines = [
        _caption("The player on throttled links", r, source),
        f"`python app.py` with the {setup['checkpoint']}, {setup['browser']} throttled by its own network "
        f"emulation (DevTools protocol); utterances of {setup['utterances_s']['short']:g} s (median of {repeats} "
        f"runs) and {setup['utterances_s']['long']:g} s ({long_repeats} run{'s' if long_repeats != 1 else ''}). "
        "Rebuffers: times the player ran dry after it started; silence: their total length; time to "
        "first sound: from the request to the first audible sample; bytes on the wire per second of audio.",
        "",
        "| link | utterance | transport | used | rebuffers | silence s | first sound ms | kB per audio s | all played |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    # Fastest link first, short utterance first (a record's keys are stored sorted by name).
    def speed(name: str) -> float:
        link = setup["links"].get(name)
        return float("inf") if link is None else link["bytes_per_s"]

    for link_name in sorted(r["links"], key=speed, reverse=True):
        by_utterance = r["links"][link_name]
        for utterance in sorted(by_utterance, key=lambda u: setup["utterances_s"][u]):
            by_transport = by_utterance[utterance]
            for transport in ("f32", "s16", "opus", "auto-first", "auto"):
                row = by_transport.get(transport)
                if row is None:
                    continue
                lines.append(
                    f"| {_link(setup, link_name)} | {setup['utterances_s'][utterance]:g} s | {NAMES[transport]} | "
                    f"{', '.join(row['transports'])} | {_count(row)} | {row['silence_s']:.2f} | {_ms(row['ttfp_ms'])} | "
                    f"{_kb(row['bytes_per_audio_s'])} | {'yes' if row['all_played'] else 'NO'} |")
    lines += [
        "",
        f"Opus at {quality['bit_rate'] // 1000} kb/s against its source (both decoded by FFmpeg; Chromium's "
        "decoder agrees with FFmpeg's within 2e-3 per sample, `tests/e2e/test_player_opus.py`): real speech "
        f"(`{quality['speech_clip']}`, resampled to 48 kHz) **{quality['speech_snr_db']:.1f} dB SNR** at "
        f"{quality['speech_bytes_per_audio_s'] / 1000:.1f} kB per audio second; the tiny checkpoints' output "
        f"(full-band noise {_peak(quality)}, compared after clipping to it) "
        f"{quality['tiny_snr_db_vs_clipped']:.1f} dB, a figure of that noise, not of speech.",
    ]
    return "\n".join(lines)
