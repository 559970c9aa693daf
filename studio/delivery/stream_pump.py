"""One synthesis stream in an HTTP response, driven by a thread of its own for its whole life.

The thread starts the stream (`start()`: the request's checks and voice, which may encode a clip,
then `Synthesizer.submit`), reads its chunks, runs the response's writer on each (stretch,
resampling, the format's encoder, framing) and hands the bytes to the event loop; the event loop
never blocks on the engine. Threads come from `pump_threads.PUMP_THREADS`.

Hand-over: every pump of an event loop posts into that loop's `_Mailbox`, which wakes the loop once
for whatever the pumps posted meanwhile (not once per chunk: at hundreds of listeners the loop
would spend itself on wake-ups), and a reader that is behind takes every output waiting for it in
one write.

Life cycle: `StreamPump(start, writer=...)` starts the thread, which reads the first chunk at once
and, given the response's writer (made in the thread from the started stream), writes it before
handing it over, so the first bytes need no second trip between the loop and the thread; `await
first()` returns the first chunk (or raises the stream's error, the writer's included, before any
byte is sent); `async for data in output()` yields what the writer made, then its `finish()`;
`await close()` cancels the stream and waits until the thread has closed the writer. Only the
thread touches the writer. Without `writer`, the thread waits after the first chunk until
`start(writer)`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator

import anyio

from tts_core.engine.stream import Stream
from tts_core.types import AudioChunk

from .pump_threads import PUMP_THREADS, PumpThreads

# Items the thread posts: (kind, value)
_FIRST, _DATA, _END, _ERROR, _CLOSED = "first", "data", "end", "error", "closed"
# Outputs waiting for the client before the thread stops reading (the rest waits in the engine's
# outbox, as chunks): a slow client costs memory only up to this.
MAX_PENDING = 32

Writer = Callable[[AudioChunk], object]  # may also have finish() and close() (`streaming.Encoder`)


class _Mailbox:
    """What the pump threads post for one event loop, handed over in one loop wake-up per batch."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = weakref.ref(loop)  # (the mailboxes are kept per loop: a strong one would keep it)
        self._items: collections.deque[tuple[StreamPump, tuple[str, object]]] = collections.deque()
        self._armed = False  # a hand-over is scheduled and has not started yet

    def post(self, pump: StreamPump, *items: tuple[str, object]) -> None:
        """(Any thread.) `items` arrive together, in one hand-over. Appended before the check: a
        hand-over that starts after it takes them."""
        self._items.extend((pump, item) for item in items)
        if not self._armed:
            self._armed = True
            loop = self._loop()
            with contextlib.suppress(RuntimeError, AttributeError):  # the loop is gone (shutting down): nobody reads
                loop.call_soon_threadsafe(self._hand_over)  # type: ignore[union-attr]

    def _hand_over(self) -> None:
        self._armed = False  # before draining: an item posted from now on schedules the next one
        items = self._items
        while items:
            pump, item = items.popleft()
            pump._arrive(item)


_MAILBOXES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Mailbox] = weakref.WeakKeyDictionary()


def _mailbox(loop: asyncio.AbstractEventLoop) -> _Mailbox:
    box = _MAILBOXES.get(loop)
    if box is None:
        box = _MAILBOXES[loop] = _Mailbox(loop)
    return box


class StreamPump:
    """A stream's chunks, read and written in a thread of its own; see the module docstring."""

    def __init__(self, start: Callable[[], Stream], *, writer: Callable[[Stream], Writer] | None = None,
                 threads: PumpThreads = PUMP_THREADS):
        """`writer(stream)`: the response's writer, made in the thread once the stream started."""
        self._start_stream = start
        self._make_writer = writer
        self.stream: Stream | None = None  # once started (set before `first()` returns)
        self._loop = asyncio.get_running_loop()
        self._mailbox = _mailbox(self._loop)
        self._inbox: collections.deque[tuple[str, object]] = collections.deque()  # (the loop's side)
        self._waiter: asyncio.Future | None = None  # the reader, waiting for the inbox
        self._room = threading.Semaphore(MAX_PENDING)
        self._go = threading.Event()  # set by start() or close()
        self._stopped = threading.Event()
        self._closed = asyncio.Event()
        self._writer: Writer | None = None
        self.samples = 0  # 48 kHz samples read from the engine
        self.writer_s = 0.0  # seconds the writer took (thread CPU time: encoding, stretch, framing)
        threads.run(self._run)

    # ---- the thread ---------------------------------------------------------------------------

    def _post(self, kind: str, value: object = None) -> None:
        self._mailbox.post(self, (kind, value))

    def _post_first(self, chunk: AudioChunk, data: object) -> bool:
        """The first chunk and its bytes, handed over together."""
        if data is None or not len(data):  # type: ignore[arg-type]
            self._post(_FIRST, chunk)
            return True
        if not self._wait_for_room():  # stopped meanwhile: the reader still gets its first chunk
            self._post(_FIRST, chunk)
            return False
        self._mailbox.post(self, (_FIRST, chunk), (_DATA, data))
        return True

    def _wait_for_room(self) -> bool:
        self._room.acquire()  # (`cancel` releases it once, so a stopped pump never waits here)
        return not self._stopped.is_set()

    def _call(self, call: Callable[[], object]) -> object:
        started = time.thread_time()
        data = call()
        self.writer_s += time.thread_time() - started
        return data

    def _hand_out(self, data: object) -> bool:
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
            if chunk is not None and self._make_writer is not None:  # the first bytes go with the first chunk
                stream = self.stream
                writer = self._writer = self._make_writer(stream)
                self.samples += chunk.pcm.shape[1]
                if not self._post_first(chunk, self._call(lambda c=chunk: writer(c))):
                    return
                chunk = None if chunk.is_last else next(chunks, None)
            else:
                self._post(_FIRST, chunk)
                if chunk is None:
                    return
                self._go.wait()
                writer = self._writer
            while chunk is not None and writer is not None and not self._stopped.is_set():
                self.samples += chunk.pcm.shape[1]
                if not self._hand_out(self._call(lambda c=chunk: writer(c))):
                    return
                chunk = None if chunk.is_last else next(chunks, None)
            finish = getattr(writer, "finish", None)
            if writer is not None and not self._stopped.is_set():
                if finish is not None and not self._hand_out(self._call(finish)):
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
            self._post(_CLOSED)

    # ---- the event loop -----------------------------------------------------------------------

    def _arrive(self, item: tuple[str, object]) -> None:
        """(The loop, from the mailbox.) An item for the reader, in the order the thread posted."""
        if item[0] == _CLOSED:
            self._closed.set()
            return
        self._inbox.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _next(self) -> tuple[str, object]:
        while not self._inbox:
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._inbox.popleft()

    @property
    def pending(self) -> int:
        """Outputs handed over and not read yet."""
        return len(self._inbox)

    async def first(self) -> AudioChunk | None:
        """The first chunk (None when the stream ended before it: cancelled while queued)."""
        kind, value = await self._next()
        if kind == _ERROR:
            raise value  # type: ignore[misc]
        assert kind == _FIRST
        return value  # type: ignore[return-value]

    def start(self, writer: Writer | None) -> None:
        """Let the thread write every chunk, the first included, with `writer` (then its finish()).
        A no-op when the pump was given its writer when it was made."""
        if self._make_writer is None:
            self._writer = writer
        self._go.set()

    async def output(self) -> AsyncIterator:
        """What the writer made, in pieces as it came; ends after the writer's finish(). Outputs
        that waited for the reader come out joined, in one piece (bytes joined, lists concatenated)."""
        inbox = self._inbox
        while True:
            kind, value = await self._next()
            if kind == _DATA:
                self._room.release()
                if inbox and inbox[0][0] == _DATA:  # the reader is behind: one write for all that waits
                    parts = [value]
                    while inbox and inbox[0][0] == _DATA:
                        parts.append(inbox.popleft()[1])
                        self._room.release()
                    # bytes join into one write; a writer's lists of messages (agent sockets) concatenate
                    value = [m for part in parts for m in part] if isinstance(value, list) else b"".join(parts)  # type: ignore[arg-type]
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
