"""Synthesis streams in HTTP responses: start one cancellably, turn its chunks into bytes, close it.

A request may sit in the engine's queue before its first chunk; `next()` on the stream then
blocks in a worker thread where the route cannot interrupt it. `open_stream` gives the stream a
cancel event and a watcher sets it as soon as the client disconnects, so a client that gives up
while queued frees its place at once instead of when its turn comes.

Once the first chunk is there, `ClosingStreamingResponse` sends the rest through `chunk_bytes`,
the one generator both streaming routes use (raw float32 for the player, or a writer of
`web/speech_output.py`: speed, formats, SSE, event frames). Whatever ends the response (last chunk,
error, client gone, even before the body was iterated), the synthesis stream is closed, which
cancels it in the engine and frees its slot.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator

import anyio
import numpy as np
from starlette.requests import Request
from starlette.responses import StreamingResponse

from ..errors import TTSError
from ..types import NUM_CHANNELS, SAMPLE_RATE_HZ, AudioChunk, SynthesisRequest

logger = logging.getLogger(__name__)

_POLL_S = 0.1
# A chunk's bytes. A writer object may also have `finish() -> bytes` (the tail, after the last
# chunk), `close()` (release it when the stream is cut short) and `blocking = True` (call it in a
# worker thread: it stretches or encodes).
Encoder = Callable[[AudioChunk], bytes]


async def open_stream(synth, request: SynthesisRequest,
                      http_request: Request | None) -> tuple[Iterator[AudioChunk], AudioChunk | None]:
    """Start `request` and wait for its first chunk (errors surface here, before any byte is sent).

    Returns the chunk iterator and the first chunk (None when the client left before it came).
    """
    cancel = threading.Event()
    gen = synth.stream(request, cancel=cancel)
    outcome: dict = {}

    async def watch() -> None:
        while not cancel.is_set():
            if http_request is not None and await http_request.is_disconnected():
                cancel.set()
                return
            await anyio.sleep(_POLL_S)

    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        try:
            outcome["first"] = await anyio.to_thread.run_sync(next, gen, None)
        except BaseException as exc:  # re-raised below, outside the task group (no ExceptionGroup)
            outcome["error"] = exc
        finally:
            group.cancel_scope.cancel()
    if "error" in outcome:
        gen.close()
        raise outcome["error"]
    return gen, outcome["first"]


async def next_chunk(chunks: Iterator[AudioChunk]) -> AudioChunk | None:
    # Not abandoned on cancellation: the thread finishes its next() before the caller may close().
    return await anyio.to_thread.run_sync(next, chunks, None)


async def close_stream(chunks: Iterator[AudioChunk]) -> None:
    """Close the synthesis stream (cancels it in the engine), even while our task is being cancelled."""
    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(chunks.close)


def f32_bytes(chunk: AudioChunk) -> bytes:
    """[2, n] float32 → interleaved little-endian float32 bytes (L0 R0 L1 R1 …)."""
    return np.ascontiguousarray(chunk.pcm.T, dtype="<f4").tobytes()  # [n, 2]


async def chunk_bytes(chunks: Iterator[AudioChunk], first: AudioChunk | None, encode: Encoder, *,
                      request_id: str, header: bytes = b"") -> AsyncIterator[bytes]:
    """`header`, then every chunk through `encode`; on the way out (end, error, or client
    disconnect) close the synthesis stream and log the outcome.

    Starlette cancels this iterator when the client disconnects. The pending `next()` runs in a worker
    thread that cannot be interrupted, so cancellation takes effect when it returns (one chunk at most).
    """
    started = time.monotonic()
    num_samples, outcome = 0, "cancelled"
    blocking, finish = getattr(encode, "blocking", False), getattr(encode, "finish", None)
    try:
        if header:
            yield header
        chunk = first
        while chunk is not None:
            num_samples += chunk.pcm.shape[1]
            data = await anyio.to_thread.run_sync(encode, chunk) if blocking else encode(chunk)
            if data:
                yield data
            chunk = None if chunk.is_last else await next_chunk(chunks)
        if finish is not None and first is not None:
            data = await anyio.to_thread.run_sync(finish) if blocking else finish()
            if data:
                yield data
        outcome = "done"
    except Exception as exc:  # headers are gone: abort the connection so the client sees a broken stream
        outcome = "failed"
        logger.error("stream %s failed mid-way: %s", request_id, exc, exc_info=not isinstance(exc, TTSError))
        raise
    finally:
        if hasattr(encode, "close"):  # releases an encoder cut short; a no-op after finish()
            encode.close()
        await close_stream(chunks)
        logger.info("stream %s %s: %.2f s of audio in %.2f s",
                    request_id, outcome, num_samples / SAMPLE_RATE_HZ, time.monotonic() - started)


class ClosingStreamingResponse(StreamingResponse):
    """Streams a synthesis through `chunk_bytes` and always closes it.

    Starlette cancels the sending task on disconnect; if that happens outside the body iterator (in
    `send`), or before the body was ever iterated, the stream would otherwise stay open until
    garbage collection, holding its engine slot.
    """

    def __init__(self, chunks: Iterator[AudioChunk], first: AudioChunk | None, encode: Encoder, *,
                 request_id: str, media_type: str, headers: dict[str, str], header: bytes = b""):
        super().__init__(chunk_bytes(chunks, first, encode, request_id=request_id, header=header),
                         media_type=media_type, headers=headers)
        self._chunks = chunks

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]
            await close_stream(self._chunks)  # a no-op when the body iterator already closed it


async def collect(chunks: Iterator[AudioChunk], first: AudioChunk | None, request: Request) -> np.ndarray | None:
    """All audio as float32 [2, n]; None when the client disconnected (the synthesis is cancelled)."""
    if first is None:  # the client left before the first chunk (open_stream cancelled it)
        await close_stream(chunks)
        return None
    parts: list[np.ndarray] = []
    chunk: AudioChunk | None = first
    try:
        while chunk is not None:
            parts.append(chunk.pcm)
            if chunk.is_last:
                break
            if await request.is_disconnected():
                return None
            chunk = await next_chunk(chunks)
    finally:
        await close_stream(chunks)
    return np.concatenate(parts, axis=1) if parts else np.zeros((NUM_CHANNELS, 0), np.float32)
