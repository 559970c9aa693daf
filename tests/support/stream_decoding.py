"""Test helpers: decode a compressed audio stream while its bytes arrive, parse SSE / event frames,
and decode the player's stream (POST /api/tts/stream) as the player does.

`StreamingDecoder` runs PyAV's demuxer and decoder in a thread that reads from a pipe fed piece by
piece (as an HTTP body arrives), so a test can tell how many bytes had arrived when the first
audio frame came out: a progressive stream decodes from its first pieces, a whole file only at the end.
"""

from __future__ import annotations

import base64
import json
import queue
import struct
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


def parse_frames(body: bytes) -> list[tuple[int, bytes | dict]]:
    """The player's event framing: [u32 LE length][u8 kind][payload]; kind 1 payloads parsed as JSON."""
    frames, at = [], 0
    while at < len(body):
        assert at + 5 <= len(body), f"truncated frame header at byte {at}"
        length, kind = struct.unpack_from("<IB", body, at)
        payload = body[at + 5 : at + 5 + length]
        assert len(payload) == length, f"truncated frame at byte {at}"
        frames.append((kind, json.loads(payload) if kind == 1 else payload))
        at += 5 + length
    return frames


def decode_ogg_opus(data: bytes) -> np.ndarray:
    """PyAV's (FFmpeg's) Ogg demuxer and Opus decoder: float32 [2, n], pre-skip and end trim applied."""
    import io

    with av.open(io.BytesIO(data), format="ogg") as container:
        frames = [frame.to_ndarray() for frame in container.decode(audio=0)]
    pcm = np.concatenate(frames, axis=1)
    return pcm if pcm.shape[0] == 2 else pcm.reshape(2, -1)


def player_stream(body: bytes, sample_format: str) -> tuple[np.ndarray, list[dict]]:
    """The player's stream (event frames, docs/PROTOCOL.md §2.3) -> (float32 [2, n], its events): 16-bit
    PCM scaled as static/player/transport.js scales it, Opus decoded by FFmpeg (the browser's own
    decoder agrees within 2e-3 per sample: tests/e2e/test_player_opus.py)."""
    frames = parse_frames(body)
    assert {kind for kind, _ in frames} <= {0, 1}, {kind for kind, _ in frames}
    audio = b"".join(payload for kind, payload in frames if kind == 0)
    events = [payload for kind, payload in frames if kind == 1]
    if sample_format == "s16le":
        return np.frombuffer(audio, "<i2").reshape(-1, 2).T.astype(np.float32) / 32767, events
    assert sample_format == "opus", sample_format
    return decode_ogg_opus(audio), events
