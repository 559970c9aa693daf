"""Renderer of `scripts/render_figures.py` for the player's record (`python -m bench.player_links`):
per link scenario the rebuffers, silence, first sound and bytes per audio second beside the player's
targets, the unthrottled start-up of Opus against 16-bit PCM, and Opus's quality against its source.
A record written before the scenarios existed renders a pending line in their place."""

from __future__ import annotations

from figures_common import _caption

COMMAND = "python -m bench.player_links --json bench/results/player-links.json"
TRANSPORTS = {"opus": "Opus", "s16": "16-bit PCM"}


def _runs(n: int) -> str:
    return f"{n} run{'' if n == 1 else 's'}"


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _link(link: dict | None) -> str:
    return "unthrottled" if link is None else f"{link['bytes_per_s'] / 1000:g} kB/s + {link['latency_ms']} ms"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def _kb(value: float | None) -> str:
    return "–" if value is None else f"{value / 1000:.1f}"


def _spread(row: dict) -> str:
    """The median first sound, and its range when the runs differ."""
    low, mid, high = (_ms(row[k]) for k in ("ttfp_ms_min", "ttfp_ms", "ttfp_ms_max"))
    return mid if low == high else f"{mid} ({low}–{high})"


def _scenarios(r: dict) -> list[str]:
    setup, targets = r["setup"], r["targets"]
    rebuffers_max, first_max = targets["rebuffers_max"], targets["first_sound_ms_max"]
    lines = [
        f"Link scenarios: utterances of {setup['utterance_s']:g} s, {_runs(r['args']['repeats'])} each (fresh pages; "
        "the scenarios in turn). Rebuffers: times the player ran dry after it started, the median and the "
        f"worst run, target ≤ {rebuffers_max} in every run; silence: their total length; first sound: from the "
        f"request to the first audible sample, median (min–max), target ≤ {first_max} ms; all played: every "
        "sample that arrived reached the speakers, in every run.",
        "",
        f"| scenario | measured link | transport | rebuffers | ≤ {rebuffers_max} | silence s | first sound ms | "
        f"≤ {first_max} ms | all played | kB per audio s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, row in r["scenarios"].items():
        link = setup["scenarios"][key]
        first = row["ttfp_ms"]
        lines.append(
            f"| {link['label']} | {_link(link['measured'])} | {', '.join(row['transports'])} | "
            f"{row['rebuffers']:g} (max {row['rebuffers_max']}) | {_met(row['rebuffers_max'] <= rebuffers_max)} | "
            f"{row['silence_s']:.2f} | {_spread(row)} | {_met(first is not None and first <= first_max)} | "
            f"{'yes' if row['all_played'] else '**no**'} | {_kb(row['bytes_per_audio_s'])} |")
    return lines


def _startup(r: dict) -> list[str]:
    startup, target = r["startup"], r["targets"]["opus_minus_s16_ms_max"]
    if not any(t in startup for t in TRANSPORTS):
        return []
    runs = max(len(startup[t]["runs"]) for t in TRANSPORTS if t in startup)
    lines = [
        "",
        f"Start-up, unthrottled: utterances of {r['setup']['startup_utterance_s']:g} s on fresh pages, {_runs(runs)} "
        "of each transport interleaved (Opus, 16-bit, Opus, ...), from the same server.",
        "",
        "| transport asked | used | first sound ms, median (min–max) | all played |",
        "|---|---|---|---|",
    ]
    for transport, name in TRANSPORTS.items():
        row = startup.get(transport)
        if row is not None:
            lines.append(f"| {name} | {', '.join(row['transports'])} | {_spread(row)} | "
                         f"{'yes' if row['all_played'] else '**no**'} |")
    difference = startup.get("opus_minus_s16_ms")
    if difference is not None:
        lines += ["", f"Opus − 16-bit PCM, medians: **{difference:+.0f} ms** (target ≤ {target} ms: "
                      f"{_met(difference <= target)})."]
    return lines


def _peak(quality: dict) -> str:
    return f"peaking at {quality['tiny_peak']:g}× full scale" if "tiny_peak" in quality else "over full scale"


def _quality(quality: dict) -> list[str]:
    return [
        "",
        f"Opus at {quality['bit_rate'] // 1000} kb/s against its source (both decoded by FFmpeg; Chromium's "
        "decoder agrees with FFmpeg's within 2e-3 per sample, `tests/e2e/test_player_opus.py`): real speech "
        f"(`{quality['speech_clip']}`, resampled to 48 kHz) **{quality['speech_snr_db']:.1f} dB SNR** at "
        f"{quality['speech_bytes_per_audio_s'] / 1000:.1f} kB per audio second; the tiny checkpoints' output "
        f"(full-band noise {_peak(quality)}, compared after clipping to it) "
        f"{quality['tiny_snr_db_vs_clipped']:.1f} dB, a figure of that noise, not of speech.",
    ]


def render_player(records: list[tuple[str, dict]]) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "player-links"]
    if not chosen:
        return f"Player figures pending: no record in `bench/results/` yet (`{COMMAND}`)."
    source, r = chosen[-1]
    lines = [_caption("The player on throttled links", r, source)]
    if "scenarios" in r:
        commit = f" Commit: {r['commit']}." if r.get("commit") else ""
        load_end = r.get("load_average_1m_end")
        lines[0] += f" Load average at the end {load_end:.1f}." if load_end is not None else ""
        lines[0] += commit
        click = f" Play is clicked {r['setup']['click']}." if r["setup"].get("click") else ""
        lines += [f"`python app.py` with the {r['setup']['checkpoint']}, {r['setup']['browser']} on the player page "
                  "as a visitor uses it (the page picks the transport), its link shaped by Chromium's own network "
                  f"emulation (DevTools protocol).{click}", ""]
        lines += _scenarios(r) + _startup(r)
    else:
        lines += ["", "Figures of the link-drop, fresh-page and start-up scenarios pending: this record predates "
                      f"them (`{COMMAND}`)."]
    if "opus_quality" in r:
        lines += _quality(r["opus_quality"])
    return "\n".join(lines)
