"""The player's routes: `POST /api/tts/stream` (Opus or 16-bit PCM in event frames), `GET /api/voices`
(presets and saved voices) and each preset's reference clip. (`GET /health` lives in `ops.py`, with `/metrics`.)"""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, StreamingResponse

from tts_core.audio.stretch import check_speed
from tts_core.errors import VoiceNotFoundError, VoiceUnavailableError
from tts_core.types import NUM_CHANNELS, SAMPLE_RATE_HZ

from ..delivery.speech_output import OutputSpec
from ..delivery.streaming import respond
from ..delivery.transports import player_writer, transport_headers, transport_named
from ..errors import scrub_paths
from ..service import SynthesizerService
from ..settings import ServerSettings
from .requests import STREAM, StreamBody, UploadStore, prepare, stream_fields
from .voices_api import SavedVoices

logger = logging.getLogger(__name__)


def sniff_audio_type(path: Path) -> str:
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


def build_player_router(service: SynthesizerService, settings: ServerSettings, uploads: UploadStore,
                        saved: SavedVoices | None = None) -> APIRouter:
    router = APIRouter()
    saved = saved or SavedVoices(service, settings)

    @router.post("/api/tts/stream")
    async def tts_stream(body: StreamBody, http_request: Request) -> StreamingResponse:
        """48 kHz stereo streamed as it is generated, in [u32 length][u8 kind][payload] frames (kind 0
        audio, kind 1 JSON event); the audio as `transport` says (opus: one Ogg/Opus stream, the
        default; s16: 16-bit PCM; see transports.py)."""
        synth = service.get()
        speed = 1.0 if body.speed is None else check_speed(body.speed)
        transport = transport_named(body.transport)
        prepared = await prepare(stream_fields(body), STREAM, synth=synth, settings=settings, uploads=uploads,
                                 saved=saved.voice)
        spec = OutputSpec(transport.fmt, speed=speed, captions=True)
        headers = {"X-Sample-Rate": str(SAMPLE_RATE_HZ), "X-Channels": str(NUM_CHANNELS), **transport_headers(transport)}
        what = (f"player, {len(body.text)} chars, voice {prepared.voice_label}, mode {prepared.request.mode}, "
                f"speed {speed:g}, {transport.name}")
        # The float32 it encodes is kept for GET /api/tts/result/{id}.flac (after any stretch).
        return await respond(synth, prepared.request, http_request,
                             writer=lambda stream: player_writer(transport, spec, request_id=stream.id,
                                                                 http_request=http_request),
                             media_type="application/octet-stream", headers=headers,
                             label=f"player-{transport.name}", what=what, speed=speed)

    @router.get("/api/voices")
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
            "saved": saved.listing(),  # "My voices": ids usable as `voice`
        }

    @router.get("/api/voices/{name}/clip")
    def voice_clip(name: str) -> FileResponse:
        """A preset's reference clip, for audition. `name` is only ever matched against the catalog."""
        synth = service.get()
        if name not in {p.name for p in synth.list_voices()}:
            raise VoiceNotFoundError(f"no preset voice named {name!r}; GET /api/voices lists them", param="name")
        path = synth.voice_clip_path(name)
        if path is None or not Path(path).is_file():
            raise VoiceUnavailableError(f"the reference clip of {name!r} is not available on this server", param="name")
        return FileResponse(path, media_type=sniff_audio_type(Path(path)), headers={"Cache-Control": "max-age=3600"})

    return router
