"""The web app around one Synthesizer: raw-PCM streaming, health, preset clips, player, Gradio UI.

`create_app(service, settings)` returns a FastAPI app. Its own routes are declared first and the
Gradio page is mounted last at `/`, so nothing of ours is shadowed (TOOLCHAIN §3). The player's
static files live under `/player`, never `/static` or `/assets` (Gradio owns those prefixes).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import quote

import anyio
import gradio as gr
import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict

from .api_openai import build_openai_router
from .config import SamplingParams
from .errors import InvalidRequestError, TTSError, VoiceNotFoundError, VoiceUnavailableError
from .http_errors import install_error_handlers, sanitize_health, scrub_paths
from .http_guard import install_http_guards
from .http_stream import open_stream
from .ref_audio import check_clip, read_ref_audio
from .service import ServiceState, SynthesizerService
from .settings import ServerSettings
from .types import NUM_CHANNELS, SAMPLE_RATE_HZ, AudioChunk, SynthesisRequest, Voice

logger = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
_SAMPLING_FIELDS = tuple(SamplingParams.__dataclass_fields__)


class UploadStore:
    """Reference clips the page uploaded, kept in memory by content hash (bounded LRU).

    The Gradio handler stores an upload once and hands the player only its id, so a clip does not
    travel server → browser → server as base64 on every click.
    """

    def __init__(self, max_items: int = 32, max_total_bytes: int = 256 * 1024 * 1024):
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self._max_items = max_items
        self._max_total_bytes = max_total_bytes

    def put(self, data: bytes) -> str:
        key = hashlib.sha256(data).hexdigest()[:24]
        with self._lock:
            self._items[key] = data
            self._items.move_to_end(key)
            while len(self._items) > self._max_items or (
                len(self._items) > 1 and sum(map(len, self._items.values())) > self._max_total_bytes
            ):
                self._items.popitem(last=False)
        return key

    def get(self, key: str) -> bytes:
        with self._lock:
            data = self._items.get(key)
            if data is not None:
                self._items.move_to_end(key)
        if data is None:
            raise InvalidRequestError(
                "the uploaded reference clip is no longer on the server; upload it again",
                param="ref_audio_id",
                code="upload_expired",
            )
        return data


class StreamBody(BaseModel):
    """JSON body of POST /api/tts/stream. Unknown fields are refused so typos do not pass silently."""

    model_config = ConfigDict(extra="forbid")

    text: str
    voice: str | None = None
    ref_audio: str | None = None  # base64, data: URL, or (with --allow-remote-audio) an http(s) URL
    ref_audio_id: str | None = None  # an upload the page stored in UploadStore
    ref_text: str | None = None
    mode: str | None = None  # default: continuation when ref_text is given, else voice_clone
    seed: int | None = None
    max_frames: int | None = None
    do_sample: bool | None = None
    audio_temperature: float | None = None
    audio_top_p: float | None = None
    audio_top_k: int | None = None
    audio_repetition_penalty: float | None = None
    text_temperature: float | None = None
    text_top_p: float | None = None
    text_top_k: int | None = None


async def build_request(body: StreamBody, settings: ServerSettings, uploads: UploadStore) -> SynthesisRequest:
    """Validate the JSON body into a SynthesisRequest; every error names the field to fix."""
    if len(body.text) > settings.max_text_chars:
        raise InvalidRequestError(
            f"text is {len(body.text)} characters; the limit is {settings.max_text_chars}: split it into parts",
            param="text",
            code="text_too_long",
        )
    if body.ref_audio and body.ref_audio_id:
        raise InvalidRequestError("give ref_audio or ref_audio_id, not both", param="ref_audio")
    audio = None
    if body.ref_audio_id:
        audio = uploads.get(body.ref_audio_id)
        await anyio.to_thread.run_sync(check_clip, audio, settings)  # the same limits as ref_audio
    elif body.ref_audio is not None:
        audio = await read_ref_audio(body.ref_audio, settings)  # base64 / data: URL / allowed http(s); never a path
    if audio is not None and body.voice:
        raise InvalidRequestError("give either a preset voice or a reference clip, not both", param="voice")
    if audio is None and body.ref_text:
        raise InvalidRequestError("ref_text is the transcript of ref_audio: send the clip too", param="ref_text")
    voice = Voice.from_audio(audio, transcript=body.ref_text) if audio is not None else body.voice
    mode = body.mode or ("continuation" if body.ref_text else "voice_clone")
    sampling = SamplingParams(**{k: v for k in _SAMPLING_FIELDS if (v := getattr(body, k)) is not None})
    return SynthesisRequest(
        text=body.text, voice=voice, mode=mode, sampling=sampling, seed=body.seed, max_frames=body.max_frames
    )


def pcm_bytes(chunk: AudioChunk) -> bytes:
    """[2, n] float32 → interleaved little-endian float32 bytes (L0 R0 L1 R1 …)."""
    return np.ascontiguousarray(chunk.pcm.T, dtype="<f4").tobytes()  # [n, 2]


async def _pcm_body(gen: Iterator[AudioChunk], first: AudioChunk | None, request_id: str) -> AsyncIterator[bytes]:
    """Stream the chunks; on the way out (end, error, or client disconnect) close the synth generator.

    Starlette cancels this iterator when the client disconnects. The pending `next()` runs in a worker
    thread that cannot be interrupted, so cancellation takes effect when it returns (one chunk at most);
    then `gen.close()` cancels the request in the engine and frees its slot.
    """
    started = time.monotonic()
    num_frames, outcome = 0, "cancelled"
    try:
        chunk = first
        while chunk is not None:
            num_frames += chunk.pcm.shape[1]
            if chunk.pcm.shape[1]:
                yield pcm_bytes(chunk)
            chunk = None if chunk.is_last else await anyio.to_thread.run_sync(next, gen, None)
        outcome = "done"
    except Exception as exc:  # headers are gone: abort the connection so the client sees a broken stream
        outcome = "failed"
        logger.error("stream %s failed mid-way: %s", request_id, exc, exc_info=not isinstance(exc, TTSError))
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(gen.close)
        logger.info(
            "stream %s %s: %.2f s of audio in %.2f s",
            request_id, outcome, num_frames / SAMPLE_RATE_HZ, time.monotonic() - started,
        )


class _ClosingStreamingResponse(StreamingResponse):
    """Closes its body iterator even when the client left while a chunk was being sent.

    Starlette cancels the sending task on disconnect; if that happens outside the iterator (in
    `send`), the iterator would otherwise stay open until garbage collection, holding the slot.
    """

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


def _sniff_audio_type(path: Path) -> str:
    """Preset clips are named .wav but some hold FLAC or MP3 data (see the data MANIFEST)."""
    with open(path, "rb") as f:
        head = f.read(12)
    if head[:4] == b"RIFF":
        return "audio/wav"
    if head[:4] == b"fLaC":
        return "audio/flac"
    if head[:4] == b"OggS":
        return "audio/ogg"
    if head[:3] == b"ID3" or head[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"):
        return "audio/mpeg"
    return "application/octet-stream"


def create_app(service: SynthesizerService, settings: ServerSettings) -> FastAPI:
    """Build the FastAPI app: streaming + helper routes, the OpenAI router, /player, then Gradio at /."""
    from .ui import build_ui  # imported here: ui imports this module for its helpers

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        service.start()  # loads in a background thread; the page is served meanwhile
        yield
        service.close()

    app = FastAPI(title="MOSS-TTS-Nano Studio", lifespan=lifespan)
    install_error_handlers(app)
    install_http_guards(app, settings)  # body-size limits and same-origin CORS, for Gradio's routes too
    uploads = UploadStore(max_total_bytes=max(256 * 1024 * 1024, 4 * settings.max_upload_bytes))
    app.state.uploads = uploads

    @app.post("/api/tts/stream")
    async def tts_stream(body: StreamBody, http_request: Request) -> StreamingResponse:
        """Raw little-endian float32 interleaved stereo at 48 kHz, streamed as it is generated."""
        synth = service.get()
        request = await build_request(body, settings, uploads)
        gen, first = await open_stream(synth, request, http_request)
        request_id = uuid.uuid4().hex[:16]
        voice = body.voice or ("<upload>" if (body.ref_audio or body.ref_audio_id) else synth.default_voice)
        logger.info("stream %s: %d chars, voice %s, mode %s", request_id, len(body.text), voice, request.mode)
        headers = {
            "X-Sample-Rate": str(SAMPLE_RATE_HZ),
            "X-Channels": str(NUM_CHANNELS),
            "X-Sample-Format": "f32le",
            "X-Request-Id": request_id,
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",  # no MIME sniffing delay before the first bytes
            "X-Accel-Buffering": "no",  # reverse proxies (Spaces) must not buffer the stream
        }
        return _ClosingStreamingResponse(
            _pcm_body(gen, first, request_id), media_type="application/octet-stream", headers=headers
        )

    @app.get("/health")
    def health() -> dict:
        out: dict = {"status": service.state.value, "message": service.status, "error": service.error}
        if service.state is ServiceState.READY:
            synth = service.get()
            out = {**synth.health(), **out, "stats": synth.stats()}
        return sanitize_health(out)  # checkpoint paths and load errors never leave the server

    @app.get("/api/voices")
    def voices() -> dict:
        synth = service.get()
        return {
            "default": synth.default_voice,
            "voices": [
                {
                    "name": p.name,
                    "language": p.language,
                    "gender": p.gender,
                    "description": p.description,
                    "available": p.available,
                    "unavailable_reason": scrub_paths(p.unavailable_reason),
                    "clip_url": f"/api/voices/{quote(p.name, safe='')}/clip" if p.has_clip else None,
                }
                for p in synth.list_voices()
            ],
        }

    @app.get("/api/voices/{name}/clip")
    def voice_clip(name: str) -> FileResponse:
        """A preset's reference clip, for audition. `name` is only ever matched against the catalog."""
        synth = service.get()
        if name not in {p.name for p in synth.list_voices()}:
            raise VoiceNotFoundError(f"no preset voice named {name!r}; GET /api/voices lists them", param="name")
        path = synth.voice_clip_path(name)
        if path is None or not Path(path).is_file():
            raise VoiceUnavailableError(f"the reference clip of {name!r} is not available on this server", param="name")
        return FileResponse(path, media_type=_sniff_audio_type(Path(path)), headers={"Cache-Control": "max-age=3600"})

    app.include_router(build_openai_router(service, settings))
    app.mount("/player", StaticFiles(directory=STATIC_DIR), name="player")

    demo = build_ui(service, settings, uploads)
    return gr.mount_gradio_app(
        app,
        demo,
        path="/",
        head='<script src="/player/bridge.js" defer></script>',
        css_paths=[STATIC_DIR / "ui.css"],
        footer_links=["settings"],  # the UI's events are private; /docs documents the HTTP API
        max_file_size=settings.max_upload_bytes,
        theme=gr.themes.Soft(),
    )
