"""OpenAI-compatible speech API: `POST /v1/audio/speech`, `GET /v1/voices`, `GET /v1/models`, and the
saved-voice routes of `studio/api/voices_api.py` (`/v1/audio/voices`).

Differences from OpenAI's API, all deliberate:
- Audio is 48 kHz stereo, the model's own output, except `pcm` under OpenAI's model names (tts-1,
  tts-1-hd, gpt-4o-mini-tts and dated variants): 24 kHz mono, as OpenAI sends it and as its clients
  play it. `sample_rate` (vllm-omni's extension) overrides the rate. `X-Sample-Rate`, `X-Channels`
  and `X-Audio-Format` always say what was sent; `pcm` is 16-bit little-endian, channels interleaved.
- `voice` names a preset of this server (case-insensitive) or a saved voice id (`voice_...`). OpenAI's
  built-in names that are not presets (alloy, echo, ...) pick a preset of the input's language so
  OpenAI scripts run unchanged; `X-Voice` says which voice spoke. Other unknown names: 404 listing presets.
- `speed` 0.25-4 is a pitch-preserving time-stretch (`stretch.py`); `instructions` is accepted and
  ignored (the model has no instruction control).
- The body streams as it is generated (mp3, opus and aac encoded progressively, wav with a
  streaming header, pcm), whether or not the client sends `stream`, as OpenAI's does: agents play
  the first bytes at once. flac is one file of exact length unless `stream` (or `stream_format:
  "audio"`) asks for a stream, whose length its header cannot say. `stream_format: "sse"` sends OpenAI's events
  (`speech.audio.delta`, `speech.audio.done`), plus `speech.segment` captions with `timestamps: true`.
- Extensions: `ref_audio` (voice cloning from a base64 or data: URL clip, decoded and checked by
  `studio/limits/ref_audio.py`), `ref_text` (its transcript, switching to continuation mode), `seed`, sampling
  fields, `max_frames`, `sample_rate`, `timestamps`.

Every error is raised before the first byte of audio, so it arrives as OpenAI's JSON error shape.
Schemas live in `studio/api/openai_schemas.py`; the body is checked and mapped by `studio/api/requests.py`; the
audio goes out through `studio/delivery/speech_output.py`.
"""

from __future__ import annotations

import logging
import time
import urllib.parse

from fastapi import APIRouter, Request
from fastapi.responses import Response

from tts_core.audio.encoders import check_rate
from tts_core.audio.stretch import check_speed
from tts_core.errors import InvalidRequestError
from tts_core.types import NUM_CHANNELS, SAMPLE_RATE_HZ

from ..delivery.speech_output import FileWriter, OutputSpec, RawWriter, SpeechRender, SseWriter
from ..delivery.streaming import respond
from ..errors import ModelNotFoundError, public_checkpoint_name, scrub_paths
from ..service import SynthesizerService
from ..settings import ServerSettings
from .openai_schemas import (
    MEDIA_TYPES,
    OPENAI_MODEL_ALIASES,
    OPENAI_PCM_CHANNELS,
    OPENAI_PCM_RATE_HZ,
    S16_FORMATS,
    SPEECH_RESPONSES,
    ErrorResponse,
    ModelCard,
    ModelList,
    SpeechRequest,
    VoiceInfo,
    VoiceList,
)
from .requests import OPENAI, openai_fields, prepare
from .voices_api import SavedVoices, build_voices_router

logger = logging.getLogger(__name__)
# Formats sent as one file of exact length unless the client asks for a stream: a streamed flac
# cannot carry its length, and libsndfile (soundfile) refuses such a file.
WHOLE_UNLESS_STREAMED = frozenset({"flac"})
MODEL_NAME = "moss-tts-nano"  # the id this server answers to and lists first in `GET /v1/models`


def _is_alias(name: str) -> bool:
    return name.strip().lower().startswith(OPENAI_MODEL_ALIASES)


def _check_model(name: str, settings: ServerSettings) -> None:
    key = name.strip().lower()
    lm = settings.lm_id.lower()
    accepted = {MODEL_NAME, lm, lm.rsplit("/", 1)[-1]}
    if key in accepted or _is_alias(key) or "moss-tts-nano" in key:
        return
    raise ModelNotFoundError(
        f"model {name[:80]!r} is not served here: use '{MODEL_NAME}' "
        f"(OpenAI's {', '.join(OPENAI_MODEL_ALIASES)} are accepted as aliases)",
        param="model", code="model_not_found",
    )


def output_spec(body: SpeechRequest, settings: ServerSettings) -> tuple[OutputSpec, bool]:
    """The OpenAI-only fields (model, speed, output options) -> what to send, and whether as SSE.

    The rest of the body is checked by `requests.prepare`.
    """
    _check_model(body.model, settings)
    speed = check_speed(body.speed)
    sse = body.stream_format == "sse"
    fmt = body.response_format if not sse or "response_format" in body.model_fields_set else "pcm"
    openai_pcm = fmt == "pcm" and _is_alias(body.model)
    rate = body.sample_rate or (OPENAI_PCM_RATE_HZ if openai_pcm else SAMPLE_RATE_HZ)
    problem = check_rate(fmt, rate)
    if problem:
        raise InvalidRequestError(f"sample_rate {rate} cannot be used for {fmt}: {problem}",
                                  param="sample_rate", code="unsupported_value")
    if body.timestamps and not sse:
        raise InvalidRequestError("timestamps travel as server-sent events: add stream_format 'sse' "
                                  "(or drop timestamps)", param="timestamps", code="unsupported_value")
    channels = OPENAI_PCM_CHANNELS if openai_pcm else NUM_CHANNELS
    return OutputSpec(fmt, rate, channels, speed, captions=body.timestamps), sse


def _headers(spec: OutputSpec, voice_label: str) -> dict[str, str]:
    # Preset names may be non-ASCII; header values must be latin-1, so the name is percent-encoded.
    headers = {"X-Sample-Rate": str(spec.sample_rate), "X-Channels": str(spec.channels),
               "X-Audio-Format": spec.fmt, "X-Speed": f"{spec.speed:g}",
               "X-Voice": urllib.parse.quote(voice_label, safe=" -_.()"),
               "Content-Disposition": f'inline; filename="speech.{spec.fmt}"'}
    if spec.fmt in S16_FORMATS:
        headers["X-Sample-Format"] = "s16le"
    return headers


def build_openai_router(service: SynthesizerService, settings: ServerSettings,
                        saved: SavedVoices | None = None) -> APIRouter:
    """The OpenAI-compatible routes, bound to `service` (the model), `settings` (limits) and the app's
    voice library view `saved` (one per app; a new one when not given)."""
    router = APIRouter(tags=["OpenAI-compatible"])
    created = int(time.time())
    saved = saved or SavedVoices(service, settings)
    router.include_router(build_voices_router(saved, settings))

    @router.post("/v1/audio/speech", response_class=Response, responses=SPEECH_RESPONSES,
                 summary="Text to speech (OpenAI-compatible)")
    async def create_speech(body: SpeechRequest, request: Request) -> Response:
        synth = service.get()
        spec, sse = output_spec(body, settings)
        prepared = await prepare(openai_fields(body), OPENAI, synth=synth, settings=settings, saved=saved.voice)
        pool = getattr(request.app.state, "encoder_pool", None)
        if sse:
            tokens = len(synth.tokenizer.encode(body.input))

            def writer(_stream) -> RawWriter:
                return SseWriter(SpeechRender(spec, pool=pool), input_tokens=tokens)

            media_type = "text/event-stream"
        elif spec.fmt in WHOLE_UNLESS_STREAMED and not (body.stream or body.stream_format == "audio"):
            def writer(_stream) -> FileWriter:
                return FileWriter(spec)

            media_type = MEDIA_TYPES[spec.fmt]
        else:
            def writer(_stream) -> RawWriter:
                return RawWriter(SpeechRender(spec, pool=pool))

            media_type = MEDIA_TYPES[spec.fmt]
        what = (f"speech, {len(body.input)} chars, voice {prepared.voice_label}, {spec.fmt} at {spec.sample_rate} Hz "
                f"x{spec.channels}, speed {spec.speed:g}" + (" (sse)" if sse else ""))
        return await respond(synth, prepared.request, request, writer=writer, media_type=media_type,
                             headers=_headers(spec, prepared.voice_label), label=f"sse-{spec.fmt}" if sse else spec.fmt,
                             what=what, speed=spec.speed)

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
        ids = [MODEL_NAME]
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
