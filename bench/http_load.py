"""The server under load, as its users drive it: `python app.py` and N concurrent OpenAI clients.

Starts `python app.py` with the tiny checkpoints of the shared data (`--max-active-streams` = the
largest level, so every listener of a level is generated at once), then per level (1...N concurrent
listeners), side by side in the same minutes:

- the in-process bench: the same requests through `Synthesizer.stream()` from N threads, in this
  process, on an engine with the same limits (what the engine makes);
- per response format and mode (streamed: `stream_format: "audio"`; whole: one file), N clients of
  the official `openai` SDK (`AsyncOpenAI`, `with_streaming_response`) over real sockets, each
  reading its response as it comes (what the API delivers).

Per request: time to first byte, delivered real-time factor (last byte / audio length), and a
listener who starts at the first playable audio and plays in real time (`bench.lib.playback`:
underruns, seconds of silence). Per run: aggregate x real time, the server's CPU seconds per audio
second (psutil, from outside), and its encode seconds per audio second and bytes out by format
(read from its /metrics). Encoder quality/speed at LAME's levels is measured once (`encoder_check`).

The machine may be shared with other work: the record keeps the load average; ratios are only read
between runs of one record. Figures only: nothing here asserts a timing.

    python bench/http_load.py --streams 1,16,32,64 --json bench/results/http-load-cpu.json
    python scripts/render_figures.py     # then rewrite docs/SERVING.md
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from encoder_check import encoder_check  # noqa: E402
from support.reliability_servers import launch_app  # noqa: E402
from support.server_helpers import tiny_synthesizer_factory, wait_for_idle  # noqa: E402

from bench.lib.machine import machine_info  # noqa: E402
from bench.lib.playback import audio_timeline, simulate_playback  # noqa: E402
from bench.lib.record import command_line, new_record, write_record  # noqa: E402
from bench.lib.streams import run_streams, summarize_run  # noqa: E402

logger = logging.getLogger("http_load")
TEXT = ("Streaming speech reaches every listener while it is still being generated, one small piece after "
        "another, and the server keeps up with all of them at once.")
MODEL = "moss-tts-nano"  # 48 kHz stereo in every format (OpenAI's names would make pcm 24 kHz mono)
FORMATS = ("pcm", "opus", "mp3", "aac", "flac", "wav")


# ---- one client ---------------------------------------------------------------------------------


async def one_request(client, fmt: str, stream: bool, seed: int, frames: int) -> dict:
    """One OpenAI SDK request read as it arrives: arrival times, bytes, then the listener's view."""
    extra = {"seed": seed, "max_frames": frames, **({"stream_format": "audio"} if stream else {})}
    started = time.perf_counter()
    arrivals: list[tuple[float, int]] = []
    parts: list[bytes] = []
    total = 0
    async with client.audio.speech.with_streaming_response.create(
            model=MODEL, voice="alloy", input=TEXT, response_format=fmt, extra_body=extra) as response:
        async for piece in response.iter_bytes():
            total += len(piece)
            arrivals.append((time.perf_counter() - started, total))
            if fmt not in ("pcm", "wav"):
                parts.append(piece)
    return {"arrivals": arrivals, "data": b"".join(parts), "bytes": total}


def listener_view(fmt: str, result: dict) -> dict:
    """TTFB, delivered RTF and the playback simulation of one finished request."""
    points = audio_timeline(fmt, result["data"], result["arrivals"])
    play = simulate_playback(points)
    last_s = result["arrivals"][-1][0]
    return {"ttfb_s": result["arrivals"][0][0], "last_byte_s": last_s, "audio_s": play.audio_s,
            "rtf": last_s / play.audio_s if play.audio_s else None, "underruns": play.underruns,
            "silence_s": play.silence_s, "bytes": result["bytes"]}


# ---- the server's own counters ------------------------------------------------------------------


def scrape(url: str) -> dict[tuple[str, str], float]:
    """(metric sample name, format label) -> value, for the encode and bytes-out counters."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = ("tts_encode_seconds_total", "tts_audio_out_seconds_total", "tts_response_bytes_total")
    values: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=10).text):
        for sample in family.samples:
            if sample.name in wanted:
                values[(sample.name, sample.labels.get("format", ""))] = sample.value
    return values


def _delta(after: dict, before: dict, name: str, fmt: str) -> float | None:
    if (name, fmt) not in after:
        return None
    return after[(name, fmt)] - before.get((name, fmt), 0.0)


# ---- one run ------------------------------------------------------------------------------------


async def _drive(url: str, fmt: str, stream: bool, streams: int, frames: int, seed0: int) -> tuple[list[dict], float]:
    from openai import AsyncOpenAI

    limits = httpx.Limits(max_connections=streams + 4, max_keepalive_connections=streams + 4)
    async with AsyncOpenAI(base_url=url + "/v1", api_key="not-needed", max_retries=0, timeout=600,
                           http_client=httpx.AsyncClient(limits=limits, timeout=600)) as client:
        started = time.perf_counter()
        results = await asyncio.gather(*(one_request(client, fmt, stream, seed0 + i, frames)
                                         for i in range(streams)))
        return list(results), time.perf_counter() - started


def http_run(app, fmt: str, stream: bool, streams: int, frames: int, seed0: int) -> dict:
    wait_for_idle(app.health, 60)
    before, cpu0 = scrape(app.url), app.ps.cpu_times()
    results, wall_s = asyncio.run(_drive(app.url, fmt, stream, streams, frames, seed0))
    cpu1, after = app.ps.cpu_times(), scrape(app.url)
    views = [listener_view(fmt, r) for r in results]
    audio_s = sum(v["audio_s"] for v in views)
    cpu_s = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    encode_s = _delta(after, before, "tts_encode_seconds_total", fmt)
    encoded_audio_s = _delta(after, before, "tts_audio_out_seconds_total", fmt)
    ttfb = np.array([v["ttfb_s"] for v in views])
    rtf = [v["rtf"] for v in views if v["rtf"] is not None]
    return {
        "x_realtime": round(audio_s / wall_s, 3), "wall_s": round(wall_s, 3),
        "ttfb_p50_ms": round(1000 * float(np.percentile(ttfb, 50)), 1),
        "ttfb_p95_ms": round(1000 * float(np.percentile(ttfb, 95)), 1),
        "rtf_p50": round(statistics.median(rtf), 4), "rtf_max": round(max(rtf), 4),
        "behind_real_time": sum(1 for r in rtf if r > 1.0),
        "underruns": sum(v["underruns"] for v in views),
        "listeners_with_underruns": sum(1 for v in views if v["underruns"]),
        "silence_s": round(sum(v["silence_s"] for v in views), 3),
        "server_cpu_s_per_audio_s": round(cpu_s / audio_s, 4),
        "encode_s_per_audio_s": round(encode_s / encoded_audio_s, 5) if encode_s is not None and encoded_audio_s
        else None,
        "bytes_per_audio_s": round(sum(v["bytes"] for v in views) / audio_s),
        "audio_s_per_stream": round(statistics.median(v["audio_s"] for v in views), 3),
    }


def inproc_run(synth, streams: int, frames: int, seed0: int) -> dict:
    from tts_core.types import SynthesisRequest

    requests = [SynthesisRequest(TEXT, seed=seed0 + i, max_frames=frames) for i in range(streams)]
    timings, wall_s = run_streams(synth, requests)
    return summarize_run(timings, wall_s)


def _median_run(runs: list[dict]) -> dict:
    """Per figure, the median over the repeats (None where a figure was not measured)."""
    out = {}
    for key in runs[0]:
        values = [r[key] for r in runs if r[key] is not None]
        out[key] = round(statistics.median(values), 5) if values else None
    out["runs"] = len(runs)
    return out


def _without_data(argv: list[str]) -> list[str]:
    """`argv` without `--data PATH` (a local path)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--data":
            skip = True
        elif not arg.startswith("--data="):
            out.append(arg)
    return out


# ---- the whole bench ----------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "moss_tts_nano_data")
    parser.add_argument("--streams", default="1,16,32,64", help="concurrent listeners per level")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--modes", default="stream,whole", help="stream (stream_format audio) and/or whole")
    parser.add_argument("--whole-formats", default="pcm,mp3", help="formats also fetched whole")
    parser.add_argument("--frames", type=int, default=100, help="frames per request (80 ms each)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", default="1", help="MOSS_TTS_NUM_THREADS of the app (torch threads)")
    parser.add_argument("--server-args", default="", help="extra flags for app.py, e.g. '--max-queue 64'")
    parser.add_argument("--json", default=None)
    parser.add_argument("--note", action="append")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    import torch

    from tts_core.config import EngineConfig

    levels = [int(s) for s in args.streams.split(",")]
    formats = [f for f in args.formats.split(",") if f]
    modes = [m for m in args.modes.split(",") if m]
    most = max(levels)
    torch.set_num_threads(int(args.threads))  # the in-process engine gets what the app gets
    work = Path(tempfile.mkdtemp(prefix="http-load-"))
    synth = tiny_synthesizer_factory(args.data, work / "inproc-cache", EngineConfig(
        max_active_streams=most, max_queue=most))(lambda _: None)
    server_args = ("--max-active-streams", str(most), "--max-queue", str(most), *args.server_args.split())
    recorded = argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "data"})  # a local path
    record = new_record("http_load", recorded, machine_info([]), {
        "server": "python app.py, tiny parity checkpoints, CPU", "max_active_streams": most,
        "threads": args.threads, "frames": args.frames, "client": "openai.AsyncOpenAI (httpx), one process",
        "shared_machine": "other engineers' work ran on the same cores; compare runs of one record only",
    }, program="python bench/http_load.py")
    record["command"] = command_line(_without_data(sys.argv), "python bench/http_load.py")
    record["encoder_check"] = encoder_check(args.data)
    record["levels"] = []
    with launch_app(args.data, work, log_path=work / "app.log", threads=args.threads,
                    extra_args=server_args) as app:
        from support.server_helpers import wait_until_ready

        wait_until_ready(app, 300)
        http_run(app, "pcm", True, 2, 10, 10_000)  # warm-up: first requests load lazily
        inproc_run(synth, 2, 10, 10_000)
        for streams in levels:
            level = {"streams": streams, "inproc": [], "http": {}}
            for repeat in range(args.repeats):
                seed0 = 1000 * repeat
                level["inproc"].append(inproc_run(synth, streams, args.frames, seed0))
                for mode in modes:
                    for fmt in formats if mode == "stream" else [f for f in formats if f in args.whole_formats]:
                        key = f"{fmt}/{mode}"
                        run = http_run(app, fmt, mode == "stream", streams, args.frames, seed0)
                        level["http"].setdefault(key, []).append(run)
                        logger.info("%d streams %s: %.1fx real time, RTF max %.2f, %d underruns", streams, key,
                                    run["x_realtime"], run["rtf_max"], run["underruns"])
            level["inproc"] = _median_run(level["inproc"])
            level["http"] = {key: _median_run(runs) for key, runs in level["http"].items()}
            logger.info("%d streams in-process: %.1fx real time", streams, level["inproc"]["x_realtime"])
            record["levels"].append(level)
    synth.close()
    shutil.rmtree(work, ignore_errors=True)  # the app's cache, temp files and log
    if args.json:
        write_record(record, args.json)


if __name__ == "__main__":
    main()
