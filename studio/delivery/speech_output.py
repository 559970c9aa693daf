"""From engine chunks to what a response carries: speed, output profile, format, captions, framing.

`SpeechRender` is the one path audio takes on its way out: time-stretch
(`stretch.Stretcher`), rate and channels (`encoders.ProfileConverter`), the format's bytes
(`encoders.StreamEncoder`, or its twin in a worker process of the server's encoder pool for the
compressed formats, which hands a chunk's bytes out at a later chunk: `encoder_pool.open_encoder`),
and the caption spans (`timeline.CaptionTimeline`). Every stage gives the
same samples however the stream is cut, so a streamed response and a buffered one are the same audio.

Three writers wrap a render for `streaming.chunk_bytes` (each is called per chunk, then `finish()`):
- `RawWriter`: the format's bytes as they come (`stream_format: "audio"`, `stream: true`).
  Its first bytes wait until the encoder has handed out the first chunk's audio, to within one codec
  frame (`start_hold`): LAME keeps about 56 ms of the first 80 ms chunk and aac half of it, so a
  client that starts playing at the first audio would have a few milliseconds to play before the
  next chunk; held until the second chunk, it starts with about a chunk's worth, as with pcm;
- `SseWriter`: OpenAI's server-sent events, `speech.audio.delta` (base64 audio), `speech.segment`
  captions when asked, then `speech.audio.done` with usage (docs/PROTOCOL.md §4);
- `FrameWriter`: the player's stream: [u32 LE length][u8 kind][payload] frames, kind 0 = audio
  bytes of the stream's transport (a piece of the Ogg/Opus stream, or 16-bit PCM;
  `studio/delivery/transports.py`), kind 1 = a JSON event (`speech.segment`, then `speech.done`;
  docs/PROTOCOL.md §2.3).
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from tts_core.audio.encoder_pool import EncoderPool, open_encoder
from tts_core.audio.encoders import ProfileConverter
from tts_core.audio.io import encode_audio
from tts_core.audio.stretch import Stretcher
from tts_core.audio.timeline import CaptionTimeline, SegmentSpan
from tts_core.types import NUM_CHANNELS, SAMPLE_RATE_HZ, AudioChunk

FRAME_AUDIO = 0
FRAME_EVENT = 1


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """What the client gets: format, sample rate, channels, speed, and whether captions are made."""

    fmt: str
    sample_rate: int = SAMPLE_RATE_HZ
    channels: int = NUM_CHANNELS
    speed: float = 1.0
    captions: bool = False
    bit_rate: int | None = None  # compressed formats: bits per second (None: the format's default)


# The player's start: a pooled encoder's bytes are waited for until this much audio went out
# (its prebuffer must not wait a chunk for bytes the worker has made; `player_writer`).
START_S = 0.5


class SpeechRender:
    """Chunks in, (format bytes, finished caption spans) out. One per response; not thread-safe."""

    def __init__(self, spec: OutputSpec, on_pcm: Callable[[np.ndarray], None] | None = None, *,
                 pool: EncoderPool | None = None, start_s: float = 0.0):
        """`on_pcm` sees every piece of float32 audio as it goes to the encoder (after speed and
        profile): the lossless copy kept for downloads when the wire carries a lossy format. `pool`:
        the server's encoder processes (None: every format encodes in this process). `start_s`:
        until this much audio went out, every call waits for a pooled encoder's bytes (`push`)."""
        self.spec = spec
        self._start_samples = start_s * spec.sample_rate
        self._on_pcm = on_pcm
        self._stretcher = Stretcher(spec.speed)
        self._profile = ProfileConverter(spec.sample_rate, spec.channels)
        self._encoder = open_encoder(pool, spec.fmt, spec.sample_rate, spec.channels, bit_rate=spec.bit_rate)
        self._timeline = CaptionTimeline(spec.speed) if spec.captions else None
        self._held: list[SegmentSpan] = []  # spans whose audio has not all gone out yet
        self.output_samples = 0  # at spec.sample_rate
        self.frames = 0  # codec frames generated (80 ms each), for usage

    @property
    def audio_s(self) -> float:
        return self.output_samples / self.spec.sample_rate

    @property
    def encoded_samples(self) -> int:
        """Samples (at spec.sample_rate) in the bytes the encoder has handed out so far."""
        return self._encoder.encoded_samples

    @property
    def codec_frame_samples(self) -> int:
        """The encoder's frame (0 for raw formats): its output comes in steps of this."""
        return self._encoder.frame_samples

    def _encode(self, pcm: np.ndarray) -> bytes:
        self.output_samples += pcm.shape[1]
        if self._on_pcm is not None and pcm.shape[1]:
            self._on_pcm(pcm)
        return self._encoder.encode(pcm)

    def push(self, chunk: AudioChunk, *, wait: bool = False) -> tuple[bytes, list[SegmentSpan]]:
        """The bytes ready and the captions now due. A pooled encoder hands a chunk's bytes out at a
        later call; `wait`, and every call until `start_s` of audio went out, waits for them, as the
        in-process encoder gives them. (Waiting costs a round trip to the worker per chunk: under
        load the API's streams pipeline instead, their first bytes held by `RawWriter`.)"""
        self.frames += len(chunk.codes)
        data = self._encode(self._profile.push(self._stretcher.push(chunk.pcm))) if chunk.pcm.shape[1] else b""
        starting = self._encoder.encoded_samples < self._start_samples
        data += self._encoder.collect(wait=wait or starting)
        if self._timeline is not None:
            self._held += self._timeline.push(chunk)
        return data, self._release()

    def _release(self, everything: bool = False) -> list[SegmentSpan]:
        """Spans whose end has been sent: a caption follows its audio (the stretch, the resampler
        and a pooled encoder's pipe hold some audio back, so a span may wait for a later chunk)."""
        sent_s = (self.output_samples - self._encoder.pending_samples) / self.spec.sample_rate + 0.5 / self.spec.sample_rate
        due = 0
        while due < len(self._held) and (everything or self._held[due].end <= sent_s):
            due += 1
        out, self._held = self._held[:due], self._held[due:]
        return out

    def finish(self) -> tuple[bytes, list[SegmentSpan]]:
        data = self._encode(self._profile.push(self._stretcher.flush()))
        data += self._encode(self._profile.flush())
        data += self._encoder.finish()
        if self._timeline is not None:
            self._held += self._timeline.finish()
        return data, self._release(everything=True)

    def close(self) -> None:
        self._encoder.close()


# ---- writers: one chunk in, bytes out; `finish()` at the end; run in the stream's pump thread ----


class RawWriter:
    """The format's bytes as they come; with `start_hold`, the first bytes wait until they carry the
    first chunk's audio to within one codec frame (see the module docstring): one chunk later for mp3
    and aac, no later for pcm, wav, opus (and flac, whose encoder sends nothing before its 96 ms
    frame anyway)."""

    blocking = True

    def __init__(self, render: SpeechRender, *, start_hold: bool = True):
        self.render = render
        self._holding = start_hold
        self._held: list[bytes] = []
        self._due: int | None = None  # encoded samples the first bytes must carry

    def __call__(self, chunk: AudioChunk) -> bytes:
        data = self.render.push(chunk, wait=self._holding)[0]  # the hold reads exact counts
        if not self._holding:
            return data
        self._held.append(data)
        if self._due is None and self.render.output_samples:  # the first chunk that brought audio
            self._due = self.render.output_samples - self.render.codec_frame_samples
        if self._due is None or self.render.encoded_samples < self._due:
            return b""
        return self._release()

    def _release(self) -> bytes:
        out = b"".join(self._held)
        self._held, self._holding = [], False
        return out

    def finish(self) -> bytes:
        return self._release() + self.render.finish()[0]

    def close(self) -> None:
        self.render.close()


class FileWriter:
    """A file of exact length, sent once the stream ends: for flac asked without `stream` (streamed
    flac cannot say its length, and common readers such as libsndfile refuse such a file)."""

    def __init__(self, spec: OutputSpec):
        self.render = SpeechRender(replace(spec, fmt="float32"))
        self._fmt = spec.fmt
        self._parts: list[bytes] = []

    def __call__(self, chunk: AudioChunk) -> bytes:
        self._parts.append(self.render.push(chunk)[0])
        return b""

    def finish(self) -> bytes:
        self._parts.append(self.render.finish()[0])
        spec = self.render.spec
        pcm = np.frombuffer(b"".join(self._parts), dtype="<f4").reshape(-1, spec.channels).T
        return encode_audio(pcm, spec.sample_rate, self._fmt)

    def close(self) -> None:
        self.render.close()


def sse_event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


class SseWriter(RawWriter):
    """OpenAI's speech SSE: `speech.audio.delta` {audio: base64}, captions, `speech.audio.done` {usage}."""

    def __init__(self, render: SpeechRender, input_tokens: int):
        super().__init__(render)
        self.input_tokens = input_tokens

    @staticmethod
    def _events(data: bytes, spans: list[SegmentSpan]) -> bytes:
        out = sse_event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()}) if data else b""
        return out + b"".join(sse_event(span.event()) for span in spans)

    def __call__(self, chunk: AudioChunk) -> bytes:
        return self._events(*self.render.push(chunk))

    def finish(self) -> bytes:
        out = self._events(*self.render.finish())
        usage = {"input_tokens": self.input_tokens, "output_tokens": self.render.frames,
                 "total_tokens": self.input_tokens + self.render.frames}
        return out + sse_event({"type": "speech.audio.done", "usage": usage})


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack("<IB", len(payload), kind) + payload


def event_frame(payload: dict) -> bytes:
    return frame(FRAME_EVENT, json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode())


class FrameWriter(RawWriter):
    """The player's event framing: audio frames with caption events between them."""

    def __init__(self, render: SpeechRender, request_id: str):
        super().__init__(render)
        self.request_id = request_id

    @staticmethod
    def _frames(data: bytes, spans: list[SegmentSpan]) -> bytes:
        out = frame(FRAME_AUDIO, data) if data else b""
        return out + b"".join(event_frame(span.event()) for span in spans)

    def __call__(self, chunk: AudioChunk) -> bytes:
        return self._frames(*self.render.push(chunk))

    def finish(self) -> bytes:
        out = self._frames(*self.render.finish())
        done = {"type": "speech.done", "audio_s": round(self.render.audio_s, 3), "request_id": self.request_id}
        return out + event_frame(done)
