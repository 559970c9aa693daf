"""Synthesis streams in HTTP responses: start one cancellably, turn its chunks into bytes, close it.

Each stream is started, read and written by a thread of its own (`stream_pump.py`), never by a
shared worker pool. A request may sit in the engine's queue before its first chunk; `open_stream`
watches the client meanwhile and cancels the stream as soon as it disconnects, so a client that
gives up while queued frees its place at once instead of when its turn comes.

Once the first chunk is there, `ClosingStreamingResponse` sends the rest through `chunk_bytes`,
the one generator both streaming routes use (a writer of `speech_output.py`: speed, formats, SSE,
event frames). Whatever ends the response (last chunk, error, client gone, even before the body
was iterated), the synthesis stream is closed, which cancels it in the engine and frees its slot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import anyio
import numpy as np
from starlette.requests import Request
from starlette.responses import StreamingResponse

from tts_core.engine.stream import Stream
from tts_core.errors import InvalidRequestError, TTSError
from tts_core.types import SAMPLE_RATE_HZ, AudioChunk, SynthesisRequest

from .stream_pump import StreamPump

logger = logging.getLogger(__name__)

# A chunk's bytes, made in the stream's pump thread. A writer object may also have `finish() ->
# bytes` (the tail, after the last chunk) and `close()` (release it when the stream is cut short).
Encoder = Callable[[AudioChunk], bytes]


def submit_watched(synth, request: SynthesisRequest, metrics) -> Stream:
    """`synth.submit(request)`, counted by the app's `metrics` (when given): refused by the checks,
    or watched to its end. Blocking (the voice may encode a clip): run it in a pump's thread."""
    try:
        stream = synth.submit(request)
    except InvalidRequestError:
        if metrics is not None:
            metrics.rejected()
        raise
    if metrics is not None:
        metrics.watch(stream)
    return stream


async def open_stream(synth, request: SynthesisRequest, http_request: Request | None, *,
                      writer: Callable[[Stream], Encoder] | None = None) -> tuple[StreamPump, AudioChunk | None]:
    """Start `request` and wait for its first chunk (errors surface here, before any byte is sent).

    Returns the stream's pump (`stream_pump.py`; `pump.stream` is the `Stream`, whose id is the
    request's everywhere) and the first chunk (None when the client left before it came). Given
    `writer(stream)`, the pump writes the first chunk before handing it over (its bytes are ready
    with it; the writer's errors surface here too); without, the caller must `start` the pump with
    a writer. Either way the caller sends the response or `close`s the pump. The app's metrics
    watch the stream.
    """
    metrics = getattr(getattr(getattr(http_request, "app", None), "state", None), "metrics", None)
    pump = StreamPump(lambda: submit_watched(synth, request, metrics), writer=writer)

    async def watch() -> None:
        if http_request is None:
            return
        while (await http_request.receive())["type"] != "http.disconnect":  # (the body is read already)
            pass
        pump.cancel()

    outcome: dict = {}
    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        try:
            outcome["first"] = await pump.first()
        except BaseException as exc:  # re-raised below, outside the task group (no ExceptionGroup)
            outcome["error"] = exc
        finally:
            group.cancel_scope.cancel()
    if "error" in outcome:
        await pump.close()
        raise outcome["error"]
    return pump, outcome["first"]


_STREAM_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",  # no MIME sniffing delay before the first bytes
    "X-Accel-Buffering": "no",  # reverse proxies (Spaces, nginx) must not buffer the stream
}


async def respond(synth, request: SynthesisRequest, http_request: Request, *,
                  writer: Callable[[Stream], Encoder], media_type: str, headers: dict[str, str], label: str,
                  what: str, speed: float = 1.0) -> StreamingResponse:
    """The one way synthesis streams over HTTP: start `request`, wait for its first chunk (errors
    raise here, before any byte, as the route's JSON errors), then send every chunk through
    `writer(stream)` as it comes. Adds the stream's id (`X-Request-Id`), its likely length in output
    seconds (`X-Estimated-Duration`) and no-buffering headers to the route's `headers`; logs `what`;
    counts the delivery in `/metrics` under `label`."""
    started = time.monotonic()
    pump, first = await open_stream(synth, request, http_request, writer=writer)
    try:  # until the response owns the pump, an error here must close it (it holds a slot)
        stream = pump.stream
        headers = {**headers, "X-Request-Id": stream.id, **_STREAM_HEADERS}
        if first is not None and stream.estimated_audio_s is not None:
            headers["X-Estimated-Duration"] = f"{stream.estimated_audio_s / speed:.2f}"
        logger.info("stream %s: %s", stream.id, what)
        metrics = getattr(http_request.app.state, "metrics", None)

        def delivered(sent: Delivery) -> None:
            if metrics is not None:
                metrics.observe_delivery(label, audio_s=sent.audio_s / speed, bytes_out=sent.bytes_out,
                                         encode_s=sent.writer_s, elapsed_s=sent.elapsed_s,
                                         finished=sent.outcome == "done")

        return ClosingStreamingResponse(pump, first, None, request_id=stream.id, media_type=media_type,
                                        headers=headers, delivered=delivered, started=started)
    except BaseException:
        await pump.close()
        raise


def f32_bytes(chunk: AudioChunk) -> bytes:
    """[2, n] float32 → interleaved little-endian float32 bytes (L0 R0 L1 R1 …)."""
    return np.ascontiguousarray(chunk.pcm.T, dtype="<f4").tobytes()  # [n, 2]


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one streamed response sent, for `/metrics` (`AppMetrics.observe_delivery`)."""

    outcome: str  # done, cancelled, failed
    audio_s: float  # engine audio read (48 kHz seconds)
    bytes_out: int
    writer_s: float  # thread CPU seconds spent writing it (stretch, encoding, framing)
    elapsed_s: float  # from the stream's start to the last byte


async def chunk_bytes(pump: StreamPump, first: AudioChunk | None, encode: Encoder | None, *, request_id: str,
                      header: bytes = b"", delivered: Callable[[Delivery], None] | None = None,
                      started: float | None = None) -> AsyncIterator[bytes]:
    """`header`, then every chunk through `encode` (in the pump's thread; None: the writer the pump
    was made with); on the way out (end, error, or client disconnect) close the synthesis stream
    and log the outcome.

    Starlette cancels this iterator when the client disconnects; closing the pump stops its thread
    within one chunk and cancels the stream in the engine.
    """
    started = time.monotonic() if started is None else started
    outcome, bytes_out = "cancelled", 0
    try:
        if header:
            bytes_out += len(header)
            yield header
        if first is not None:
            pump.start(encode)
            async for data in pump.output():
                bytes_out += len(data)
                yield data
        outcome = "done"
    except Exception as exc:  # headers are gone: abort the connection so the client sees a broken stream
        outcome = "failed"
        logger.error("stream %s failed mid-way: %s", request_id, exc, exc_info=not isinstance(exc, TTSError))
        raise
    finally:
        await pump.close()
        elapsed = time.monotonic() - started
        if delivered is not None:
            delivered(Delivery(outcome, pump.samples / SAMPLE_RATE_HZ, bytes_out, pump.writer_s, elapsed))
        logger.info("stream %s %s: %.2f s of audio in %.2f s", request_id, outcome, pump.samples / SAMPLE_RATE_HZ,
                    elapsed)


class ClosingStreamingResponse(StreamingResponse):
    """Streams a synthesis through `chunk_bytes` and always closes it.

    Starlette cancels the sending task on disconnect; if that happens outside the body iterator (in
    `send`), or before the body was ever iterated, the stream would otherwise stay open until
    garbage collection, holding its engine slot.
    """

    def __init__(self, pump: StreamPump, first: AudioChunk | None, encode: Encoder | None, *, request_id: str,
                 media_type: str, headers: dict[str, str], header: bytes = b"",
                 delivered: Callable[[Delivery], None] | None = None, started: float | None = None):
        super().__init__(chunk_bytes(pump, first, encode, request_id=request_id, header=header, delivered=delivered,
                                     started=started),
                         media_type=media_type, headers=headers)
        self._pump = pump

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]
            await self._pump.close()  # a no-op when the body iterator already closed it
