"""Voice agents against the server, with the real clients: first audio and barge-in.

    python -m bench.agents --json bench/results/agents-cpu.json             # starts python app.py (tiny)
    python -m tts_core make-random-checkpoint /tmp/ckpt                      # on the GPU machine, then:
    python -m bench.agents --lm /tmp/ckpt/lm --codec /tmp/ckpt/codec --sessions 64 --machine h200 \
        --json bench/results/agents-h200.json                                # 64 agents, full-size weights
    python -m bench.agents --url http://HOST:PORT ...                        # a server already running

Measured, each `--repeats` times (medians and min-max in the record; nothing asserts a timing):
- `engine_ttfp_s`: a whole sentence sent at once on /tts/websocket, to its first audio: the engine's
  time to first audio plus the socket's.
- `after_clause_s`: the same sentence pushed a word at a time at `--words-per-s` (as Pipecat's
  token mode sends it): first audio after the message that completed the first clause.
- `pipecat_openai_first_audio_s` / `_total_s`: Pipecat's OpenAITTSService on /v1/audio/speech, from
  its TTSStartedFrame to its first audio frame and to its TTSStoppedFrame.
- `barge_in`: a long utterance cancelled after its first audio: audio of that context received after
  the cancel was sent (messages and seconds: what was already on the wire), and whether the slot was
  free (`/health` active streams back to 0) when the next context's first audio came.
- `sessions`: `--sessions` sockets at once, each pushing a paragraph at `--words-per-s`: per context,
  first audio after its first clause, and its audio lead (received audio seconds minus the wall time
  since its first audio, at its lowest; below 0 a real-time listener would have heard a gap).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import websockets

SENTENCE = "Hello there, how are you today? I am fine."
PARAGRAPH = ("Thanks for calling, I can help with that. Your order left our warehouse this morning, "
             "and it should arrive on Thursday. Is there anything else you would like to know today?")
FORMAT = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}
ROOT = Path(__file__).resolve().parents[2]


def _request(context_id: str, transcript: str, more: bool) -> str:
    return json.dumps({"model_id": "sonic-3", "voice": {"mode": "id", "id": "alloy"}, "output_format": FORMAT,
                       "context_id": context_id, "transcript": transcript, "continue": more, "add_timestamps": True})


def _figure(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4), "max": round(max(values), 4),
            "runs": len(values)} if values else {"runs": 0}


def _tokens(text: str) -> list[str]:
    words = text.split(" ")
    return [words[0]] + [" " + w for w in words[1:]]


async def whole_sentence(url: str, context_id: str) -> float:
    async with websockets.connect(url) as ws:
        started = time.monotonic()
        await ws.send(_request(context_id, SENTENCE, False))
        first = None
        while True:
            message = json.loads(await ws.recv())
            if message["type"] == "chunk" and first is None:
                first = time.monotonic() - started
            if message["type"] in ("done", "error"):
                return first if first is not None else float("nan")


async def paced_context(ws, context_id: str, text: str, words_per_s: float, out: dict) -> None:
    """Push `text` a word at a time; `out` gets the time the first clause was complete."""
    for token in _tokens(text):
        await ws.send(_request(context_id, token, True))
        if "clause_at" not in out and token.rstrip()[-1:] in ",.?!":
            out["clause_at"] = time.monotonic()
        await asyncio.sleep(1 / words_per_s)
    await ws.send(_request(context_id, "", False))


async def paced_sessions(url: str, count: int, text: str, words_per_s: float) -> list[dict]:
    """`count` sockets at once, each speaking `text` pushed at `words_per_s`."""

    async def one(index: int) -> dict:
        out: dict = {}
        async with websockets.connect(url, max_size=None) as ws:
            sender = asyncio.create_task(paced_context(ws, f"s{index}", text, words_per_s, out))
            first, audio_s, lead = None, 0.0, float("inf")
            while True:
                message = json.loads(await ws.recv())
                now = time.monotonic()
                if message["type"] == "chunk":
                    if first is None:
                        first = now
                    lead = min(lead, audio_s - (now - first))  # what a listener had left to play
                    audio_s += len(base64.b64decode(message["data"])) / 2 / FORMAT["sample_rate"]
                elif message["type"] in ("done", "error"):
                    break
            await sender
        return {"after_clause_s": (first - out["clause_at"]) if first else None, "min_lead_s": lead,
                "audio_s": audio_s}

    return await asyncio.gather(*(one(i) for i in range(count)))


async def barge_in(url: str, health: str) -> dict:
    async with websockets.connect(url, max_size=None) as ws:
        await ws.send(_request("long", PARAGRAPH, False))
        while json.loads(await ws.recv())["type"] != "chunk":
            pass
        cancelled = time.monotonic()
        await ws.send(json.dumps({"context_id": "long", "cancel": True}))
        await ws.send(_request("next", "Okay.", False))
        late, late_s, next_first, slot_free = 0, 0.0, None, None
        async with httpx.AsyncClient() as client:
            while True:
                message = json.loads(await ws.recv())
                if message["context_id"] == "long" and message["type"] == "chunk":
                    late += 1
                    late_s = time.monotonic() - cancelled
                if message["context_id"] == "next" and message["type"] == "chunk" and next_first is None:
                    next_first = time.monotonic() - cancelled
                    slot_free = (await client.get(health)).json()["active_streams"] <= 1  # only "next" runs
                if message["context_id"] == "next" and message["type"] == "done":
                    break
    return {"late_audio_messages": late, "late_audio_s": round(late_s, 4), "next_first_audio_s": next_first,
            "slot_free": slot_free}


async def pipecat_openai(base_url: str, key: str) -> tuple[float, float]:
    from pipecat.frames.frames import TTSAudioRawFrame, TTSSpeakFrame, TTSStartedFrame, TTSStoppedFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.processors.frame_processor import FrameProcessor
    from pipecat.services.openai.tts import OpenAITTSService
    from pipecat.tests.utils import run_test

    times: dict[str, float] = {}

    class Clock(FrameProcessor):
        async def process_frame(self, frame, direction):
            await super().process_frame(frame, direction)
            name = {TTSStartedFrame: "start", TTSAudioRawFrame: "audio", TTSStoppedFrame: "stop"}.get(type(frame))
            if name and name not in times:
                times[name] = time.monotonic()
            await self.push_frame(frame, direction)

    tts = OpenAITTSService(api_key=key, base_url=base_url, voice="alloy", sample_rate=24000)
    await run_test(Pipeline([tts, Clock()]), frames_to_send=[TTSSpeakFrame(SENTENCE)])
    return times["audio"] - times["start"], times["stop"] - times["start"]


def start_server(key: str, lm: str | None, codec: str | None):
    """`python app.py` as the tests start it: the tiny checkpoints unless `lm` / `codec` are given."""
    import socket
    import subprocess

    data = Path(os.environ.get("MOSS_TTS_PARITY_DIR", ROOT.parent / "shared" / "moss_tts_nano_data"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PORT": str(port), "MOSS_TTS_API_KEY": key, "HF_HUB_OFFLINE": "1",
           "MOSS_TTS_CACHE_DIR": tempfile.mkdtemp(), "MOSS_TTS_NUM_THREADS": os.environ.get("MOSS_TTS_NUM_THREADS", "1")}
    command = [sys.executable, "app.py", "--no-ui", "--lm", lm or str(data / "parity" / "tiny_lm"),
               "--codec", codec or str(data / "parity" / "tiny_codec"), "--tokenizer",
               str(data / "hf_checkpoint_meta" / "tokenizer.model"), "--voices-dir", str(data / "presets")]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=5).json().get("status") == "ready":
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.terminate()
    raise SystemExit("the server did not become ready")


async def run(args: argparse.Namespace, url: str, key: str) -> dict:
    socket_url = url.replace("http", "ws", 1) + f"/tts/websocket?api_key={key}"
    ttfp, after, pipecat_first, pipecat_total, barge = [], [], [], [], []
    await whole_sentence(socket_url, "warm")
    for repeat in range(args.repeats):  # the sides alternate run by run
        ttfp.append(await whole_sentence(socket_url, f"w{repeat}"))
        paced = await paced_sessions(socket_url, 1, SENTENCE, args.words_per_s)
        after.append(paced[0]["after_clause_s"])
        if not args.no_clients:
            first, total = await pipecat_openai(url + "/v1", key)
            pipecat_first.append(first)
            pipecat_total.append(total)
        barge.append(await barge_in(socket_url, url + "/health"))
    sessions = await paced_sessions(socket_url, args.sessions, PARAGRAPH, args.words_per_s)
    return {
        "engine_ttfp_s": _figure(ttfp), "after_clause_s": _figure(after),
        "after_clause_minus_ttfp_s": round(statistics.median(after) - statistics.median(ttfp), 4),
        "pipecat_openai_first_audio_s": _figure(pipecat_first), "pipecat_openai_total_s": _figure(pipecat_total),
        "barge_in": {"late_audio_messages_max": max(b["late_audio_messages"] for b in barge),
                     "late_audio_s_max": max(b["late_audio_s"] for b in barge),
                     "slot_free_every_run": all(b["slot_free"] for b in barge), "runs": barge},
        "sessions": {"count": args.sessions, "words_per_s": args.words_per_s,
                     "after_clause_s": _figure([s["after_clause_s"] for s in sessions if s["after_clause_s"]]),
                     "min_lead_s": _figure([s["min_lead_s"] for s in sessions]),
                     "ahead_of_real_time": sum(s["min_lead_s"] >= 0 for s in sessions)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server (default: start python app.py on the tiny checkpoints)")
    parser.add_argument("--api-key", default=os.environ.get("MOSS_TTS_API_KEY", "bench-key"))
    parser.add_argument("--lm", help="the LM checkpoint app.py serves (default: the tiny one)")
    parser.add_argument("--codec", help="the codec checkpoint app.py serves (default: the tiny one)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--words-per-s", type=float, default=20.0, help="an LLM's pace")
    parser.add_argument("--no-clients", action="store_true", help="skip the Pipecat client (not installed)")
    parser.add_argument("--machine", default="cpu", help="what ran the server (the record's label)")
    parser.add_argument("--json", help="write the record here")
    args = parser.parse_args(argv)
    process = None
    url = args.url
    if url is None:
        process, url = start_server(args.api_key, args.lm, args.codec)
    load_before = os.getloadavg()
    try:
        figures = asyncio.run(run(args, url.rstrip("/"), args.api_key))
        health = httpx.get(url.rstrip("/") + "/health", timeout=10).json()
    finally:
        if process is not None:
            process.terminate()
            process.wait(30)
    record = {"kind": "agents", "machine": args.machine, "when": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
              "command": "python -m bench.agents " + " ".join(argv if argv is not None else sys.argv[1:]),
              "server": "given" if args.url else "started here (" + ("tiny checkpoints" if args.lm is None
                                                                     else "checkpoints given") + ")",
              "engine": {k: health.get(k) for k in ("device", "dtype", "threads", "max_active_streams", "lm")},
              "load_average": {"before": [round(x, 2) for x in load_before],
                               "after": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()},
              **figures}
    print(json.dumps(record, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
