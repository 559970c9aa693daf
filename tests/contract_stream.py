"""Test-only server pieces for the page's browser tests: a stand-in for the framed stream of
CONTRACTS A.3 (until the real route has it) and a pacer that makes any stream arrive at a chosen RTF.

`framed_stream_router` answers POST /api/tts/stream with the contract's extras on top of today's
route: the `X-Estimated-Duration` header and `"framing": "events"` (PCM frames plus speech.segment
and speech.done events); `speed` other than 1.0 is refused here. `install_contract_stream` puts it
in front of the real route only while the real `StreamBody` lacks `framing`: once the API's
implementation lands, the tests run against it unchanged.

`Pacer` is ASGI middleware: it holds each body message of /api/tts/stream until
`first_ms + rtf x (audio seconds sent so far)` after the response began, so the player sees a
generator of exactly that speed (as long as the real one is faster), not wall-clock luck.
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
import uuid
from typing import Literal

import numpy as np
from fastapi import APIRouter, FastAPI, Request
from starlette.responses import StreamingResponse

from tts_core.errors import InvalidRequestError
from tts_core.types import NUM_CHANNELS, SAMPLE_RATE_HZ, AudioChunk
from tts_core.web.requests import STREAM, StreamBody, prepare, stream_fields
from tts_core.web.streaming import close_stream, open_stream

KIND_PCM, KIND_EVENT = 0, 1
STREAM_PATH = "/api/tts/stream"


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack("<IB", len(payload), kind) + payload


def event_frame(event: dict) -> bytes:
    return frame(KIND_EVENT, json.dumps(event, ensure_ascii=False).encode())


class ContractBody(StreamBody):
    framing: Literal["events"] | None = None
    speed: float | None = None


class Timeline:
    """PCM frames and segment events in output seconds (speed 1.0): a segment's event goes out once
    its speech is over (a pause, the next segment, or the end); pauses count as time only."""

    def __init__(self) -> None:
        self.cursor = 0.0
        self.current: dict | None = None

    def encode(self, chunk: AudioChunk) -> bytes:
        out = b""
        if self.current is not None and (chunk.is_pause or chunk.segment != self.current["index"]):
            out += self._close()
        n = chunk.pcm.shape[1]
        if n and not chunk.is_pause and self.current is None:
            self.current = {"type": "speech.segment", "index": chunk.segment, "text": chunk.segment_text,
                            "start": round(self.cursor, 3)}
        self.cursor += n / SAMPLE_RATE_HZ
        if self.current is not None:
            self.current["end"] = round(self.cursor, 3)
        if n:
            out += frame(KIND_PCM, np.ascontiguousarray(chunk.pcm.T, dtype="<f4").tobytes())
        return out

    def _close(self) -> bytes:
        event, self.current = self.current, None
        return event_frame(event)

    def finish(self, request_id: str) -> bytes:
        tail = self._close() if self.current is not None else b""
        return tail + event_frame({"type": "speech.done", "audio_s": round(self.cursor, 3), "request_id": request_id})


def framed_stream_router(service, settings, uploads) -> APIRouter:
    router = APIRouter()

    @router.post(STREAM_PATH)
    async def stream(body: ContractBody, http_request: Request) -> StreamingResponse:
        if body.speed not in (None, 1.0):
            raise InvalidRequestError("the test stand-in plays speed 1.0 only", param="speed")
        synth = service.get()
        plain = StreamBody(**body.model_dump(exclude={"framing", "speed"}))
        prepared = await prepare(stream_fields(plain), STREAM, synth=synth, settings=settings, uploads=uploads)
        gen, first = await open_stream(synth, prepared.request, http_request)
        request_id = uuid.uuid4().hex[:16]
        store = getattr(http_request.app.state, "results", None)
        timeline = Timeline()

        def write(chunk):
            if store is not None and chunk.pcm.shape[1]:
                store.add(request_id, chunk.pcm, last=chunk.is_last)
            if body.framing:
                return timeline.encode(chunk)
            return np.ascontiguousarray(chunk.pcm.T, dtype="<f4").tobytes()

        async def chunks():
            try:
                if first is not None:
                    gen.start(write)
                    async for data in gen.output():
                        yield data
                if body.framing:
                    yield timeline.finish(request_id)
            finally:
                await close_stream(gen)

        estimate = first.estimated_audio_s if first is not None else None
        headers = {"X-Sample-Rate": str(SAMPLE_RATE_HZ), "X-Channels": str(NUM_CHANNELS), "X-Sample-Format": "f32le",
                   "X-Request-Id": request_id, "Cache-Control": "no-store"}
        if estimate:
            headers["X-Estimated-Duration"] = f"{estimate:.3f}"
        return StreamingResponse(chunks(), media_type="application/octet-stream", headers=headers)

    return router


def real_route_has_framing() -> bool:
    return "framing" in StreamBody.model_fields


def install_contract_stream(app: FastAPI, service, settings) -> bool:
    """Put the stand-in in front of the real stream route when that lacks framing; True if it did."""
    if real_route_has_framing():
        return False
    router = framed_stream_router(service, settings, app.state.uploads)
    for route in reversed(router.routes):
        app.router.routes.insert(0, route)
    return True


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
            if kind == KIND_PCM:
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
