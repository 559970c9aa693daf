"""Test helpers: decode a compressed audio stream while its bytes arrive, and parse SSE events.
The player's stream (event frames, Opus) is read by `bench.lib.player_stream`.

`StreamingDecoder` runs PyAV's demuxer and decoder in a thread that reads from a pipe fed piece by
piece (as an HTTP body arrives), so a test can tell how many bytes had arrived when the first
audio frame came out: a progressive stream decodes from its first pieces, a whole file only at the end.
"""

from __future__ import annotations

import base64
import json
import queue
import threading
from collections.abc import Iterable

import av
import numpy as np

DEMUXERS = {"mp3": "mp3", "opus": "ogg", "aac": "aac", "flac": "flac", "wav": "wav"}


class StreamingDecoder:
    """Feed bytes with `feed`, then `close()`; read `first_audio_after` (bytes fed when the first
    frame was decoded), `pieces_before_first` (feeds by then), `samples`, `rate`, `channels`, `pcm`."""

    def __init__(self, fmt: str):
        self.fmt = fmt
        self._pieces: queue.Queue[bytes | None] = queue.Queue()
        self._buffer = bytearray()
        self.fed = self.consumed = self.feeds = self.consumed_feeds = 0
        self._ended = False
        self.first_audio_after: int | None = None
        self.pieces_before_first: int | None = None
        self.rate = self.channels = 0
        self._frames: list[np.ndarray] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def feed(self, data: bytes) -> None:
        if data:
            self.fed += len(data)
            self.feeds += 1
            self._pieces.put(data)

    def read(self, size: int = -1) -> bytes:  # PyAV's side of the pipe
        while not self._buffer:
            if self._ended:
                return b""
            piece = self._pieces.get()
            if piece is None:
                self._ended = True
                return b""
            self._buffer += piece
            self.consumed += len(piece)
            self.consumed_feeds += 1
        size = len(self._buffer) if size < 0 else size
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        return out

    def _run(self) -> None:
        try:
            # Small probe: decode from the first packets instead of reading seconds ahead first.
            with av.open(self, mode="r", format=DEMUXERS[self.fmt],
                         options={"probesize": "32", "analyzeduration": "0"}) as container:
                stream = container.streams.audio[0]
                for frame in container.decode(stream):
                    if self.first_audio_after is None:
                        self.first_audio_after = self.consumed
                        self.pieces_before_first = self.consumed_feeds
                    self.rate, self.channels = frame.sample_rate, len(frame.layout.channels)
                    self._frames.append(frame.to_ndarray().reshape(self.channels, -1)
                                        if frame.format.is_planar else
                                        frame.to_ndarray().reshape(-1, self.channels).T)
        except BaseException as exc:  # reported by close()
            self.error = exc

    def close(self, timeout_s: float = 60) -> StreamingDecoder:
        self._pieces.put(None)
        self._thread.join(timeout_s)
        if self.error is not None:
            raise self.error
        return self

    @property
    def samples(self) -> int:
        return sum(f.shape[1] for f in self._frames)

    @property
    def pcm(self) -> np.ndarray:
        return np.concatenate(self._frames, axis=1).astype(np.float32) if self._frames else np.zeros((0, 0))


def decode_progressively(fmt: str, pieces: Iterable[bytes]) -> StreamingDecoder:
    decoder = StreamingDecoder(fmt)
    for piece in pieces:
        decoder.feed(piece)
    return decoder.close()


def parse_sse(lines: Iterable[str]) -> list[dict]:
    """The JSON payloads of `data:` lines, in order (blank lines separate events)."""
    events = []
    for line in lines:
        if line.startswith("data:"):
            events.append(json.loads(line[5:].strip()))
    return events


def sse_audio(events: list[dict]) -> bytes:
    return b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
