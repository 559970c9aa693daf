"""The player on the links that the player's targets name, in headless Chromium, written as a JSON record.

Starts `python app.py` with the tiny checkpoints and opens the player page (player.html) as a
visitor does: the page picks the transport (Opus where WebCodecs' `AudioDecoder` decodes it, 16-bit
PCM otherwise), and Chromium's own network emulation (DevTools protocol,
`Network.emulateNetworkConditions`) shapes its link. Play is clicked once the page has loaded and
gone idle (network idle, then an idle callback), as a visitor's click finds it: just after its
worklet loads, a fresh page's renderer still takes more than a core, and on a 2-CPU machine that
starves the server beside it (docs/PLAYER.md).
Scenarios:

- link drop: one utterance on an unthrottled link, then the link drops to 230 kB/s and the next
  utterance is asked for in the same page (the second is measured);
- 125 kB/s and 62.5 kB/s: the first utterance of a fresh page;
- start-up: unthrottled, fresh pages, the page's Opus and 16-bit PCM (`?transport=s16`) from the
  same server, runs interleaved (opus, s16, opus, ...).

Per run: rebuffers, seconds of silence, time to first sound, bytes on the wire per audio second,
whether every sample that arrived was played; per scenario the medians, and the targets beside
them. Plus Opus at the player's bit rate against its source (a preset's speech, the tiny model's
output). Nothing here judges a figure: the renderer sets them beside the targets.

    python -m bench.player_links --json bench/results/player-links.json [--repeats 3] [--startup-runs 5]
    python scripts/render_figures.py     # then docs/PLAYER.md's player-links block
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from bench.lib.app import REPO_ROOT, launch_app, wait_ready
from bench.lib.args import default_config_path
from bench.lib.machine import git_commit, load_average_1m, machine_info
from bench.lib.player_stream import decode_ogg_opus, player_stream
from bench.lib.record import new_record, write_record
from studio.delivery.transports import OPUS_BIT_RATE
from tts_core.audio.encoders import StreamEncoder
from tts_core.audio.io import load_audio

THREADS = "1"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--autoplay-policy=no-user-gesture-required"]
# The targets, stored in the record for the renderer (the bench itself judges nothing).
TARGETS = {"rebuffers_max": 1, "first_sound_ms_max": 1500, "opus_minus_s16_ms_max": 30}
# key: (label, the link of the page's first utterance, the link of the measured one); a link is
# (bytes per second, latency ms), None unthrottled; "fresh": the measured utterance is the page's first.
SCENARIOS = {"drop-230": ("fast link, then 230 kB/s for the next utterance", None, (230_000, 100)),
             "fresh-125": ("125 kB/s from a fresh page", "fresh", (125_000, 100)),
             "fresh-62.5": ("62.5 kB/s from a fresh page", "fresh", (62_500, 150))}
STARTUP = ("opus", "s16")  # the page's own choice (Opus in Chromium), then 16-bit PCM forced
TEXT = " ".join(f"Sentence number {i} of a long passage keeps the stream going for a good while." for i in range(30))
PLAY = ("([text, frames]) => window.mossPlayer.play({items: [{label: 'bench', request: "
        "{text, seed: 5, max_frames: frames}}]})")
FIGURES = ("transport", "underruns", "underrunFrames", "framesReceived", "framesRendered", "ttfpMs", "streamBytes",
           "sampleRate", "state", "error")


# What the page must be before play is clicked (see the module docstring); stored in the record.
CLICK = "once the page has loaded and gone idle (network idle, then an idle callback)"
IDLE = "new Promise((resolve) => requestIdleCallback(() => resolve(), {timeout: 2000}))"


def open_player(browser, url: str, query: str = ""):
    """A fresh page of the player, its worklet loaded and the page idle, and a DevTools session on its network."""
    context = browser.new_context()
    page = context.new_page()
    page.goto(url + "player/studio/player.html" + query)
    page.wait_for_function("window.playerStats && window.playerStats.workletLoaded", timeout=30_000)
    page.wait_for_load_state("networkidle")
    page.evaluate(IDLE)
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    return context, page, cdp


def shape(cdp, link: tuple[int, int] | None) -> None:
    """Throttle the page's network to `link` (bytes per second, latency ms); None leaves it as it is."""
    if link is not None:
        cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": link[1],
                                                      "downloadThroughput": link[0], "uploadThroughput": link[0]})


def play(page, frames: int, run: int) -> dict:
    """Ask for an utterance of `frames` codec frames (the page's `run`-th) and wait for its end."""
    page.evaluate(PLAY, [TEXT, frames])
    page.wait_for_function(f"window.playerStats.runs >= {run} && ['finished', 'stopped', 'error']"
                           ".includes(window.playerStats.state)", timeout=600_000)
    s = page.evaluate("JSON.parse(JSON.stringify(window.playerStats))")
    return {key: s.get(key) for key in FIGURES}


def figures(s: dict) -> dict:
    """One utterance's figures from the page's stats."""
    rate = s["sampleRate"] or 48_000
    audio_s = s["framesReceived"] / 48_000
    return {"transport": s["transport"], "rebuffers": s["underruns"], "silence_s": round(s["underrunFrames"] / rate, 3),
            "ttfp_ms": round(s["ttfpMs"], 1) if s["ttfpMs"] is not None else None,
            "bytes_per_audio_s": round(s["streamBytes"] / audio_s) if audio_s else None,
            "all_played": s["state"] == "finished" and s["framesReceived"] == s["framesRendered"] > 0,
            "samples_received": s["framesReceived"], "samples_played": s["framesRendered"],
            "audio_s": round(audio_s, 3), "error": s["error"]}


def scenario_run(browser, url: str, first, link, frames: int) -> dict:
    """One run of a scenario on a fresh page: the measured utterance's figures (and the first's)."""
    context, page, cdp = open_player(browser, url)
    try:
        if first == "fresh":
            shape(cdp, link)
            return figures(play(page, frames, 1))
        shape(cdp, first)
        before = figures(play(page, frames, 1))
        shape(cdp, link)
        return {**figures(play(page, frames, 2)), "first_utterance": before}
    finally:
        context.close()


def startup_run(browser, url: str, transport: str, frames: int) -> dict:
    """One unthrottled utterance of a fresh page, its transport the page's own or 16-bit forced."""
    context, page, _ = open_player(browser, url, "?transport=s16" if transport == "s16" else "")
    try:
        return figures(play(page, frames, 1))
    finally:
        context.close()


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r[key] is not None]
    return round(statistics.median(values), 3) if values else None


def summary(runs: list[dict]) -> dict:
    """The medians of a scenario's runs, the worst rebuffers, whether every run played everything."""
    ttfps = [r["ttfp_ms"] for r in runs if r["ttfp_ms"] is not None]
    return {"runs": runs, "rebuffers": _median(runs, "rebuffers"), "rebuffers_max": max(r["rebuffers"] for r in runs),
            "silence_s": _median(runs, "silence_s"), "silence_s_max": max(r["silence_s"] for r in runs),
            "ttfp_ms": _median(runs, "ttfp_ms"), "ttfp_ms_min": min(ttfps, default=None),
            "ttfp_ms_max": max(ttfps, default=None), "bytes_per_audio_s": _median(runs, "bytes_per_audio_s"),
            "all_played": all(r["all_played"] for r in runs), "transports": sorted({r["transport"] for r in runs})}


def opus_quality(data_dir: Path, url: str) -> dict:
    """SNR of Opus at the player's bit rate against its source, both decoded by FFmpeg (PyAV)."""
    import soxr

    wav, rate = load_audio(str(data_dir / "presets" / "en_2.wav"))
    mono = soxr.resample(np.asarray(wav, np.float32).reshape(-1), rate, 48_000).astype(np.float32)
    speech = np.stack([mono, 0.8 * mono])
    encoder = StreamEncoder("opus", 48_000, 2, bit_rate=OPUS_BIT_RATE)
    data = b"".join(encoder.encode(speech[:, i:i + 3840]) for i in range(0, speech.shape[1], 3840)) + encoder.finish()

    def snr(ref: np.ndarray, test: np.ndarray) -> float:
        return round(float(10 * np.log10((ref.astype(np.float64) ** 2).sum() / ((ref - test).astype(np.float64) ** 2).sum())), 1)

    body = {"text": TEXT[:200], "seed": 5, "max_frames": 50}

    def stream(transport: str) -> np.ndarray:  # the route's event frames, decoded as the player does
        response = httpx.post(url + "api/tts/stream", json={**body, "transport": transport}, timeout=120)
        return player_stream(response.content, response.headers["x-sample-format"])[0]

    return {"bit_rate": OPUS_BIT_RATE,
            "speech_snr_db": snr(speech, decode_ogg_opus(data)), "speech_clip": "presets/en_2.wav",
            "speech_bytes_per_audio_s": round(len(data) / (speech.shape[1] / 48_000)),
            "tiny_snr_db_vs_clipped": snr(stream("s16"), stream("opus"))}


def _link(link) -> dict | None:
    return None if link is None or link == "fresh" else {"bytes_per_s": link[0], "latency_ms": link[1]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the record to this JSON file")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each link scenario (the median is reported)")
    parser.add_argument("--startup-runs", type=int, default=5, help="unthrottled runs of each transport")
    parser.add_argument("--frames", type=int, default=75, help="codec frames (80 ms) of a link scenario's utterances")
    parser.add_argument("--startup-frames", type=int, default=25, help="codec frames of a start-up utterance")
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS),
                        help="run only this link scenario (repeatable; default: all)")
    parser.add_argument("--note", action="append", default=[], help="a remark stored in the record (repeatable)")
    args = parser.parse_args()
    config = default_config_path("parity", "tiny_lm", "config.json")
    if config is None:
        raise SystemExit("the shared data's parity/tiny_lm was not found: set MOSS_TTS_PARITY_DIR")
    data_dir = Path(config).parents[2]
    from playwright.sync_api import sync_playwright

    chosen = {name: SCENARIOS[name] for name in (args.scenario or SCENARIOS)}
    machine = {**machine_info([]), "torch_threads": int(THREADS)}
    record = new_record("player-links", args, machine, {
        "checkpoint": "tiny parity checkpoints", "threads": THREADS, "browser": "headless Chromium", "click": CLICK,
        "utterance_s": args.frames * 0.08, "startup_utterance_s": args.startup_frames * 0.08,
        "scenarios": {key: {"label": label, "fresh_page": first == "fresh", "first": _link(first),
                            "measured": _link(link)} for key, (label, first, link) in chosen.items()}},
        program="python -m bench.player_links")
    record["commit"] = git_commit(REPO_ROOT)
    record["targets"] = TARGETS
    runs: dict[str, list[dict]] = {name: [] for name in chosen}
    startup: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="moss-links-") as work, \
            launch_app(data_dir, Path(work), log_path=Path(work) / "app.log", threads=THREADS) as app, \
            sync_playwright() as playwright:
        wait_ready(app, 300)
        url = app.url.rstrip("/") + "/"
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            record["opus_quality"] = opus_quality(data_dir, url)  # its two requests warm the server up
            print(f"opus quality: {record['opus_quality']}", flush=True)
            record["load_average_1m_measured"] = load_average_1m()
            for repeat in range(args.repeats):  # the scenarios in turn, so drifting load touches each alike
                for name, (_, first, link) in chosen.items():
                    started = time.monotonic()
                    runs[name].append(scenario_run(browser, url, first, link, args.frames))
                    r = runs[name][-1]
                    print(f"{name} #{repeat + 1}: {r['transport']}, {r['rebuffers']} rebuffers, {r['silence_s']} s "
                          f"silent, first sound {r['ttfp_ms']} ms, all played {r['all_played']} "
                          f"({time.monotonic() - started:.0f} s)", flush=True)
            for repeat in range(args.startup_runs):
                for transport in STARTUP:
                    startup.append({"asked": transport, **startup_run(browser, url, transport, args.startup_frames)})
                    print(f"start-up {transport} #{repeat + 1}: {startup[-1]['transport']}, first sound "
                          f"{startup[-1]['ttfp_ms']} ms", flush=True)
        finally:
            browser.close()
    record["scenarios"] = {name: summary(scenario_runs) for name, scenario_runs in runs.items() if scenario_runs}
    by_transport = {t: summary([r for r in startup if r["asked"] == t]) for t in STARTUP} if startup else {}
    opus_ms, s16_ms = (by_transport.get(t, {}).get("ttfp_ms") for t in STARTUP)
    record["startup"] = {**by_transport, "opus_minus_s16_ms": (round(opus_ms - s16_ms, 1)
                                                               if opus_ms is not None and s16_ms is not None else None)}
    record["load_average_1m_end"] = load_average_1m()
    for name, s in record["scenarios"].items():
        print(f"{name}: rebuffers {s['rebuffers']} (max {s['rebuffers_max']}), silence {s['silence_s']} s, "
              f"first sound {s['ttfp_ms']} ms, all played {s['all_played']}, {s['transports']}")
    print(f"start-up: opus {opus_ms} ms, s16 {s16_ms} ms, opus - s16 {record['startup']['opus_minus_s16_ms']} ms")
    print(f"load average at start {record['load_average_1m']}, end {record['load_average_1m_end']}; "
          f"commit {record['commit']}")
    if args.json:
        write_record(record, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
