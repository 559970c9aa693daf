"""The player's wire formats: the `"transport"` field of POST /api/tts/stream.

- `f32`: little-endian float32, interleaved stereo (384 kB per audio second), the default, what a
  client that sends no `transport` has always had;
- `s16`: little-endian 16-bit, interleaved (192 kB/s): lossless for what the downloads keep (16-bit);
- `opus`: ONE continuous Ogg/Opus stream per utterance, 48 kHz stereo (PyAV's libopus muxed into
  Ogg, pages written as the encoder makes packets). The encoder keeps its state across the
  engine's chunks, so a join between chunks is no different from any other 20 ms inside one: no
  priming gap, no click. The decoder skips the OpusHead's pre-skip, and the last page's granule
  position trims the end, so the decoded length is exact.

With `"framing": "events"` the kind-0 frames carry the transport's bytes (cut anywhere: a client
joins them and decodes one stream). A client that names a transport also gets a kind-2 frame before
each chunk's audio: the chunk's server time since the request (f64 LE), from which the page tells
a link that is slower than the generator (the lag grows) from a generator that is slower than the
link (it does not). Whatever the wire carries, the result store keeps the lossless
float32 audio (after any time-stretch): downloads are FLAC/WAV of the source, never of the Opus.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from fastapi import Request

from tts_core.types import NUM_CHANNELS, AudioChunk

from .results import ResultStore, record_result
from .speech_output import FrameWriter, OutputSpec, RawWriter, SpeechRender
from .streaming import f32_bytes

# Transparent for speech at 48 kHz stereo, and about a twentieth of float32's bytes.
OPUS_BIT_RATE = 160_000


@dataclass(frozen=True, slots=True)
class Transport:
    """One wire format: the request's name for it, the encoder's format, and the response headers."""

    name: str
    fmt: str  # `encoders.StreamEncoder`'s format
    sample_format: str  # X-Sample-Format
    media_type: str  # of an unframed response
    lossless: bool
    bit_rate: int | None = None


TRANSPORTS: dict[str, Transport] = {
    "f32": Transport("f32", "float32", "f32le", "application/octet-stream", lossless=True),
    "s16": Transport("s16", "pcm", "s16le", "application/octet-stream", lossless=True),
    "opus": Transport("opus", "opus", "opus", "audio/ogg", lossless=False, bit_rate=OPUS_BIT_RATE),
}
DEFAULT_TRANSPORT = "f32"


def transport_headers(transport: Transport) -> dict[str, str]:
    headers = {"X-Sample-Format": transport.sample_format, "X-Transport": transport.name}
    if transport.bit_rate:
        headers["X-Bit-Rate"] = str(transport.bit_rate)
    return headers


class _PcmTap:
    """The lossless copy of a stream whose wire format is not float32, into the result store."""

    def __init__(self, store: ResultStore, request_id: str):
        self._store, self._id = store, request_id

    def __call__(self, pcm: np.ndarray) -> None:
        self._store.add(self._id, pcm)

    def done(self) -> None:
        self._store.add(self._id, np.zeros((NUM_CHANNELS, 0), np.float32), last=True)


class _Completing:
    """A writer whose `finish()` also marks the stream's kept audio complete."""

    blocking = True

    def __init__(self, writer: RawWriter, done: Callable[[], None]):
        self._writer, self._done = writer, done

    def __call__(self, chunk: AudioChunk) -> bytes:
        return self._writer(chunk)

    def finish(self) -> bytes:
        data = self._writer.finish()
        self._done()
        return data

    def close(self) -> None:
        self._writer.close()


def player_writer(transport: Transport, spec: OutputSpec, *, framed: bool, request_id: str,
                  http_request: Request, progress: bool = False) -> Callable[[AudioChunk], bytes]:
    """The stream route's writer for `transport`: raw bytes or event frames (with `progress`, the
    chunks' server times too), teed into the result store."""
    spec = replace(spec, fmt=transport.fmt, bit_rate=transport.bit_rate)
    if transport.fmt == "float32":  # the parse-back recorder keeps exactly what was sent
        if framed:
            writer = FrameWriter(SpeechRender(spec), request_id, progress=progress)
        else:  # today's raw stream, untouched at the natural rate
            writer = f32_bytes if spec.speed == 1.0 else RawWriter(SpeechRender(spec))
        return record_result(http_request, request_id, writer, framed=framed)
    store: ResultStore | None = getattr(http_request.app.state, "results", None)
    tap = _PcmTap(store, request_id) if store is not None else None
    render = SpeechRender(spec, on_pcm=tap, pool=getattr(http_request.app.state, "encoder_pool", None))
    out: RawWriter = FrameWriter(render, request_id, progress=progress) if framed else RawWriter(render)
    return out if tap is None else _Completing(out, tap.done)
