"""OpenAI-compatible speech API: `POST /v1/audio/speech`, `GET /v1/voices`, `GET /v1/models`, and the
saved-voice routes of `web/api/voices_api.py` (`/v1/audio/voices`).

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
- Without `stream`/`stream_format` the response is one whole file of exact length. `stream: true` or
  `stream_format: "audio"` sends raw bytes as they are generated, in every format (mp3, opus, aac and
  flac encoded progressively). `stream_format: "sse"` sends OpenAI's events (`speech.audio.delta`,
  `speech.audio.done`), plus `speech.segment` captions with `timestamps: true`.
- Extensions: `ref_audio` (voice cloning from a base64 or data: URL clip, decoded and checked by
  `web/limits/ref_audio.py`), `ref_text` (its transcript, switching to continuation mode), `seed`, sampling
  fields, `max_frames`, `sample_rate`, `timestamps`.

Every error is raised before the first byte of audio, so it arrives as OpenAI's JSON error shape.
Schemas live in `web/api/openai_schemas.py`; the body is checked and mapped by `web/api/requests.py`; the
audio goes out through `web/delivery/speech_output.py`.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
import uuid

from anyio import to_thread
from fastapi import APIRouter, Request
from fastapi.responses import Response

from tts_core.audio.encoders import check_rate
from tts_core.audio.stretch import check_speed
from tts_core.errors import InvalidRequestError
from tts_core.types import NUM_CHANNELS, SAMPLE_RATE_HZ

from ..delivery.speech_output import OutputSpec, RawWriter, SpeechRender, SseWriter, render_whole
from ..delivery.streaming import ClosingStreamingResponse, Delivery, close_stream, collect, open_stream
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


def _is_alias(name: str) -> bool:
    return name.strip().lower().startswith(OPENAI_MODEL_ALIASES)


def _check_model(name: str, settings: ServerSettings) -> None:
    key = name.strip().lower()
    lm = settings.lm_id.lower()
    accepted = {settings.model_name.lower(), lm, lm.rsplit("/", 1)[-1]}
    if key in accepted or _is_alias(key) or "moss-tts-nano" in key:
        return
    raise ModelNotFoundError(
        f"model {name[:80]!r} is not served here: use '{settings.model_name}' "
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


def _timed_render(pcm, spec: OutputSpec) -> tuple[bytes, float, float]:
    """`render_whole`, and the CPU seconds it took in this thread."""
    started = time.thread_time()
    data, seconds = render_whole(pcm, spec)
    return data, seconds, time.thread_time() - started


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
        headers = _headers(spec, prepared.voice_label)
        # Errors (bad voice clip, queue full) surface here, before the response starts; a client
        # that leaves while the request is still queued cancels it at once.
        started = time.monotonic()
        pump, first = await open_stream(synth, prepared.request, request)
        try:  # until the response owns the pump, an error here must close it (it holds a slot)
            request_id = uuid.uuid4().hex[:16]
            headers["X-Request-Id"] = request_id
            metrics = getattr(request.app.state, "metrics", None)
            label = f"sse-{spec.fmt}" if sse else spec.fmt
            logger.info("speech %s: %d chars, voice %s, %s at %d Hz x%d, speed %g%s", request_id, len(body.input),
                        prepared.voice_label, spec.fmt, spec.sample_rate, spec.channels, spec.speed, " (sse)" if sse else "")
            if sse or body.stream or body.stream_format == "audio":
                headers.update({"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
                if first is not None and first.estimated_audio_s is not None:
                    headers["X-Estimated-Duration"] = f"{first.estimated_audio_s / spec.speed:.2f}"
                render = SpeechRender(spec, pool=getattr(request.app.state, "encoder_pool", None))
                if sse:
                    writer: RawWriter = SseWriter(render, input_tokens=len(synth.tokenizer.encode(body.input)))
                    media_type = "text/event-stream"
                else:
                    writer, media_type = RawWriter(render), MEDIA_TYPES[spec.fmt]

                def delivered(sent: Delivery) -> None:
                    if metrics is not None:
                        metrics.observe_delivery(label, audio_s=sent.audio_s / spec.speed, bytes_out=sent.bytes_out,
                                                 encode_s=sent.writer_s, elapsed_s=sent.elapsed_s,
                                                 finished=sent.outcome == "done")

                return ClosingStreamingResponse(pump, first, writer, request_id=request_id, media_type=media_type,
                                                headers=headers, delivered=delivered, started=started)
            pcm = await collect(pump, first, request)
            if pcm is None:
                return Response(status_code=499)
            data, seconds, encode_s = await to_thread.run_sync(_timed_render, pcm, spec)
            headers["X-Audio-Seconds"] = f"{seconds:.3f}"
            if metrics is not None:
                metrics.observe_delivery(label, audio_s=seconds, bytes_out=len(data), encode_s=encode_s,
                                         elapsed_s=time.monotonic() - started, finished=True)
            return Response(data, media_type=MEDIA_TYPES[spec.fmt], headers=headers)
        except BaseException:
            await close_stream(pump)
            raise

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
