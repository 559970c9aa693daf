"""The `ref_audio` request field -> checked clip bytes, shared by `/v1/audio/speech` and `/api/tts/stream`.

Accepted: base64 (either alphabet, padding optional), a `data:` URL, or an http(s) URL where remote
audio is allowed (`netguard`). Never a local file: a path or `file:` URL is refused first. The size
is checked from the base64 length before decoding (413); the audio itself by `clip_decode.py` in its
bounded pool.
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse

from tts_core.types import Voice

from ..settings import ServerSettings
from . import netguard
from .clip_decode import CLIP_DECODER, ClipInfo, bad, check_clip, too_large

__all__ = ["PARAM", "ClipInfo", "check_clip", "decode_base64", "decode_data_url", "download", "read_ref_audio"]

PARAM = "ref_audio"
REMOTE_AUDIO_MAX_REDIRECTS = 3  # redirects a remote `ref_audio` may take, each checked like the first URL
_PATH_LIKE = re.compile(r"^(~|\.{1,2}[\\/]|[A-Za-z]:[\\/]|/(?!/)|\\\\)")
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


# ---- inline forms -------------------------------------------------------------------------------


def decode_base64(text: str, limit: int) -> bytes:
    """Standard or URL-safe base64, whitespace and missing padding tolerated; size checked first."""
    compact = "".join(text.split()).translate(str.maketrans("-_", "+/"))
    size = len(compact) * 3 // 4 - compact[-2:].count("=")
    if size > limit:  # refused before decoding anything
        raise too_large(size, limit)
    compact += "=" * (-len(compact) % 4)
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        raise bad("is not valid base64: send the audio file's bytes base64-encoded, or a data: URL",
                   "invalid_base64") from None


def decode_data_url(text: str, limit: int) -> bytes:
    header, sep, payload = text.partition(",")
    if not sep:
        raise bad("data: URL has no ',': expected data:audio/wav;base64,<data>", "invalid_data_url")
    if header.lower().endswith(";base64"):
        return decode_base64(payload, limit)
    if len(payload) > 3 * limit:
        raise too_large(len(payload) // 3, limit)
    data = urllib.parse.unquote_to_bytes(payload)
    if len(data) > limit:
        raise too_large(len(data), limit)
    return data


async def download(url: str, settings: ServerSettings) -> bytes:
    """An http(s) `ref_audio` through the SSRF guard; every failure is a 400 (413 when too large)."""
    try:
        return await netguard.fetch(
            url, max_bytes=settings.max_upload_bytes, timeout_s=settings.remote_audio_timeout_s,
            max_redirects=REMOTE_AUDIO_MAX_REDIRECTS, allow_hosts=settings.remote_audio_allow_hosts)
    except netguard.FetchTooLarge as exc:
        raise too_large(exc.size, exc.limit) from None
    except netguard.FetchRefused as exc:
        raise bad(f"URL refused: {exc.message}", "remote_audio_refused") from None
    except netguard.FetchError as exc:
        raise bad(f"could not be downloaded: {exc.message}", "ref_audio_fetch") from None


def _inline_or_url(text: str, settings: ServerSettings) -> bytes | str:
    """Decoded bytes, or the URL to download. Never touches the file system."""
    lowered = text[:16].lower()
    if lowered.startswith("data:"):
        return decode_data_url(text, settings.max_upload_bytes)
    if lowered.startswith(("http://", "https://")):
        if not settings.allow_remote_audio:
            raise bad("URLs are disabled on this server: send the clip as base64 or a data: URL",
                       "remote_audio_disabled")
        return text
    if lowered.startswith("file:"):
        raise bad("cannot be a file: URL (the server never reads its own files): send the clip as base64 "
                   "or a data: URL", "local_path_refused")
    if len(text) < 4096 and _PATH_LIKE.match(text):
        raise bad("looks like a file path; the server never reads its own files: send the clip's bytes "
                   "as base64 or a data: URL", "local_path_refused")
    if _URL_SCHEME.match(text[:64]):  # base64 has no ':', so this is some other URL scheme
        raise bad("URL scheme is not supported: send base64, a data: URL or (where allowed) an http(s) URL",
                   "unsupported_url")
    return decode_base64(text, settings.max_upload_bytes)


# ---- the field ---------------------------------------------------------------------------------


async def read_ref_audio(value: str, settings: ServerSettings, *, synth=None, transcript: str | None = None) -> Voice:
    """The voice of a `ref_audio` field, checked, decoded and (with `synth`) encoded in the clip pool
    (`ClipDecoder.voice`); never opens a local file. Too big or too long: 413, before decoding in
    full; anything else unusable: 400; decode pool and queue full (with `synth`): 503."""
    if not isinstance(value, str):
        raise bad("must be a string: base64 audio or a data: URL", "invalid_type")
    text = value.strip()
    if not text:
        raise bad("is empty: send base64 audio or a data: URL", "empty_audio")
    found = _inline_or_url(text, settings)
    data = await download(found, settings) if isinstance(found, str) else found
    return await CLIP_DECODER.voice(data, settings, synth=synth, transcript=transcript)
