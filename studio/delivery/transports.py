"""The player's wire formats: the `"transport"` field of POST /api/tts/stream (docs/PROTOCOL.md §2).

- `opus` (the default): ONE continuous Ogg/Opus stream per utterance, 48 kHz stereo (PyAV's libopus,
  paged by `tts_core/audio/ogg.py`: a page per packet, out as soon as the encoder makes it). One
  encoder runs across the engine's chunks, so a chunk join is like any other 20 ms inside the
  stream; the OpusHead's pre-skip and the last page's granule position make the decoded length exact.
- `s16`: little-endian 16-bit, interleaved (192 kB per audio second), for a browser whose WebCodecs
  cannot decode Opus.

The body is always event frames (`FrameWriter`). Whatever the wire carries, the render's float32
audio (after any speed change) is kept for downloads through its `on_pcm` tap: the files are
encoded from that source, never from the Opus.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from fastapi import Request

from tts_core.errors import InvalidRequestError

from .results import ResultStore
from .speech_output import START_S, FrameWriter, OutputSpec, SpeechRender

# Transparent for speech at 48 kHz stereo, and about a twentieth of float32's bytes.
OPUS_BIT_RATE = 160_000


@dataclass(frozen=True, slots=True)
class Transport:
    """One wire format: the request's name for it, the encoder's format, and the response headers."""

    name: str
    fmt: str  # `encoders.StreamEncoder`'s format
    sample_format: str  # X-Sample-Format
    bit_rate: int | None = None


TRANSPORTS: dict[str, Transport] = {
    "opus": Transport("opus", "opus", "opus", bit_rate=OPUS_BIT_RATE),
    "s16": Transport("s16", "pcm", "s16le"),
}
DEFAULT_TRANSPORT = "opus"


def transport_named(name: str | None) -> Transport:
    """The transport a request names (None: the default); anything else is refused, naming the field."""
    if name is None:
        return TRANSPORTS[DEFAULT_TRANSPORT]
    found = TRANSPORTS.get(name)
    if found is None:
        hint = (" Float32 is not sent on this route: a script that wants raw PCM uses POST /v1/audio/speech "
                "with response_format \"pcm\" or \"wav\" (16-bit), and every stream's audio is kept for download "
                "as FLAC or WAV (GET /api/tts/result/{request_id}.flac)." if name.lower() == "f32" else "")
        raise InvalidRequestError(f"transport {name[:16]!r} is not offered: use \"opus\" (the default) or \"s16\" "
                                  f"(16-bit PCM, for a browser that cannot decode Opus).{hint}", param="transport",
                                  code="invalid_value")
    return found


def transport_headers(transport: Transport) -> dict[str, str]:
    headers = {"X-Sample-Format": transport.sample_format, "X-Transport": transport.name}
    if transport.bit_rate:
        headers["X-Bit-Rate"] = str(transport.bit_rate)
    return headers


def player_writer(transport: Transport, spec: OutputSpec, *, request_id: str, http_request: Request) -> FrameWriter:
    """The stream route's writer: event frames of `transport`'s bytes, the float32 it encodes teed
    into the app's result store (`app.state.results`) when it has one."""
    store: ResultStore | None = getattr(http_request.app.state, "results", None)
    keep = None if store is None else partial(store.add, request_id)
    render = SpeechRender(replace(spec, fmt=transport.fmt, bit_rate=transport.bit_rate), on_pcm=keep,
                          pool=getattr(http_request.app.state, "encoder_pool", None), start_s=START_S)
    return FrameWriter(render, request_id)
