"""The `ref_audio` request field -> checked clip bytes, shared by `/v1/audio/speech` and `/api/tts/stream`.

Accepted: base64 (standard or URL-safe alphabet, padding optional), a `data:` URL (base64 or
percent-encoded), or an http(s) URL where the server allows remote audio (fetched through
`tts_core.web.netguard`). Never a local file: a string that looks like a path or a `file:` URL is
refused before anything else happens.

Limits, all from `ServerSettings`, all checked before the clip is decoded in full:
- size: `max_upload_bytes`, from the base64 length before decoding (413);
- length: `max_ref_audio_s`, from the header and again while decoding block by block, so a
  compressed file that understates its length cannot make the server decode ten minutes (413);
- shape: at most `ref_audio_max_channels` channels, at least `ref_audio_min_sample_rate_hz` (400);
- content: empty, truncated, unknown or undecodable data, under one codec frame (400).
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import urllib.parse
from dataclasses import dataclass

import anyio
import soundfile as sf

from ..audio import MAX_SAMPLE_RATE_HZ, MIN_DURATION_S, sniff_container
from ..errors import InvalidRequestError, PayloadTooLargeError
from . import netguard
from .settings import ServerSettings

PARAM = "ref_audio"
_PATH_LIKE = re.compile(r"^(~|\.{1,2}[\\/]|[A-Za-z]:[\\/]|/(?!/)|\\\\)")
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_SCAN_BLOCK_FRAMES = 1 << 16


@dataclass(frozen=True, slots=True)
class ClipInfo:
    """What the checks found: the container, sample rate, channels and exact length in frames."""

    container: str
    sample_rate: int
    channels: int
    frames: int

    @property
    def seconds(self) -> float:
        return self.frames / self.sample_rate


def _bad(message: str, code: str, param: str = PARAM) -> InvalidRequestError:
    return InvalidRequestError(f"{param} {message}", param=param, code=code)


def _human(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"


def _too_large(size: int, limit: int, param: str = PARAM) -> PayloadTooLargeError:
    return PayloadTooLargeError(f"{param} is {_human(size)}; the limit is {_human(limit)}: send a shorter clip "
                                "(3-10 s is best)", param=param, code="ref_audio_too_large")


def _too_long(limit: float, seconds: float | None = None, param: str = PARAM) -> PayloadTooLargeError:
    shown = f"{seconds:.1f} s" if seconds is not None else f"more than {limit:g} s"
    return PayloadTooLargeError(f"{param} is {shown} long; the limit is {limit:g} s: send a 3-10 s clip",
                                param=param, code="ref_audio_too_long")


# ---- inline forms -------------------------------------------------------------------------------


def decode_base64(text: str, limit: int) -> bytes:
    """Standard or URL-safe base64, whitespace and missing padding tolerated; size checked first."""
    compact = "".join(text.split()).translate(str.maketrans("-_", "+/"))
    size = len(compact) * 3 // 4 - compact[-2:].count("=")
    if size > limit:  # refused before decoding anything
        raise _too_large(size, limit)
    compact += "=" * (-len(compact) % 4)
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        raise _bad("is not valid base64: send the audio file's bytes base64-encoded, or a data: URL",
                   "invalid_base64") from None


def decode_data_url(text: str, limit: int) -> bytes:
    header, sep, payload = text.partition(",")
    if not sep:
        raise _bad("data: URL has no ',': expected data:audio/wav;base64,<data>", "invalid_data_url")
    if header.lower().endswith(";base64"):
        return decode_base64(payload, limit)
    if len(payload) > 3 * limit:
        raise _too_large(len(payload) // 3, limit)
    data = urllib.parse.unquote_to_bytes(payload)
    if len(data) > limit:
        raise _too_large(len(data), limit)
    return data


async def download(url: str, settings: ServerSettings) -> bytes:
    """An http(s) `ref_audio` through the SSRF guard; every failure is a 400 (413 when too large)."""
    try:
        return await netguard.fetch(
            url, max_bytes=settings.max_upload_bytes, timeout_s=settings.remote_audio_timeout_s,
            max_redirects=settings.remote_audio_max_redirects, allow_hosts=settings.remote_audio_allow_hosts)
    except netguard.FetchTooLarge as exc:
        raise _too_large(exc.size, exc.limit) from None
    except netguard.FetchRefused as exc:
        raise _bad(f"URL refused: {exc.message}", "remote_audio_refused") from None
    except netguard.FetchError as exc:
        raise _bad(f"could not be downloaded: {exc.message}", "ref_audio_fetch") from None


def _inline_or_url(text: str, settings: ServerSettings) -> bytes | str:
    """Decoded bytes, or the URL to download. Never touches the file system."""
    lowered = text[:16].lower()
    if lowered.startswith("data:"):
        return decode_data_url(text, settings.max_upload_bytes)
    if lowered.startswith(("http://", "https://")):
        if not settings.allow_remote_audio:
            raise _bad("URLs are disabled on this server: send the clip as base64 or a data: URL",
                       "remote_audio_disabled")
        return text
    if lowered.startswith("file:"):
        raise _bad("cannot be a file: URL (the server never reads its own files): send the clip as base64 "
                   "or a data: URL", "local_path_refused")
    if len(text) < 4096 and _PATH_LIKE.match(text):
        raise _bad("looks like a file path; the server never reads its own files: send the clip's bytes "
                   "as base64 or a data: URL", "local_path_refused")
    if _URL_SCHEME.match(text[:64]):  # base64 has no ':', so this is some other URL scheme
        raise _bad("URL scheme is not supported: send base64, a data: URL or (where allowed) an http(s) URL",
                   "unsupported_url")
    return decode_base64(text, settings.max_upload_bytes)


# ---- clip checks --------------------------------------------------------------------------------


def check_clip(data: bytes, settings: ServerSettings, param: str = PARAM) -> ClipInfo:
    """Check a clip's bytes against the limits without ever holding more than one block decoded.

    Raises PayloadTooLargeError (413: too big, too long) or InvalidRequestError (400: anything
    else unusable). Blocking (it decodes): call it from a worker thread in async code.
    """
    if len(data) > settings.max_upload_bytes:
        raise _too_large(len(data), settings.max_upload_bytes, param)
    if not data:
        raise _bad("is empty: send a 3-10 s WAV, FLAC, OGG or MP3 clip", "empty_audio", param)
    container = sniff_container(data)
    if container is None:
        raise _bad("is not a supported audio file (expected WAV, FLAC, OGG or MP3 data)", "invalid_audio", param)
    try:
        handle = sf.SoundFile(io.BytesIO(data))
    except Exception:  # libsndfile's messages carry object addresses; ours says what to do
        raise _bad(f"looks like {container.upper()} but cannot be decoded (truncated or corrupt): "
                   "send a complete audio file", "invalid_audio", param) from None
    with handle:
        rate, channels = int(handle.samplerate), int(handle.channels)
        if channels < 1 or channels > settings.ref_audio_max_channels:
            raise _bad(f"has {channels} channels; send a mono or stereo recording", "too_many_channels", param)
        if rate < settings.ref_audio_min_sample_rate_hz or rate > MAX_SAMPLE_RATE_HZ:
            raise _bad(f"is sampled at {rate} Hz; voice cloning needs {settings.ref_audio_min_sample_rate_hz} Hz "
                       "or more (the output is 48 kHz): send a better recording", "bad_sample_rate", param)
        max_frames = int(settings.max_ref_audio_s * rate)
        declared = int(handle.frames)
        if 0 < declared < 2**62 and declared > max_frames:
            raise _too_long(settings.max_ref_audio_s, declared / rate, param)
        frames = 0
        try:  # the header may understate a compressed file's length: count while decoding, then stop
            while frames <= max_frames:
                block = handle.read(min(_SCAN_BLOCK_FRAMES, max_frames + 1 - frames), dtype="float32")
                if len(block) == 0:
                    break
                frames += len(block)
        except Exception:
            raise _bad(f"{container.upper()} data is corrupt part-way through: send a complete audio file",
                       "invalid_audio", param) from None
    if frames > max_frames:
        raise _too_long(settings.max_ref_audio_s, None, param)  # counted up to the limit, then stopped
    if frames == 0:
        raise _bad("holds no audio samples", "empty_audio", param)
    if frames < MIN_DURATION_S * rate:
        length = f"{frames} sample{'s' if frames > 1 else ''}" if frames < 16 else f"{frames / rate * 1000:.1f} ms"
        raise _bad(f"is {length} long; it needs at least {MIN_DURATION_S * 1000:.0f} ms (3-10 s works best)",
                   "audio_too_short", param)
    return ClipInfo(container, rate, channels, frames)


async def read_ref_audio(value: str, settings: ServerSettings) -> bytes:
    """Bytes of a `ref_audio` field, checked by `check_clip`: base64, a data: URL, or an allowed URL.

    Never opens a local file, whatever the string looks like. Too big or too long: 413, before
    decoding in full; anything else unusable: 400. No other exception type escapes.
    """
    if not isinstance(value, str):
        raise _bad("must be a string: base64 audio or a data: URL", "invalid_type")
    text = value.strip()
    if not text:
        raise _bad("is empty: send base64 audio or a data: URL", "empty_audio")
    found = _inline_or_url(text, settings)
    data = await download(found, settings) if isinstance(found, str) else found
    await anyio.to_thread.run_sync(check_clip, data, settings)
    return data
