"""Test-only server piece for the page's browser tests: a pacer that makes any stream of
POST /api/tts/stream arrive at a chosen RTF.

`Pacer` is ASGI middleware: it holds each body message of /api/tts/stream until
`first_ms + rtf x (audio seconds sent so far)` after the response began, so the player sees a
generator of exactly that speed (as long as the real one is faster), not wall-clock luck. It reads
the route's event frames (docs/PROTOCOL.md §2.3) in either transport.
"""

from __future__ import annotations

import asyncio
import json
import struct
import time

from studio.delivery.speech_output import FRAME_AUDIO
from tts_core.types import NUM_CHANNELS, SAMPLE_RATE_HZ

STREAM_PATH = "/api/tts/stream"


class AudioCounter:
    """Seconds of audio in the route's event frames, fed as they are sent: 16-bit PCM by its bytes,
    Opus by the granule positions of its Ogg pages (RFC 7845: less the OpusHead's pre-skip)."""

    def __init__(self, transport: str) -> None:
        self.transport = transport
        self.rest = b""
        self.ogg = b""
        self.samples = 0
        self.pre_skip: int | None = None

    def feed(self, data: bytes) -> None:
        buf = self.rest + data
        at = 0
        while len(buf) - at >= 5:
            length, kind = struct.unpack_from("<IB", buf, at)
            if len(buf) - at - 5 < length:
                break
            if kind == FRAME_AUDIO:
                self._audio(buf[at + 5: at + 5 + length])
            at += 5 + length
        self.rest = buf[at:]

    def _audio(self, payload: bytes) -> None:
        if self.transport == "s16":
            self.samples += len(payload) // (2 * NUM_CHANNELS)
            return
        buf, at = self.ogg + payload, 0
        while len(buf) - at >= 27:
            segments = buf[at + 26]
            if len(buf) - at < 27 + segments:
                break
            body = at + 27 + segments
            end = body + sum(buf[at + 27: body])
            if len(buf) < end:
                break
            if self.pre_skip is None:  # the first page holds the OpusHead
                self.pre_skip = struct.unpack_from("<H", buf, body + 10)[0]
            granule = struct.unpack_from("<q", buf, at + 6)[0]
            if granule > 0:
                self.samples = max(self.samples, granule - self.pre_skip)
            at = end
        self.ogg = buf[at:]

    @property
    def seconds(self) -> float:
        return self.samples / SAMPLE_RATE_HZ


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
        body = bytearray()

        async def receive_body():
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
            return message

        async def paced_send(message):
            if message["type"] == "http.response.start":
                if message["status"] != 200:
                    return await send(message)
                transport = json.loads(bytes(body) or b"{}").get("transport") or "opus"
                state["start"], state["counter"] = message, AudioCounter(transport)
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
