"""Audio I/O: read reference clips, prepare codec input, encode output. Pure functions on numpy float32.

Decoding and encoding go through libsndfile (python-soundfile), which reads and writes WAV, FLAC,
OGG/Vorbis, OGG/Opus and MP3; resampling is soxr. The container is sniffed from the bytes, never from a
file name: several "*.wav" voices in the wild are really FLAC or MP3.
"""

from __future__ import annotations

import io
import logging
import os
import struct

import numpy as np
import soundfile as sf
import soxr

from ..errors import InvalidRequestError
from ..types import SAMPLE_RATE_HZ

logger = logging.getLogger(__name__)

MAX_CHANNELS = 8
MIN_DURATION_S = 0.08  # one codec frame: anything shorter cannot yield a single code frame
MAX_SAMPLE_RATE_HZ = 384_000

AUDIO_FORMATS: tuple[str, ...] = ("wav", "flac", "mp3", "opus", "pcm", "float32")
# "pcm" is raw little-endian signed 16-bit, channels interleaved (OpenAI's name); "float32" is raw
# little-endian float32, interleaved. Neither has a header.
MEDIA_TYPES: dict[str, str] = {
    "wav": "audio/wav",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "pcm": "audio/L16",
    "float32": "application/octet-stream",
}
# (libsndfile container, subtype, sample rates the codec accepts or None for any)
_WRITERS: dict[str, tuple[str, str, frozenset[int] | None]] = {
    "wav": ("WAV", "PCM_16", None),
    "flac": ("FLAC", "PCM_16", None),
    "mp3": (
        "MP3",
        "MPEG_LAYER_III",
        frozenset({8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000}),
    ),
    "opus": ("OGG", "OPUS", frozenset({8000, 12000, 16000, 24000, 48000})),
}


def _reject(message: str, code: str = "invalid_audio") -> InvalidRequestError:
    return InvalidRequestError(message, param="ref_audio", code=code)


def sniff_container(data: bytes) -> str | None:
    """The container named by the first bytes: 'wav', 'flac', 'ogg', 'mp3' or None."""
    if len(data) >= 12 and data[:4] in (b"RIFF", b"RF64") and data[8:12] == b"WAVE":
        return "wav"
    if data[:4] == b"fLaC":
        return "flac"
    if data[:4] == b"OggS":
        return "ogg"
    if data[:3] == b"ID3":
        return "mp3"
    if len(data) >= 2 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0:  # bare MPEG audio frame sync
        return "mp3"
    return None


def load_audio(path_or_bytes: str | os.PathLike | bytes | bytearray | memoryview) -> tuple[np.ndarray, int]:
    """Decode a clip -> (float32 [C, n] in [-1, 1], sample_rate). Raises only
    InvalidRequestError(param="ref_audio"): a missing file, bytes that are not audio, an unknown
    container, under MIN_DURATION_S, more than 8 channels, or non-finite samples."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data = bytes(path_or_bytes)
        source = "uploaded audio"
    elif isinstance(path_or_bytes, (str, os.PathLike)):
        source = os.fspath(path_or_bytes)
        try:
            with open(source, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise _reject(f"cannot read reference audio {source}: {exc.strerror or exc}") from exc
    else:
        raise _reject("reference audio must be a file path or bytes")
    if not data:
        raise _reject(f"{source} is empty: upload a 3-10 s WAV, FLAC, OGG or MP3 clip", code="empty_audio")
    container = sniff_container(data)
    if container is None:
        raise _reject(f"{source} is not a supported audio file (expected WAV, FLAC, OGG or MP3 data)")
    try:
        samples, sample_rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception as exc:  # libsndfile / decoder failures of any kind become one clear message
        raise _reject(f"{source} looks like {container.upper()} but cannot be decoded ({exc})") from exc
    frames, channels = samples.shape
    if channels < 1 or channels > MAX_CHANNELS:
        raise _reject(f"{source} has {channels} channels; at most {MAX_CHANNELS} are supported")
    if not 1 <= sample_rate <= MAX_SAMPLE_RATE_HZ:
        raise _reject(f"{source} has an unusable sample rate {sample_rate} Hz")
    if frames == 0:
        raise _reject(f"{source} holds no audio samples (zero length)", code="empty_audio")
    if frames < MIN_DURATION_S * sample_rate:
        raise _reject(
            f"{source} is {frames / sample_rate * 1000:.1f} ms long; the reference clip needs at least "
            f"{MIN_DURATION_S * 1000:.0f} ms (3-10 s works best)",
            code="audio_too_short",
        )
    if not np.isfinite(samples).all():
        raise _reject(f"{source} contains NaN or infinite samples")
    return np.ascontiguousarray(samples.T), int(sample_rate)  # [C, n]


def to_codec_input(wav: np.ndarray, sample_rate: int) -> np.ndarray:
    """Any clip [C, n] (or [n]) -> float32 [2, m] at 48 kHz, m = round(n * 48000 / sample_rate). Mono
    is duplicated, stereo kept, and of more channels the first two kept (front left/right; a downmix
    could cancel), as the reference does. No loudness or DC normalisation (docs/spec/CODEC.md §3.1)."""
    wav = np.asarray(wav)
    if wav.ndim == 1:
        wav = wav[None]
    if wav.ndim != 2 or wav.shape[0] < 1 or wav.shape[1] < 1:
        raise _reject(f"audio must be [channels, samples] with samples >= 1, got shape {list(wav.shape)}")
    if (
        isinstance(sample_rate, bool)
        or not isinstance(sample_rate, (int, np.integer))
        or not (1 <= sample_rate <= MAX_SAMPLE_RATE_HZ)
    ):
        raise _reject(f"sample_rate must be a positive integer <= {MAX_SAMPLE_RATE_HZ}, got {sample_rate!r}")
    if not np.issubdtype(wav.dtype, np.floating) or not np.isfinite(wav).all():
        raise _reject("audio samples must be finite floats")
    stereo = np.repeat(wav[:1], 2, axis=0) if wav.shape[0] == 1 else wav[:2]
    stereo = stereo.astype(np.float32, copy=False)
    sample_rate = int(sample_rate)
    if sample_rate == SAMPLE_RATE_HZ:
        return np.ascontiguousarray(stereo)
    target = (stereo.shape[1] * SAMPLE_RATE_HZ + sample_rate // 2) // sample_rate
    out = soxr.resample(np.ascontiguousarray(stereo.T), sample_rate, SAMPLE_RATE_HZ, quality="VHQ")  # [m, 2]
    out = out[:target]
    if out.shape[0] < target:  # soxr already returns round(n * ratio); this only guards edge cases
        out = np.pad(out, ((0, target - out.shape[0]), (0, 0)))
    return np.ascontiguousarray(out.T, dtype=np.float32)


def _check_pcm(pcm: np.ndarray) -> np.ndarray:
    pcm = np.asarray(pcm)
    if pcm.ndim != 2 or not 1 <= pcm.shape[0] <= MAX_CHANNELS:
        raise ValueError(f"pcm must be [channels, samples], got shape {list(pcm.shape)}")
    return pcm


def to_int16(pcm: np.ndarray) -> np.ndarray:
    """float [C, n] -> int16 [C, n] on the 16-bit grid every encoder takes its input from: clip to
    [-1, 1], round(x * 32767) (NaN -> 0). Three passes over the audio (scale, round, clip into
    int16), so a server streaming hundreds of listeners spends little on it; infinite or NaN
    samples (seen by the sum) take a slower exact path."""
    scaled = np.multiply(pcm, np.float32(32767.0), dtype=np.float32)
    if not np.isfinite(np.add.reduce(scaled, axis=None)):
        np.nan_to_num(scaled, copy=False)  # NaN -> 0, +-inf -> +-max: clipped below
    np.rint(scaled, out=scaled)
    out = np.empty(scaled.shape, np.int16)
    np.clip(scaled, -32767.0, 32767.0, out=out, casting="unsafe")
    return out


def _to_int16(pcm: np.ndarray) -> np.ndarray:
    """[C, n] float -> int16 [n, C], channels interleaved (see `to_int16`)."""
    planar = to_int16(pcm)
    if planar.shape[0] == 1:
        return planar.reshape(-1, 1)
    out = np.empty(planar.shape[::-1], np.int16)
    for channel, samples in enumerate(planar):  # a strided copy per channel: cheaper than a transpose
        out[:, channel] = samples
    return out


def pcm_to_int16_bytes(pcm: np.ndarray) -> bytes:
    """float [C, n] -> raw little-endian int16, channels interleaved (L0 R0 L1 R1 ...)."""
    return _to_int16(_check_pcm(pcm)).astype("<i2", copy=False).tobytes()


def wav_stream_header(sample_rate: int, channels: int) -> bytes:
    """44-byte 16-bit PCM WAV header for a stream of unknown length (RIFF and data sizes 0xFFFFFFFF,
    the "until the connection closes" marker browsers, ffmpeg and libsndfile accept)."""
    if sample_rate < 1 or not 1 <= channels <= MAX_CHANNELS:
        raise ValueError(f"bad stream header parameters: {sample_rate} Hz, {channels} channels")
    block_align = channels * 2
    unknown = 0xFFFFFFFF
    return (
        b"RIFF"
        + struct.pack("<I", unknown)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<IHHIIHH", 16, 1, channels, sample_rate, sample_rate * block_align, block_align, 16)
        + b"data"
        + struct.pack("<I", unknown)
    )


def encode_audio(pcm: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """float [C, n] -> a whole file in `fmt` (one of AUDIO_FORMATS): wav/flac/pcm 16-bit (clipped,
    round(x * 32767)); mp3 and opus lossy encodes of the clipped signal; float32 raw, unclipped."""
    if fmt not in AUDIO_FORMATS:
        raise InvalidRequestError(
            f"unsupported audio format {fmt!r}: choose one of {', '.join(AUDIO_FORMATS)}",
            param="response_format",
        )
    pcm = _check_pcm(pcm)
    if fmt == "pcm":
        return pcm_to_int16_bytes(pcm)
    if fmt == "float32":
        return np.ascontiguousarray(pcm.T, dtype="<f4").tobytes()
    container, subtype, rates = _WRITERS[fmt]
    if not sf.check_format(container, subtype):
        raise InvalidRequestError(
            f"this server's libsndfile {sf.__libsndfile_version__} cannot write {fmt}; choose another format",
            param="response_format",
            code="unsupported_format",
        )
    if rates is not None and sample_rate not in rates:
        raise ValueError(f"{fmt} cannot be written at {sample_rate} Hz (supported: {sorted(rates)})")
    if fmt in ("wav", "flac"):
        frames = _to_int16(pcm)  # int16 is written verbatim: no libsndfile scaling or wrap-around
    else:
        frames = np.clip(np.nan_to_num(pcm.astype(np.float32, copy=False)), -1.0, 1.0).T
    buffer = io.BytesIO()
    sf.write(buffer, np.ascontiguousarray(frames), sample_rate, format=container, subtype=subtype)
    return buffer.getvalue()
