"""Test-only server piece for the page's browser tests: a pacer that makes any stream of
POST /api/tts/stream arrive at a chosen RTF.

`Pacer` is ASGI middleware: it holds each body message of /api/tts/stream until
`first_ms + rtf x (audio seconds sent so far)` after the response began, so the player sees a
generator of exactly that speed (as long as the real one is faster), not wall-clock luck. It reads
both bodies of the route, raw and framed (docs/PROTOCOL.md §2.2, §2.3).
"""

from __future__ import annotations

import asyncio
import struct
import time

from studio.delivery.speech_output import FRAME_AUDIO
from tts_core.types import NUM_CHANNELS, SAMPLE_RATE_HZ

STREAM_PATH = "/api/tts/stream"


class AudioCounter:
    """Seconds of audio in a framed or raw float32 stereo body, fed as it is sent."""

    def __init__(self, framed: bool) -> None:
        self.framed = framed
        self.rest = b""
        self.audio_bytes = 0

    def feed(self, data: bytes) -> None:
        if not self.framed:
            self.audio_bytes += len(data)
            return
        buf = self.rest + data
        at = 0
        while len(buf) - at >= 5:
            length, kind = struct.unpack_from("<IB", buf, at)
            if len(buf) - at - 5 < length:
                break
            if kind == FRAME_AUDIO:
                self.audio_bytes += length
            at += 5 + length
        self.rest = buf[at:]

    @property
    def seconds(self) -> float:
        return self.audio_bytes / (4 * NUM_CHANNELS * SAMPLE_RATE_HZ)


class Pacer:
    """ASGI middleware pacing /api/tts/stream bodies to `rtf` (None: untouched). Set `rtf` per test.

    Like the real route, the headers go out with the first audio, `first_ms` after the request;
    audio message k then goes out `rtf x (audio up to k - first audio)` later: a generator of that speed.
    """

    def __init__(self, app, rtf: float | None = None, first_ms: float = 300.0) -> None:
        self.app = app
        self.rtf = rtf
        self.first_ms = first_ms
        self.paced: list[dict] = []  # per paced response: [seconds since the headers, audio seconds] per message

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != STREAM_PATH or self.rtf is None:
            return await self.app(scope, receive, send)
        rtf, began = self.rtf, time.monotonic() + self.first_ms / 1000
        state: dict = {"start": None, "t0": None, "first_s": 0.0, "counter": None, "log": []}
        framed = {"value": False}

        async def receive_body():
            message = await receive()
            if message["type"] == "http.request" and b'"framing"' in message.get("body", b""):
                framed["value"] = True
            return message

        async def paced_send(message):
            if message["type"] == "http.response.start":
                if message["status"] != 200:
                    return await send(message)
                state["start"], state["counter"] = message, AudioCounter(framed["value"])
                return None
            if message["type"] == "http.response.body" and state["start"] is not None:
                counter = state["counter"]
                counter.feed(message.get("body", b""))
                if state["t0"] is None:  # the headers and the first audio, together
                    await asyncio.sleep(max(0.0, began - time.monotonic()))
                    await send(state["start"])
                    state["t0"], state["first_s"] = time.monotonic(), counter.seconds
                else:
                    due = state["t0"] + rtf * (counter.seconds - state["first_s"])
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                state["log"].append([round(time.monotonic() - state["t0"], 3), round(counter.seconds, 3)])
            await send(message)

        self.paced.append(state)
        await self.app(scope, receive_body, paced_send)
