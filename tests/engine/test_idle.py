"""tts_core/engine/idle.py: streams counted from submit to their end; waiters woken, never polling."""

from __future__ import annotations

import threading

from tts_core.config import SamplingParams
from tts_core.engine.idle import IdleSignal
from tts_core.engine.stream import Stream, StreamStatus


def _stream() -> Stream:
    return Stream(segments=(), sampling=SamplingParams(), seed=0)


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_streams_are_counted_until_they_end_whatever_ends_them():
    signal = IdleSignal()
    streams = [_stream() for _ in range(3)]
    for stream in streams:
        signal.track(stream)
    signal.track(streams[0])  # tracked twice (a pool and its engine share a signal): released twice
    assert signal.in_progress == 4 and not signal.idle
    streams[0].end(StreamStatus.FINISHED)
    streams[1].end(StreamStatus.CANCELLED)
    assert signal.in_progress == 1
    streams[2].end(StreamStatus.FAILED, RuntimeError("x"))
    streams[2].end(StreamStatus.FAILED, RuntimeError("again"))  # a stream ends once
    assert signal.idle and signal.in_progress == 0


def test_quiet_is_measured_from_the_last_end():
    clock = _Clock()
    signal = IdleSignal(clock=clock)
    clock.now = 5.0
    assert signal.wait_quiet(1.0, timeout_s=0)  # idle since it was made, at 0
    stream = _stream()
    signal.track(stream)
    assert not signal.wait_quiet(1.0, timeout_s=0)
    clock.now = 7.0
    stream.end(StreamStatus.FINISHED)
    clock.now = 7.5
    assert not signal.wait_quiet(1.0, timeout_s=0)
    clock.now = 8.0
    assert signal.wait_quiet(1.0, timeout_s=0)


def test_a_waiter_is_woken_by_the_end_and_by_close():
    signal = IdleSignal()
    stream = _stream()
    signal.track(stream)
    results = []
    waiter = threading.Thread(target=lambda: results.append(signal.wait_quiet(0.0)))
    waiter.start()
    assert not results and waiter.is_alive()
    stream.end(StreamStatus.FINISHED)
    waiter.join(10)
    assert results == [True]
    signal.track(_stream())  # never ends
    closer = threading.Thread(target=lambda: results.append(signal.wait_quiet(0.0)))
    closer.start()
    signal.close()
    closer.join(10)
    assert results == [True, False]
