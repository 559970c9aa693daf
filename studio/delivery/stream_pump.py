"""One synthesis stream in an HTTP response, driven by a thread of its own (for its whole life).

The engine hands a stream's chunks to a blocking iterator (its outbox). Reading it with one
`anyio.to_thread.run_sync(next, ...)` per chunk parked a thread of anyio's shared pool (40 by
default) per stream and per chunk, and ran the format's encoder in that same pool: with more
streams than pool threads every listener waited for a free thread, and the event loop paid a
hand-over per chunk. A `StreamPump` instead owns one thread that reads the chunks, runs the
response's writer on each (stretch, resampling, the format's encoder: PyAV releases the
interpreter lock while it encodes, so the pumps of many streams encode in parallel, off the event
loop and off the engine's threads), and hands the bytes to the event loop through an asyncio queue.

The thread comes from `pump_threads.PUMP_THREADS`, a pool that grows to the most streams at once
and reuses its threads (starting a thread per stream made the event loop wait for each new one).

Life cycle: `StreamPump(chunks, cancel)` starts the pump on its thread, which reads the first chunk at once;
`await first()` returns it (or raises the stream's error, before any byte is sent);
`start(writer)` lets the thread go on; `async for data in output()` yields what the writer made,
then its `finish()`; `await close()` stops the thread (setting `cancel`, which ends a wait for the
engine's next chunk within its poll) and waits until it has closed the writer and the chunk
iterator (which cancels the stream in the engine and frees its slot). The thread is the only one
that ever touches the iterator and the writer, so neither is used from two threads at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator

import anyio

from tts_core.cancel import CancelToken
from tts_core.types import AudioChunk

from .pump_threads import PUMP_THREADS, PumpThreads

# Items the thread posts: (kind, value)
_FIRST, _DATA, _END, _ERROR = "first", "data", "end", "error"
# Outputs waiting for the client before the thread stops reading (the rest waits in the engine's
# outbox, as chunks): a slow client costs memory only up to this.
MAX_PENDING = 32
_WAIT_S = 0.05  # how often a waiting thread checks whether it was stopped


class StreamPump:
    """A stream's chunks, read and written in a thread of its own; see the module docstring."""

    def __init__(self, chunks: Iterator[AudioChunk], cancel: CancelToken | threading.Event, *,
                 threads: PumpThreads = PUMP_THREADS):
        self._chunks = chunks
        self._cancel = cancel
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[tuple[str, object]] = asyncio.Queue()
        self._room = threading.Semaphore(MAX_PENDING)
        self._go = threading.Event()  # set by start() or close()
        self._stopped = threading.Event()
        self._closed = asyncio.Event()
        self._writer: Callable[[AudioChunk], object] | None = None
        self.samples = 0  # 48 kHz samples read from the engine
        self.writer_s = 0.0  # seconds the writer took (thread CPU time: encoding, stretch, framing)
        threads.run(self._run)

    # ---- the thread ---------------------------------------------------------------------------

    def _post(self, kind: str, value: object = None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is gone (server shutting down): nobody reads
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (kind, value))

    def _wait_for_room(self) -> bool:
        while not self._room.acquire(timeout=_WAIT_S):
            if self._stopped.is_set():
                return False
        return not self._stopped.is_set()

    def _write(self, call: Callable[[], object]) -> bool:
        started = time.thread_time()
        data = call()
        self.writer_s += time.thread_time() - started
        if data is None or not len(data):  # type: ignore[arg-type]
            return True
        if not self._wait_for_room():
            return False
        self._post(_DATA, data)
        return True

    def _run(self) -> None:
        writer = None
        try:
            chunk = next(self._chunks, None)
            self._post(_FIRST, chunk)
            if chunk is None:
                return
            self._go.wait()
            writer = self._writer
            while chunk is not None and writer is not None and not self._stopped.is_set():
                self.samples += chunk.pcm.shape[1]
                if not self._write(lambda c=chunk: writer(c)):
                    return
                chunk = None if chunk.is_last else next(self._chunks, None)
            finish = getattr(writer, "finish", None)
            if writer is not None and not self._stopped.is_set():
                if finish is not None and not self._write(finish):
                    return
                self._post(_END)
        except BaseException as exc:  # handed to the event loop, raised there
            self._post(_ERROR, exc)
        finally:
            close = getattr(writer, "close", None)
            if close is not None:  # releases an encoder cut short; a no-op after finish()
                with contextlib.suppress(Exception):
                    close()
            with contextlib.suppress(Exception):
                self._chunks.close()  # type: ignore[attr-defined]
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._closed.set)

    # ---- the event loop -----------------------------------------------------------------------

    async def first(self) -> AudioChunk | None:
        """The first chunk (None when the stream ended before it: cancelled while queued)."""
        kind, value = await self._queue.get()
        if kind == _ERROR:
            raise value  # type: ignore[misc]
        assert kind == _FIRST
        return value  # type: ignore[return-value]

    def start(self, writer: Callable[[AudioChunk], object]) -> None:
        """Let the thread write every chunk, the first included, with `writer` (then its finish())."""
        self._writer = writer
        self._go.set()

    async def output(self) -> AsyncIterator:
        """What the writer made, chunk by chunk; ends after the writer's finish()."""
        while True:
            kind, value = await self._queue.get()
            if kind == _DATA:
                self._room.release()
                yield value
            elif kind == _END:
                return
            elif kind == _ERROR:
                raise value  # type: ignore[misc]

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def close(self) -> None:
        """Stop the thread and wait until the writer and the stream are closed (even while the
        caller is being cancelled)."""
        self._stopped.set()
        self._cancel.set()
        self._go.set()
        with anyio.CancelScope(shield=True):
            await self._closed.wait()
