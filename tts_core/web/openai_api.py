"""OpenAI-compatible speech API: `POST /v1/audio/speech`, `GET /v1/voices`, `GET /v1/models`.

Differences from OpenAI's API, all deliberate:
- Audio is 48 kHz stereo in every format (OpenAI's `pcm` is 24 kHz mono); `X-Sample-Rate` and
  `X-Channels` say so. `pcm` is 16-bit little-endian, interleaved L R L R.
- `voice` names a preset of this server (case-insensitive). OpenAI's built-in names that are not
  presets (alloy, echo, ...) fall back to the server's default voice so OpenAI scripts run
  unchanged; the `X-Voice` header says which preset spoke. Other unknown names: 404 listing presets.
- `speed` must be 1.0 (the model has no rate control); `instructions` is accepted and ignored.
- `stream: true` streams `pcm` and `wav` as they are generated (a WAV header with "unknown"
  sizes first) and is refused for mp3/flac/opus. `stream_format: "audio"` (OpenAI's default)
  streams pcm/wav too and, for the other formats, returns the whole file once it is encoded.
- Extensions: `ref_audio` (voice cloning from a base64 or data: URL clip, decoded and checked by
  `web/ref_audio.py`), `ref_text` (its transcript, switching to continuation mode), `seed`, sampling
  fields, `max_frames`.

Every error is raised before the first byte of audio, so it arrives as OpenAI's JSON error shape.
Schemas live in `web/openai_schemas.py`; the body is checked and mapped by `web/requests.py`.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
import uuid

from anyio import to_thread
from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..audio import encode_audio, wav_stream_header
from ..errors import InvalidRequestError
from ..types import NUM_CHANNELS, SAMPLE_RATE_HZ
from .errors import ModelNotFoundError, public_checkpoint_name, scrub_paths
from .openai_schemas import (
    MEDIA_TYPES,
    OPENAI_MODEL_ALIASES,
    SPEECH_RESPONSES,
    STREAMABLE_FORMATS,
    ErrorResponse,
    ModelCard,
    ModelList,
    SpeechRequest,
    VoiceInfo,
    VoiceList,
)
from .requests import OPENAI, openai_fields, prepare
from .service import SynthesizerService
from .settings import ServerSettings
from .streaming import ClosingStreamingResponse, collect, open_stream, s16_bytes

logger = logging.getLogger(__name__)


def _check_model(name: str, settings: ServerSettings) -> None:
    key = name.strip().lower()
    lm = settings.lm_id.lower()
    accepted = {settings.model_name.lower(), lm, lm.rsplit("/", 1)[-1], *OPENAI_MODEL_ALIASES}
    if key in accepted or key.startswith(OPENAI_MODEL_ALIASES) or "moss-tts-nano" in key:
        return
    raise ModelNotFoundError(
        f"model {name[:80]!r} is not served here: use '{settings.model_name}' "
        f"(OpenAI's {', '.join(OPENAI_MODEL_ALIASES)} are accepted as aliases)",
        param="model", code="model_not_found",
    )


def _check_envelope(body: SpeechRequest, settings: ServerSettings) -> None:
    """The OpenAI-only fields: model, speed and the output options (the rest is `requests.prepare`)."""
    _check_model(body.model, settings)
    if body.speed != 1.0:
        raise InvalidRequestError(
            f"speed {body.speed} is not supported: this model speaks at its natural rate; send 1.0 or omit it",
            param="speed", code="unsupported_value",
        )
    if body.stream_format == "sse":
        raise InvalidRequestError(
            "stream_format 'sse' is not supported: use 'audio' (raw audio, streamed for pcm and wav)",
            param="stream_format", code="unsupported_value",
        )
    if body.stream and body.response_format not in STREAMABLE_FORMATS:
        raise InvalidRequestError(
            f"stream is only available for response_format pcm or wav, not {body.response_format}: "
            "ask for pcm/wav or drop stream to get the whole file",
            param="stream", code="unsupported_value",
        )


def _headers(fmt: str, voice_label: str) -> dict[str, str]:
    # Preset names may be non-ASCII; header values must be latin-1, so the name is percent-encoded.
    headers = {"X-Sample-Rate": str(SAMPLE_RATE_HZ), "X-Channels": str(NUM_CHANNELS),
               "X-Voice": urllib.parse.quote(voice_label, safe=" -_.()"),
               "Content-Disposition": f'inline; filename="speech.{fmt}"'}
    if fmt in STREAMABLE_FORMATS:
        headers["X-Sample-Format"] = "s16le"
    return headers


def build_openai_router(service: SynthesizerService, settings: ServerSettings) -> APIRouter:
    """The OpenAI-compatible routes, bound to `service` (the model) and `settings` (limits)."""
    router = APIRouter(tags=["OpenAI-compatible"])
    created = int(time.time())

    @router.post("/v1/audio/speech", response_class=Response, responses=SPEECH_RESPONSES,
                 summary="Text to speech (OpenAI-compatible)")
    async def create_speech(body: SpeechRequest, request: Request) -> Response:
        synth = service.get()
        _check_envelope(body, settings)
        prepared = await prepare(openai_fields(body), OPENAI, synth=synth, settings=settings)
        fmt = body.response_format
        headers = _headers(fmt, prepared.voice_label)
        # Errors (bad voice clip, queue full) surface here, before the response starts; a client
        # that leaves while the request is still queued cancels it at once.
        chunks, first = await open_stream(synth, prepared.request, request)
        request_id = uuid.uuid4().hex[:16]
        logger.info("speech %s: %d chars, voice %s, %s", request_id, len(body.input), prepared.voice_label, fmt)
        if fmt in STREAMABLE_FORMATS and (body.stream or body.stream_format == "audio"):
            headers.update({"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
            header = wav_stream_header(SAMPLE_RATE_HZ, NUM_CHANNELS) if fmt == "wav" else b""
            return ClosingStreamingResponse(chunks, first, s16_bytes, request_id=request_id,
                                            media_type=MEDIA_TYPES[fmt], headers=headers, header=header)
        pcm = await collect(chunks, first, request)
        if pcm is None:
            return Response(status_code=499)
        data = await to_thread.run_sync(encode_audio, pcm, SAMPLE_RATE_HZ, fmt)
        headers["X-Audio-Seconds"] = f"{pcm.shape[1] / SAMPLE_RATE_HZ:.3f}"
        return Response(data, media_type=MEDIA_TYPES[fmt], headers=headers)

    @router.get("/v1/voices", response_model=VoiceList, summary="Preset voices")
    def list_voices() -> VoiceList:
        synth = service.get()
        voices = [
            VoiceInfo(name=p.name, language=p.language, gender=p.gender, description=p.description,
                      available=p.available, unavailable_reason=scrub_paths(p.unavailable_reason))
            for p in synth.list_voices()
        ]
        return VoiceList(default=synth.default_voice, data=voices)

    def model_cards() -> list[ModelCard]:
        ids = [settings.model_name]
        if public_checkpoint_name(settings.lm_id) == settings.lm_id:  # a Hub id; never a local path
            ids.append(settings.lm_id)
        ids += [alias for alias in OPENAI_MODEL_ALIASES if alias not in ids]
        return [ModelCard(id=i, created=created, owned_by="OpenMOSS") for i in ids]

    @router.get("/v1/models", response_model=ModelList, summary="Models (one model and its aliases)")
    def list_models() -> ModelList:
        return ModelList(data=model_cards())

    @router.get("/v1/models/{model_id:path}", response_model=ModelCard, responses={404: {"model": ErrorResponse}},
                summary="One model")
    def get_model(model_id: str) -> ModelCard:
        for card in model_cards():
            if card.id == model_id:
                return card
        raise ModelNotFoundError(f"model {model_id[:80]!r} is not served here", param="model",
                                 code="model_not_found")

    return router
