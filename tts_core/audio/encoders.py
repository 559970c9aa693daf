"""Audio out, piece by piece: the output profile (sample rate, channels) and progressive encoders.

`ProfileConverter` turns the engine's 48 kHz stereo into the client's rate and channels (soxr's
streaming resampler: the same samples however the stream is cut). `StreamEncoder` turns float32
[C, n] pieces into one format's bytes as they come: raw pcm / float32, streaming WAV, and mp3 /
opus / aac (ADTS) / flac through PyAV, and mu-law / A-law (`g711.py`), each packet handed out as soon as the encoder has it.
Opus's Ogg pages are written here (`ogg.py`), not by FFmpeg's muxer, which holds the newest page back.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..types import NUM_CHANNELS, SAMPLE_RATE_HZ
from .g711 import alaw_bytes, mulaw_bytes
from .io import pcm_to_int16_bytes, to_int16, wav_stream_header
from .ogg import OggOpusWriter

STREAM_FORMATS: tuple[str, ...] = ("pcm", "wav", "mp3", "opus", "aac", "flac", "float32", "mulaw", "alaw")
_G711 = {"mulaw": mulaw_bytes, "alaw": alaw_bytes}  # telephony's 8-bit companded samples (`g711.py`)
# Rates every format accepts; opus only the five of its codec.
SAMPLE_RATES: tuple[int, ...] = (8000, 12000, 16000, 22050, 24000, 32000, 44100, 48000)
OPUS_RATES = frozenset({8000, 12000, 16000, 24000, 48000})


@dataclass(frozen=True, slots=True)
class PyAVFormat:
    """How one compressed format is made: FFmpeg muxer and encoder, their options, bit rate."""

    muxer: str  # "ogg": pages written by `ogg.OggOpusWriter`, not by FFmpeg
    codec: str
    muxer_options: tuple[tuple[str, str], ...] = ()
    codec_options: tuple[tuple[str, str], ...] = ()
    bit_rate_per_channel: int = 0  # 0: the encoder's own (lossless flac)
    sample_format: str = "flt"  # what the frames are handed over as (the encoder's own: no conversion)


# LAME's quality level 7 (FFmpeg's compression_level) costs less CPU than its default 3 for the same
# quality at this bit rate (docs/SERVING.md). mp3 and aac take planar float: frames go as fltp.
LAME_QUALITY = 7
_PYAV: dict[str, PyAVFormat] = {
    "mp3": PyAVFormat("mp3", "libmp3lame", codec_options=(("compression_level", str(LAME_QUALITY)),),
                      bit_rate_per_channel=64_000, sample_format="fltp"),
    "opus": PyAVFormat("ogg", "libopus", bit_rate_per_channel=48_000),  # a page per packet, at once
    "aac": PyAVFormat("adts", "aac", bit_rate_per_channel=64_000, sample_format="fltp"),
    "flac": PyAVFormat("flac", "flac"),
}


def pyav_settings(fmt: str) -> dict:
    """The settings a compressed format is encoded with (for records and docs)."""
    spec = _PYAV[fmt]
    return {"codec": spec.codec, "codec_options": dict(spec.codec_options),
            "bit_rate_per_channel": spec.bit_rate_per_channel, "sample_format": spec.sample_format}


def check_rate(fmt: str, sample_rate: int) -> str | None:
    """Why `fmt` cannot be sent at `sample_rate`, or None when it can."""
    if sample_rate not in SAMPLE_RATES:
        return f"sample_rate must be one of {', '.join(map(str, SAMPLE_RATES))}"
    if fmt == "opus" and sample_rate not in OPUS_RATES:
        return f"opus runs at {', '.join(map(str, sorted(OPUS_RATES)))} Hz only"
    return None


class ProfileConverter:
    """48 kHz stereo float32 [2, n] -> `sample_rate` and `channels` (mono = the mean of L and R)."""

    def __init__(self, sample_rate: int, channels: int, source_rate: int = SAMPLE_RATE_HZ):
        if channels not in (1, 2):
            raise ValueError(f"channels must be 1 or 2, got {channels}")
        self.sample_rate, self.channels, self.source_rate = int(sample_rate), int(channels), int(source_rate)
        self._stream = None
        if self.sample_rate != self.source_rate:
            import soxr

            self._stream = soxr.ResampleStream(self.source_rate, self.sample_rate, self.channels,
                                               dtype="float32", quality="HQ")

    @property
    def identity(self) -> bool:
        return self._stream is None and self.channels == NUM_CHANNELS

    def push(self, pcm: np.ndarray, *, last: bool = False) -> np.ndarray:
        if self.identity:
            return pcm
        mixed = pcm.mean(axis=0, keepdims=True, dtype=np.float32) if self.channels == 1 else pcm
        if self._stream is None:
            return mixed
        out = self._stream.resample_chunk(np.ascontiguousarray(mixed.T, dtype=np.float32), last=last)
        return np.ascontiguousarray(out.T)

    def flush(self) -> np.ndarray:
        if self._stream is None:
            return np.zeros((self.channels, 0), np.float32)
        return self.push(np.zeros((NUM_CHANNELS, 0), np.float32), last=True)


class _Sink:
    """What PyAV's muxer writes to: kept until drained (no seek: the output is a stream)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def drain(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


class StreamEncoder:
    """float32 [channels, n] pieces -> the bytes of `fmt`, progressively; one per stream. `encode`
    returns the bytes ready so far (maybe b""), `finish()` the rest. Samples are clipped and, but for
    float32, taken on the 16-bit grid round(x * 32767), so `encode_int16` (what the encoder processes
    receive) gives the very same bytes. `bit_rate` (all channels) overrides the format's default."""

    def __init__(self, fmt: str, sample_rate: int, channels: int, *, bit_rate: int | None = None):
        if fmt not in STREAM_FORMATS:
            raise ValueError(f"unknown stream format {fmt!r}: one of {', '.join(STREAM_FORMATS)}")
        problem = check_rate(fmt, sample_rate) if fmt in _PYAV else None
        if problem:
            raise ValueError(problem)
        self.fmt, self.sample_rate, self.channels = fmt, int(sample_rate), int(channels)
        self._started = False
        self._samples = 0
        # Samples in the bytes handed out so far (compressed formats: the packets' durations; an
        # encoder holds some audio back for its look-ahead).
        self.encoded_samples = 0
        # Sent but not yet handed out as bytes: always 0 here (`encode` returns its own bytes); the
        # pooled twin (`encoder_pool.PooledEncoder`) returns them later.
        self.pending_samples = 0
        self._container = self._sink = self._codec = None
        self._ogg: OggOpusWriter | None = None
        self._bit_rate = bit_rate  # None: the format's default (per channel, above)
        if fmt in _PYAV:
            self._open_pyav()

    def _open_pyav(self) -> None:
        import av

        spec = _PYAV[self.fmt]
        layout = "mono" if self.channels == 1 else "stereo"
        bit_rate = self._bit_rate or spec.bit_rate_per_channel * self.channels
        if spec.muxer == "ogg":  # the bare encoder; its packets are paged by `_page_packets`
            self._codec = av.CodecContext.create(spec.codec, "w")
            self._codec.sample_rate, self._codec.layout, self._codec.format = self.sample_rate, layout, spec.sample_format
            self._codec.time_base = Fraction(1, self.sample_rate)
            self._codec.options = dict(spec.codec_options)
            if bit_rate:
                self._codec.bit_rate = bit_rate
            self._codec.open()
            self._ogg = OggOpusWriter(bytes(self._codec.extradata))
        else:
            self._sink = _Sink()
            self._container = av.open(self._sink, "w", format=spec.muxer, options=dict(spec.muxer_options))
            stream = self._container.add_stream(spec.codec, rate=self.sample_rate, layout=layout,
                                                options=dict(spec.codec_options))
            if bit_rate:
                stream.bit_rate = bit_rate
            self._codec = stream.codec_context
        self._layout = layout
        self._planar = spec.sample_format == "fltp"

    @property
    def frame_samples(self) -> int:
        """The codec's frame, known once it has encoded (0: raw formats, sample-exact)."""
        return int(self._codec.frame_size or 0) if self._codec is not None else 0

    def encode(self, pcm: np.ndarray) -> bytes:
        pcm = np.asarray(pcm, dtype=np.float32)
        if pcm.ndim != 2 or pcm.shape[0] != self.channels:
            raise ValueError(f"expected [{self.channels}, n] audio, got shape {list(pcm.shape)}")
        header = b""
        if not self._started:
            self._started = True
            header = wav_stream_header(self.sample_rate, self.channels) if self.fmt == "wav" else b""
        if pcm.shape[1] == 0:
            return header
        if self.fmt in ("pcm", "wav"):
            self.encoded_samples += pcm.shape[1]
            return header + pcm_to_int16_bytes(pcm)
        if self.fmt == "float32":
            self.encoded_samples += pcm.shape[1]
            return np.ascontiguousarray(pcm.T, dtype="<f4").tobytes()
        if self.fmt in _G711:
            self.encoded_samples += pcm.shape[1]
            return _G711[self.fmt](np.frombuffer(pcm_to_int16_bytes(pcm), "<i2"))
        return self._mux(to_int16(pcm))

    def encode_int16(self, samples: np.ndarray) -> bytes:
        """`encode` of audio already on the 16-bit grid: int16 [channels, n] (compressed formats)."""
        if self.fmt not in _PYAV:
            raise ValueError(f"encode_int16 is for the compressed formats, not {self.fmt}")
        if samples.ndim != 2 or samples.shape[0] != self.channels:
            raise ValueError(f"expected [{self.channels}, n] samples, got shape {list(samples.shape)}")
        self._started = True
        return self._mux(samples) if samples.shape[1] else b""

    def collect(self, wait: bool = True) -> bytes:
        """Bytes still owed for audio already given to `encode`: none here (see `pending_samples`)."""
        return b""

    def _mux(self, samples: np.ndarray | None) -> bytes:
        """Encode int16 [channels, n] (None: flush) and mux what comes out."""
        import av

        assert self._codec is not None
        if samples is None:
            packets = self._codec.encode(None)
        else:
            pcm = samples.astype(np.float32) * np.float32(1 / 32767)
            if self._planar:
                frame = av.AudioFrame.from_ndarray(pcm, format="fltp", layout=self._layout)
            else:
                frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(pcm.T).reshape(1, -1), format="flt",
                                                   layout=self._layout)
            frame.sample_rate = self.sample_rate
            frame.pts = self._samples
            frame.time_base = Fraction(1, self.sample_rate)
            self._samples += pcm.shape[1]
            packets = self._codec.encode(frame)
        if self._ogg is not None:
            return self._page_packets(packets, last=samples is None)
        assert self._container is not None and self._sink is not None
        for packet in packets:
            if packet.duration and packet.time_base:
                self.encoded_samples += int(packet.duration * packet.time_base * self.sample_rate)
            self._container.mux(packet)
        return self._sink.drain()

    def _page_packets(self, packets, *, last: bool) -> bytes:
        """Opus packets -> their Ogg pages, each written now (the headers before the first; `last`:
        the encoder's flush, whose last packet ends the stream)."""
        assert self._ogg is not None
        out = [] if self._ogg.started else [self._ogg.headers()]
        pages = []
        for packet in packets:
            self.encoded_samples += int(packet.duration * packet.time_base * self.sample_rate)
            # The granule position: 48 kHz samples through this packet, the pre-skip included.
            end = int((packet.pts + packet.duration) * packet.time_base * 48_000)
            pages.append((bytes(packet), end + self._ogg.pre_skip))
        final = pages.pop() if last and pages else None
        out += [self._ogg.packet(data, granule) for data, granule in pages]
        if last:
            out.append(self._ogg.end(final))
        return b"".join(out)

    def finish(self) -> bytes:
        """The encoder's last packets and the container's trailer (or the WAV header of an empty stream)."""
        head = self.encode(np.zeros((self.channels, 0), np.float32)) if not self._started else b""
        if self._ogg is not None:
            if self._ogg.ended:
                return head
            return head + self._mux(None)
        if self._container is None:
            return head
        tail = self._mux(None)
        self._container.close()
        self._container = None
        assert self._sink is not None
        return head + tail + self._sink.drain()

    def close(self) -> None:
        """Release the encoder without finishing (a stream that was cut short)."""
        if self._ogg is not None:
            self._ogg.ended = True  # nothing more is written; the bare encoder is freed with this object
        if self._container is not None:
            with contextlib.suppress(Exception):  # a cut stream may refuse its trailer; nothing is sent now
                self._container.close()
            self._container = None
