"""studio/delivery/stream_pump.py: a stream started, read and written by a thread of its own, handed to
the event loop.

Real chunk iterators (generators with cleanup) behind the `Stream` surface the pump uses (iterate,
`cancel`, `close`) and real encoders (`encoders.StreamEncoder`); no timing is asserted: the paced
source below releases chunks only when the test says so.
"""

from __future__ import annotations

import asyncio
import threading

import anyio
import numpy as np
import pytest
from support.reliability_common import run_coro

from studio.delivery.stream_pump import MAX_PENDING, StreamPump
from tts_core.audio.encoders import StreamEncoder
from tts_core.types import AudioChunk, Timings


def _chunk(seq: int, last: bool, samples: int = 3840) -> AudioChunk:
    pcm = np.full((2, samples), 0.01 * (seq + 1), np.float32)
    return AudioChunk(seq=seq, pcm=pcm, codes=np.zeros((1, 16), np.int64), is_last=last,
                      timings=Timings(first_audio_s=None, elapsed_s=0.0, audio_s=0.0))


class Source:
    """A chunk generator like the engine's: honours `cancel`, records whether it was closed."""

    def __init__(self, count: int, *, fail_at: int | None = None, gate: threading.Semaphore | None = None):
        self.count, self.fail_at, self.gate = count, fail_at, gate
        self.closed = threading.Event()
        self.cancel = threading.Event()
        self.threads: set[str] = set()

    def __iter__(self):
        try:
            for seq in range(self.count):
                self.threads.add(threading.current_thread().name)
                while self.gate is not None and not self.gate.acquire(timeout=0.01):
                    if self.cancel.is_set():
                        return
                if self.cancel.is_set():
                    return
                if seq == self.fail_at:
                    raise RuntimeError("the engine failed")
                yield _chunk(seq, seq == self.count - 1)
        finally:
            self.closed.set()

    def start(self) -> _Started:
        """What the pump calls in its thread: the source, started."""
        self.threads.add(threading.current_thread().name)
        return _Started(self)


class _Started:
    """The source as the pump sees a `Stream`: an iterator with `cancel()` and `close()`."""

    def __init__(self, source: Source):
        self.source = source
        self._chunks = iter(source)

    def __iter__(self):
        return self

    def __next__(self) -> AudioChunk:
        return next(self._chunks)

    def cancel(self) -> None:
        self.source.cancel.set()

    def close(self) -> None:
        self.source.cancel.set()
        self._chunks.close()


class Writer:
    def __init__(self):
        self.closed = False
        self.threads: set[str] = set()

    def __call__(self, chunk: AudioChunk) -> bytes:
        self.threads.add(threading.current_thread().name)
        return bytes([chunk.seq]) * 4

    def finish(self) -> bytes:
        return b"end"

    def close(self) -> None:
        self.closed = True


async def _pump(source: Source) -> StreamPump:
    return StreamPump(source.start)


def test_every_chunk_then_the_tail_in_order_written_in_the_pump_thread():
    async def main():
        source, writer = Source(5), Writer()
        pump = await _pump(source)
        first = await pump.first()
        assert first is not None and first.seq == 0
        pump.start(writer)
        out = [data async for data in pump.output()]
        await pump.close()
        return source, writer, out, pump

    source, writer, out, pump = run_coro(main())
    assert b"".join(out) == b"".join(bytes([i]) * 4 for i in range(5)) + b"end"  # (pieces that waited come joined)
    # one thread read and wrote the whole stream: a pump thread, not the test's (the event loop's)
    assert len(writer.threads) == 1 and writer.threads == source.threads
    assert next(iter(writer.threads)).startswith("stream-pump-")
    assert source.closed.is_set() and writer.closed and pump.closed
    assert pump.samples == 5 * 3840


def test_an_error_before_the_first_chunk_is_raised_by_first_and_the_stream_is_closed():
    async def main():
        source = Source(3, fail_at=0)
        pump = await _pump(source)
        with pytest.raises(RuntimeError, match="the engine failed"):
            await pump.first()
        await pump.close()
        return source

    assert run_coro(main()).closed.is_set()


def test_an_error_mid_stream_reaches_the_reader_after_what_was_written():
    async def main():
        source, writer = Source(4, fail_at=2), Writer()
        pump = await _pump(source)
        await pump.first()
        pump.start(writer)
        got = []
        with pytest.raises(RuntimeError, match="the engine failed"):
            async for data in pump.output():
                got.append(data)
        await pump.close()
        return got, writer, source

    got, writer, source = run_coro(main())
    assert b"".join(got) == b"\x00" * 4 + b"\x01" * 4 and writer.closed and source.closed.is_set()


def test_close_mid_stream_stops_the_thread_and_closes_stream_and_writer():
    async def main():
        gate = threading.Semaphore(2)  # two chunks now, the rest never
        source, writer = Source(100, gate=gate), Writer()
        pump = await _pump(source)
        await pump.first()
        pump.start(writer)
        async for data in pump.output():
            assert data.startswith(b"\x00" * 4)
            break
        await pump.close()
        return source, writer

    source, writer = run_coro(main())
    assert source.closed.is_set() and source.cancel.is_set() and writer.closed


def test_a_client_that_does_not_read_holds_at_most_max_pending_outputs():
    async def main():
        source, writer = Source(MAX_PENDING * 3), Writer()
        pump = await _pump(source)
        await pump.first()
        pump.start(writer)
        while pump.pending < MAX_PENDING:
            await asyncio.sleep(0.01)
        for _ in range(20):  # the thread is held back: the queue does not grow past the bound
            await asyncio.sleep(0.01)
            assert pump.pending <= MAX_PENDING
        out = [data async for data in pump.output()]
        await pump.close()
        return out

    assert b"".join(run_coro(main())) == b"".join(bytes([i % 256]) * 4 for i in range(MAX_PENDING * 3)) + b"end"


def test_a_writer_given_up_front_writes_the_first_chunk_before_it_is_handed_over():
    """The first chunk's bytes are waiting when first() returns: no second trip to the thread."""

    async def main():
        source, writer, made = Source(3), Writer(), []

        def make(stream) -> Writer:
            made.append((stream, threading.current_thread().name))
            return writer

        pump = StreamPump(source.start, writer=make)
        first = await pump.first()
        written = pump.pending  # before anything else is awaited
        pump.start(None)  # a no-op: it has its writer
        out = b"".join([data async for data in pump.output()])
        await pump.close()
        return first, written, made, writer, out, pump

    first, written, made, writer, out, pump = run_coro(main())
    assert first is not None and first.seq == 0 and written >= 1
    assert out == b"\x00" * 4 + b"\x01" * 4 + b"\x02" * 4 + b"end"
    assert len(made) == 1 and made[0][0] is pump.stream and made[0][1].startswith("stream-pump-")
    assert writer.closed and pump.samples == 3 * 3840


def test_a_writer_that_fails_on_the_first_chunk_fails_first():
    def make(stream):
        def write(chunk):
            raise ValueError("no encoder for you")

        return write

    async def main():
        source = Source(3)
        pump = StreamPump(source.start, writer=make)
        with pytest.raises(ValueError, match="no encoder"):
            await pump.first()
        await pump.close()
        return source

    assert run_coro(main()).closed.is_set()


def test_outputs_that_waited_for_the_reader_come_out_in_one_piece():
    async def main():
        source, writer = Source(6), Writer()
        pump = StreamPump(source.start, writer=lambda stream: writer)
        await pump.first()
        while pump.pending < 8:  # six chunks, the tail, the end: all there before the reader reads
            await asyncio.sleep(0.01)
        out = [data async for data in pump.output()]
        await pump.close()
        return out

    out = run_coro(main())
    assert out == [b"".join(bytes([i]) * 4 for i in range(6)) + b"end"]


class MessageWriter(Writer):
    """A writer of message lists, as the agent sockets' (`studio/agents/writer.py`)."""

    def __call__(self, chunk: AudioChunk) -> list:
        return [f"audio {chunk.seq}"]

    def finish(self) -> list:
        return ["done"]


def test_message_lists_that_waited_for_the_reader_come_out_as_one_list():
    async def main():
        source, writer = Source(3), MessageWriter()
        pump = StreamPump(source.start, writer=lambda stream: writer)
        await pump.first()
        while pump.pending < 5:  # three chunks, the tail, the end
            await asyncio.sleep(0.01)
        out = [data async for data in pump.output()]
        await pump.close()
        return out

    assert run_coro(main()) == [["audio 0", "audio 1", "audio 2", "done"]]


def test_posts_made_while_the_loop_is_busy_arrive_in_order_in_one_hand_over():
    from studio.delivery import stream_pump

    class Inbox:
        def __init__(self):
            self.items = []

        def _arrive(self, item):
            self.items.append(item)

    async def main():
        loop = asyncio.get_running_loop()
        box = stream_pump._Mailbox(loop)
        hand_overs = []
        real = box._hand_over

        def counted():
            hand_overs.append(len(box._items))
            real()

        box._hand_over = counted
        pumps = [Inbox() for _ in range(4)]
        posted = threading.Event()

        def post_all():
            for n in range(25):
                for pump in pumps:
                    box.post(pump, ("data", n))
            posted.set()

        # the loop is held in a callback while another thread posts 100 items
        loop.call_soon(lambda: (threading.Thread(target=post_all).start(), posted.wait(30)))
        await asyncio.sleep(0)
        while sum(len(p.items) for p in pumps) < 100:
            await asyncio.sleep(0.01)
        return pumps, hand_overs

    pumps, hand_overs = run_coro(main())
    assert all(p.items == [("data", n) for n in range(25)] for p in pumps)
    assert hand_overs == [100]  # one wake-up of the loop for all of them


def test_many_streams_do_not_need_the_shared_worker_pool():
    """64 streams at once while anyio's worker pool has ONE thread, held by someone else: every
    stream is delivered whole (they used to park one pool thread each per chunk)."""

    async def main():
        anyio.to_thread.current_default_thread_limiter().total_tokens = 1
        release = threading.Event()
        blocker = asyncio.ensure_future(anyio.to_thread.run_sync(release.wait))

        async def one(index: int) -> bytes:
            source = Source(6)
            pump = StreamPump(source.start)
            await pump.first()
            encoder = StreamEncoder("mp3", 48_000, 2)

            def write(chunk: AudioChunk) -> bytes:
                return encoder.encode(chunk.pcm)

            write.finish = encoder.finish  # type: ignore[attr-defined]
            pump.start(write)
            data = b"".join([piece async for piece in pump.output()])
            await pump.close()
            return data

        outs = await asyncio.gather(*(one(i) for i in range(64)))
        release.set()
        await blocker
        return outs

    outs = run_coro(main())
    import io

    import av

    for data in outs[:4]:
        with av.open(io.BytesIO(data)) as container:
            samples = sum(frame.samples for frame in container.decode(audio=0))
        assert samples >= 5 * 3840  # the whole stream, decodable (the encoder's padding may add a frame)


def test_pump_threads_are_reused_and_grow_only_to_the_most_tasks_at_once(monkeypatch):
    from pathlib import Path

    from studio.delivery.pump_threads import PumpThreads

    pool = PumpThreads("pool-test")
    release, ran = threading.Event(), []
    starters: set[str] = set()  # who started each worker thread
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name.startswith("pool-test-") and not thread.name.endswith("starter"):
            starters.add(threading.current_thread().name)
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    done = threading.Semaphore(0)

    def task(index: int, wait: bool) -> None:
        ran.append((index, threading.current_thread().name, threading.get_native_id()))
        if wait:
            release.wait(30)
        done.release()

    def settled() -> None:  # every thread back to waiting (a task's end comes just before that)
        for _ in range(3000):
            if pool.idle == pool.started:
                return
            threading.Event().wait(0.01)
        raise AssertionError(f"{pool.idle} of {pool.started} threads idle")

    for i in range(5):  # one after another: one thread does them all
        pool.run(lambda i=i: task(i, False))
        assert done.acquire(timeout=30)
        settled()
    assert pool.started == 1
    for i in range(4):  # four at once, none of them waiting for another: four threads
        pool.run(lambda i=i: task(10 + i, True))
    for _ in range(3000):  # all four running (each holds its thread until released)
        if len(ran) == 9:
            break
        threading.Event().wait(0.01)
    release.set()
    for _ in range(4):
        assert done.acquire(timeout=30)
    assert pool.started == 4 and len({name for _, name, _ in ran[5:]}) == 4
    assert starters == {"pool-test-starter"}  # the caller (here the test; in the server the event loop) started none
    comm = Path(f"/proc/self/task/{ran[0][2]}/comm")
    if comm.exists():  # Linux: the operating system knows them by name
        assert comm.read_text().strip() == "stream-pump"
