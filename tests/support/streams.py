"""Reading engine `Stream`s in tests: every chunk, or the first few, or the error that ended it."""

from __future__ import annotations

from tts_core.engine.stream import Stream
from tts_core.errors import TTSError
from tts_core.types import AudioChunk


def read_all(stream: Stream) -> list[AudioChunk]:
    """Every chunk until the end (an error ending the stream is raised)."""
    return list(stream)


def read(stream: Stream, count: int) -> list[AudioChunk]:
    """The next `count` chunks (fewer if the stream ends first)."""
    out = []
    for chunk in stream:
        out.append(chunk)
        if len(out) == count:
            break
    return out


def until_error(stream: Stream) -> TTSError:
    """Read until the error that ends the stream; fails if it ends without one."""
    try:
        for _ in stream:
            pass
    except TTSError as exc:
        return exc
    raise AssertionError(f"{stream} ended without an error")


def wait_ended(stream: Stream, timeout_s: float = 60.0):
    """Block until the engine has ended `stream` (its end hook); its final status."""
    import threading

    ended = threading.Event()
    stream.on_end(lambda _stream: ended.set())
    assert ended.wait(timeout_s), f"{stream} did not end"
    return stream.status
