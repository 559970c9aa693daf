"""The player on slow links, in headless Chromium, written as a JSON record.

Starts `python app.py` with the tiny checkpoints, opens the player page (player.html, as a visitor
would) and throttles its network with Chromium's own emulation (DevTools protocol,
`Network.emulateNetworkConditions`): unthrottled, 2 Mbit/s + 50 ms, 1 Mbit/s + 100 ms, 500 kbit/s +
150 ms. For each link it plays a short utterance (2 s) with each transport (s16, opus) and a long
one (30 s) with Opus: rebuffers, seconds of silence, time to first sound, bytes per audio second,
whether all audio was played. Plus Opus at the player's bit rate against its source: a real speech
clip (a preset's reference) and the tiny model's output.

    python bench/player_links.py --json bench/results/player-links.json [--repeats 3] [--long-repeats 1]
    python scripts/render_figures.py     # then rewrite docs/PLAYER.md's table
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import av
import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support.reliability_servers import launch_app  # noqa: E402
from support.server_helpers import wait_until_ready  # noqa: E402
from support.stream_decoding import player_stream  # noqa: E402

from bench.lib.args import default_config_path  # noqa: E402
from bench.lib.machine import machine_info  # noqa: E402
from bench.lib.record import new_record, write_record  # noqa: E402
from studio.delivery.transports import OPUS_BIT_RATE  # noqa: E402
from tts_core.audio.encoders import StreamEncoder  # noqa: E402
from tts_core.audio.io import load_audio  # noqa: E402

THREADS = "1"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--autoplay-policy=no-user-gesture-required"]
# name: (bytes per second, latency ms); None: no throttling
LINKS = {"unthrottled": None, "2 Mbit/s": (250_000, 50), "1 Mbit/s": (125_000, 100), "500 kbit/s": (62_500, 150)}
UTTERANCES = {"short": 25, "long": 375}  # codec frames of 80 ms: 2 s and 30 s (capped below the text's length)
TEXT = " ".join(f"Sentence number {i} of a long passage keeps the stream going for a good while." for i in range(30))
PLAY = ("([text, frames]) => window.mossPlayer.play({items: [{label: 'bench', request: "
        "{text, seed: 5, max_frames: frames}}]})")
FIGURES = ("transport", "underruns", "underrunFrames", "framesReceived", "framesRendered", "ttfpMs", "streamBytes",
           "audioSeconds", "startBufferedFrames", "state", "error")


def open_player(browser, url: str, link, transport: str | None):
    context = browser.new_context()
    page = context.new_page()
    page.goto(url + "player/studio/player.html" + (f"?transport={transport}" if transport else ""))
    page.wait_for_function("window.playerStats && window.playerStats.workletLoaded", timeout=30_000)
    if link is not None:
        cdp = context.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": link[1],
                                                      "downloadThroughput": link[0], "uploadThroughput": link[0]})
    return context, page


def play(page, frames: int, run: int) -> dict:
    page.evaluate(PLAY, [TEXT, frames])
    page.wait_for_function(f"window.playerStats.runs >= {run} && ['finished', 'stopped', 'error']"
                           ".includes(window.playerStats.state)", timeout=600_000)
    s = page.evaluate("JSON.parse(JSON.stringify(window.playerStats))")
    return {key: s.get(key) for key in FIGURES}


def figures(s: dict) -> dict:
    audio_s = s["framesReceived"] / 48_000
    return {"transport": s["transport"], "rebuffers": s["underruns"], "silence_s": round(s["underrunFrames"] / 48_000, 3),
            "ttfp_ms": round(s["ttfpMs"], 1) if s["ttfpMs"] is not None else None,
            "bytes_per_audio_s": round(s["streamBytes"] / audio_s) if audio_s else None,
            "all_played": s["state"] == "finished" and s["framesReceived"] == s["framesRendered"] > 0,
            "audio_s": round(audio_s, 3)}


def measure(browser, url: str, link, utterance: str, transport: str) -> dict:
    """One run on a fresh page, the transport forced."""
    context, page = open_player(browser, url, link, transport)
    try:
        return figures(play(page, UTTERANCES[utterance], 1))
    finally:
        context.close()


def summary(runs: list[dict]) -> dict:
    def med(key):
        values = [r[key] for r in runs if r[key] is not None]
        return statistics.median(values) if values else None
    return {"runs": runs, "rebuffers_max": max(r["rebuffers"] for r in runs), "rebuffers": med("rebuffers"),
            "silence_s": med("silence_s"), "ttfp_ms": med("ttfp_ms"), "bytes_per_audio_s": med("bytes_per_audio_s"),
            "all_played": all(r["all_played"] for r in runs),
            "transports": sorted({r["transport"] for r in runs})}


def opus_quality(data_dir: Path, url: str) -> dict:
    """SNR of Opus at the player's bit rate against its source, both decoded by FFmpeg (PyAV)."""
    import soxr

    wav, rate = load_audio(str(data_dir / "presets" / "en_2.wav"))
    mono = soxr.resample(np.asarray(wav, np.float32).reshape(-1), rate, 48_000).astype(np.float32)
    speech = np.stack([mono, 0.8 * mono])
    encoder = StreamEncoder("opus", 48_000, 2, bit_rate=OPUS_BIT_RATE)
    data = b"".join(encoder.encode(speech[:, i:i + 3840]) for i in range(0, speech.shape[1], 3840)) + encoder.finish()

    def decode(blob: bytes) -> np.ndarray:
        with av.open(io.BytesIO(blob), format="ogg") as container:
            return np.concatenate([f.to_ndarray() for f in container.decode(audio=0)], axis=1)

    def snr(ref: np.ndarray, test: np.ndarray) -> float:
        return round(float(10 * np.log10((ref.astype(np.float64) ** 2).sum() / ((ref - test).astype(np.float64) ** 2).sum())), 1)

    body = {"text": TEXT[:200], "seed": 5, "max_frames": 50}

    def stream(transport: str) -> np.ndarray:  # the route's event frames, decoded as the player does
        response = httpx.post(url + "api/tts/stream", json={**body, "transport": transport}, timeout=120)
        return player_stream(response.content, response.headers["x-sample-format"])[0]

    return {"bit_rate": OPUS_BIT_RATE,
            "speech_snr_db": snr(speech, decode(data)), "speech_clip": "presets/en_2.wav",
            "speech_bytes_per_audio_s": round(len(data) / (speech.shape[1] / 48_000)),
            "tiny_snr_db_vs_clipped": snr(stream("s16"), stream("opus"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the record to this JSON file")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each short case (the median is reported)")
    parser.add_argument("--long-repeats", type=int, default=1, help="runs of each long case")
    parser.add_argument("--note", action="append", default=[], help="a remark stored in the record (repeatable)")
    args = parser.parse_args()
    config = default_config_path("parity", "tiny_lm", "config.json")
    if config is None:
        raise SystemExit("the shared data's parity/tiny_lm was not found: set MOSS_TTS_PARITY_DIR")
    data_dir = Path(config).parents[2]
    from playwright.sync_api import sync_playwright

    machine = {**machine_info([]), "torch_threads": int(THREADS)}
    record = new_record("player-links", args, machine, {
        "checkpoint": "tiny parity checkpoints", "threads": THREADS, "browser": "headless Chromium",
        "links": {k: (None if v is None else {"bytes_per_s": v[0], "latency_ms": v[1]}) for k, v in LINKS.items()},
        "utterances_s": {k: v * 0.08 for k, v in UTTERANCES.items()}}, program="python bench/player_links.py")
    cases = [("short", "s16"), ("short", "opus"), ("long", "opus")]
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="moss-links-") as work, \
            launch_app(data_dir, Path(work), log_path=Path(work) / "app.log", threads=THREADS) as app, \
            sync_playwright() as playwright:
        wait_until_ready(app, 300)
        url = app.url.rstrip("/") + "/"
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            record["opus_quality"] = opus_quality(data_dir, url)
            print(f"opus quality: {record['opus_quality']}", flush=True)
            for link_name, link in LINKS.items():
                for utterance, transport in cases:
                    repeats = args.repeats if utterance == "short" else args.long_repeats
                    started = time.monotonic()
                    runs = [measure(browser, url, link, utterance, transport) for _ in range(repeats)]
                    results.setdefault(link_name, {}).setdefault(utterance, {})[transport] = summary(runs)
                    print(f"{link_name} {utterance} {transport}: {summary(runs)['transports']} "
                          f"{time.monotonic() - started:.0f} s", flush=True)
        finally:
            browser.close()
    record["links"] = results
    if args.json:
        write_record(record, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
