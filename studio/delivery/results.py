"""The page's recent generations, kept for download: `GET /api/tts/result/{request_id}.{mp3|flac|wav}`.

The stream route keeps the float32 audio its render encodes (after any speed change) in a
`ResultStore` (`transports.player_writer`, through `SpeechRender`'s `on_pcm` tap), so a download is
the very audio the listener heard, losslessly whatever the wire carried, encoded on request
(`tts_core.audio.encode_audio`: 16-bit WAV/FLAC, MP3). The store is bounded by total bytes and by
age, oldest first; request ids are random (64 bits), so a result is reachable only by whoever was
sent its id. A file name comes from `?name=` (the page passes voice + first words), sanitised.
"""

from __future__ import annotations

import re
import threading
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import quote

import anyio
import numpy as np
from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from tts_core.audio.io import MEDIA_TYPES, encode_audio
from tts_core.types import NUM_CHANNELS, SAMPLE_RATE_HZ

DOWNLOAD_FORMATS = ("mp3", "flac", "wav")
_ID = re.compile(r"[0-9a-f]{8,64}")
_UNSAFE = re.compile(r"[^\w\s.,'()\-]+", re.UNICODE)
MAX_NAME_CHARS = 80


@dataclass(slots=True)
class _Result:
    parts: list[np.ndarray] = field(default_factory=list)
    num_bytes: int = 0
    created: float = field(default_factory=time.monotonic)


class ResultStore:
    """PCM of recent streams by request id: LRU bounded by `max_bytes` (float32 as sent) and `max_age_s`."""

    def __init__(self, max_bytes: int = 256 * 1024 * 1024, max_age_s: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic):
        self._items: OrderedDict[str, _Result] = OrderedDict()
        self._lock = threading.Lock()
        self._bytes = 0
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self._clock = clock

    def add(self, request_id: str, pcm: np.ndarray) -> None:
        """Append `pcm` (float32 [2, n]) to `request_id`'s audio."""
        with self._lock:
            item = self._items.get(request_id)
            if item is None:
                item = self._items[request_id] = _Result(created=self._clock())
            if pcm.size:
                item.parts.append(np.asarray(pcm, dtype=np.float32))
                item.num_bytes += pcm.nbytes
                self._bytes += pcm.nbytes
            self._items.move_to_end(request_id)
            self._evict(keep=request_id)

    def get(self, request_id: str) -> np.ndarray | None:
        """The audio so far as float32 [2, n], or None when unknown or expired."""
        with self._lock:
            self._evict()
            item = self._items.get(request_id)
            if item is None or not item.parts or self._clock() - item.created > self.max_age_s:
                return None
            self._items.move_to_end(request_id)
            if len(item.parts) > 1:  # join once; later downloads reuse it
                item.parts = [np.concatenate(item.parts, axis=1)]
            return item.parts[0]

    def __len__(self) -> int:
        return len(self._items)

    @property
    def num_bytes(self) -> int:
        return self._bytes

    def _evict(self, keep: str | None = None) -> None:
        now = self._clock()
        for key in list(self._items):
            item = self._items[key]
            too_old = now - item.created > self.max_age_s
            too_big = self._bytes > self.max_bytes and key != keep
            if not (too_old or too_big):
                break  # ordered oldest-used first: the rest are newer and fit
            self._bytes -= item.num_bytes
            del self._items[key]


def download_name(name: str | None, request_id: str, fmt: str) -> str:
    """A readable, safe file name: letters, digits, spaces and a little punctuation, at most 80 chars."""
    text = unicodedata.normalize("NFC", name or "")
    text = _UNSAFE.sub(" ", text)
    text = re.sub(r"\s+", " ", text).strip(" .-")[:MAX_NAME_CHARS].strip(" .-")
    return f"{text or f'moss-tts-{request_id}'}.{fmt}"


def _not_found(message: str, param: str) -> JSONResponse:
    return JSONResponse(status_code=404, content={"error": {
        "message": message, "type": "invalid_request_error", "param": param, "code": "result_not_found"}})


def build_results_router(store: ResultStore) -> APIRouter:
    router = APIRouter()

    @router.get("/api/tts/result/{request_id}.{fmt}")
    async def result(request_id: str, fmt: str, name: str | None = None) -> Response:
        """A recent generation of the page, encoded as `fmt` (mp3, flac or 16-bit wav)."""
        if fmt not in DOWNLOAD_FORMATS:
            return _not_found(f"no download format {fmt[:16]!r}: use one of {', '.join(DOWNLOAD_FORMATS)}", "format")
        pcm = store.get(request_id) if _ID.fullmatch(request_id) else None
        if pcm is None:
            return _not_found("this result is no longer kept on the server (results expire after a while, or "
                              "when many newer ones push them out): generate it again", "request_id")
        body = await anyio.to_thread.run_sync(encode_audio, pcm, SAMPLE_RATE_HZ, fmt)
        file_name = download_name(name, request_id, fmt)
        ascii_name = file_name.encode("ascii", "replace").decode().replace("?", "_").replace('"', "'")
        disposition = f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(file_name)}"
        return Response(body, media_type=MEDIA_TYPES[fmt], headers={
            "Content-Disposition": disposition, "Cache-Control": "private, max-age=3600",
            "X-Channels": str(NUM_CHANNELS)})

    return router
