"""The consumer side of a submitted stream: its chunks, read from the stream's outbox."""

from __future__ import annotations

from collections.abc import Iterator

from ..errors import TTSError
from ..types import AudioChunk
from .types import StreamHandle, StreamStatus


def handle_chunks(engine, handle: StreamHandle, next_item=None) -> Iterator[AudioChunk]:
    """A submitted stream's chunks until its end marker, engine errors re-raised as `TTSError`;
    closing the iterator cancels the stream if it is still waiting or running. `next_item()`
    (default: block on the outbox) returns the next item, or None to stop early."""
    get = next_item or handle.outbox.get
    try:
        while (item := get()) is not None:
            if isinstance(item, TTSError):
                raise item
            if isinstance(item, BaseException):
                raise TTSError(f"synthesis failed: {type(item).__name__}: {item}") from item
            yield item
    finally:
        if handle.status in (StreamStatus.WAITING, StreamStatus.RUNNING):
            engine.cancel(handle)
