"""One synthesis stream in an HTTP response, driven by a thread of its own for its whole life.

The thread starts the stream (`start()`: the request's checks and voice, which may encode a clip,
then `Synthesizer.submit`), reads its chunks, runs the response's writer on each (stretch,
resampling, the format's encoder, framing) and hands the bytes to the event loop through an asyncio
queue; the event loop never blocks on the engine. Threads come from `pump_threads.PUMP_THREADS`.

Life cycle: `StreamPump(start)` starts the thread, which reads the first chunk at once; `await
first()` returns it (or raises the stream's error, before any byte is sent); `start(writer)` lets
the thread go on; `async for data in output()` yields what the writer made, then its `finish()`;
`await close()` cancels the stream and waits until the thread has closed the writer. Only the
thread touches the writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator

import anyio

from tts_core.engine.stream import Stream
from tts_core.types import AudioChunk

from .pump_threads import PUMP_THREADS, PumpThreads

# Items the thread posts: (kind, value)
_FIRST, _DATA, _END, _ERROR = "first", "data", "end", "error"
# Outputs waiting for the client before the thread stops reading (the rest waits in the engine's
# outbox, as chunks): a slow client costs memory only up to this.
MAX_PENDING = 32


class StreamPump:
    """A stream's chunks, read and written in a thread of its own; see the module docstring."""

    def __init__(self, start: Callable[[], Stream], *, threads: PumpThreads = PUMP_THREADS):
        self._start_stream = start
        self.stream: Stream | None = None  # once started (set before `first()` returns)
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
        self._room.acquire()  # (`cancel` releases it once, so a stopped pump never waits here)
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
        chunks: Iterator[AudioChunk] = iter(())
        try:
            self.stream = chunks = self._start_stream()
            if self._stopped.is_set():  # closed while it started
                self.stream.cancel()
            chunk = next(chunks, None)
            self._post(_FIRST, chunk)
            if chunk is None:
                return
            self._go.wait()
            writer = self._writer
            while chunk is not None and writer is not None and not self._stopped.is_set():
                self.samples += chunk.pcm.shape[1]
                if not self._write(lambda c=chunk: writer(c)):
                    return
                chunk = None if chunk.is_last else next(chunks, None)
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
            if self.stream is not None:
                self.stream.close()  # cancels it unless it ended
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

    def cancel(self) -> None:
        """Stop the stream now (any thread); the pump thread then ends."""
        self._stopped.set()
        if self.stream is not None:
            self.stream.cancel()
        self._room.release()  # wakes a thread waiting for the client to read
        self._go.set()

    async def close(self) -> None:
        """Stop the thread and wait until the writer and the stream are closed (even while the
        caller is being cancelled)."""
        self.cancel()
        with anyio.CancelScope(shield=True):
            await self._closed.wait()
