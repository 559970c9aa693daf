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
  `tts_core.ref_audio`), `ref_text`
  (its transcript, switching to continuation mode), `seed`, sampling fields, `max_frames`.

Every error is raised before the first byte of audio, so it arrives as OpenAI's JSON error shape.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from typing import Literal

import numpy as np
from anyio import to_thread
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from .audio import encode_audio, pcm_to_int16_bytes, wav_stream_header
from .config import SamplingParams
from .errors import InvalidRequestError, VoiceNotFoundError, VoiceUnavailableError
from .http_errors import scrub_paths
from .http_stream import open_stream
from .ref_audio import read_ref_audio
from .service import SynthesizerService
from .settings import ServerSettings
from .types import NUM_CHANNELS, SAMPLE_RATE_HZ, AudioChunk, SynthesisRequest, Voice

ResponseFormat = Literal["mp3", "opus", "flac", "wav", "pcm"]
MEDIA_TYPES: dict[str, str] = {
    "mp3": "audio/mpeg", "opus": "audio/ogg", "flac": "audio/flac", "wav": "audio/wav", "pcm": "audio/pcm",
}
STREAMABLE_FORMATS = ("pcm", "wav")
OPENAI_VOICES = frozenset(
    {"alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse", "marin", "cedar"}
)
OPENAI_MODEL_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
# API field -> SamplingParams field, for building the params and for renaming their errors.
SAMPLING_FIELDS = {
    "temperature": "audio_temperature", "top_p": "audio_top_p", "top_k": "audio_top_k",
    "repetition_penalty": "audio_repetition_penalty", "text_temperature": "text_temperature",
    "text_top_p": "text_top_p", "text_top_k": "text_top_k", "do_sample": "do_sample",
}
_REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


class ModelNotFoundError(InvalidRequestError):
    status_code = 404


# ---- schemas ----------------------------------------------------------------------------------


class VoiceId(BaseModel):
    id: str = Field(description="A preset name (OpenAI's custom-voice object form).")


class SpeechRequest(BaseModel):
    """Body of `POST /v1/audio/speech`: OpenAI's fields plus this server's extensions."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"model": "moss-tts-nano", "input": "Hello from MOSS-TTS-Nano!", "voice": "alloy", "response_format": "wav"},
    ]})

    model: str = Field("moss-tts-nano", description=(
        "Model id. 'moss-tts-nano', the checkpoint's Hub id, and OpenAI's names (tts-1, tts-1-hd, "
        "gpt-4o-mini-tts and dated variants) all select this server's one model."))
    input: str = Field(description="Text to speak, at most the server's max_text_chars (default 4096) characters.")
    voice: str | VoiceId | None = Field(None, description=(
        "Preset name from GET /v1/voices, or {\"id\": name}. OpenAI voice names (alloy, echo, ...) "
        "map to the default preset. Omitted: the default preset. Ignored when ref_audio is given."))
    response_format: ResponseFormat = Field("mp3", description=(
        "Audio encoding, always 48 kHz stereo: mp3, opus (Ogg), flac, wav (16-bit) or pcm "
        "(raw 16-bit little-endian, interleaved stereo)."))
    speed: float = Field(1.0, description="Only 1.0 is supported; any other value is refused.")
    instructions: str | None = Field(None, description="Accepted for OpenAI compatibility and ignored.")
    stream: bool = Field(False, description=(
        "Send audio as it is generated (chunked). Only for pcm and wav; other formats are refused."))
    stream_format: Literal["audio", "sse"] | None = Field(None, description=(
        "OpenAI's field. 'audio': raw audio bytes, streamed for pcm/wav, whole file otherwise. "
        "'sse' is not supported."))
    ref_audio: str | None = Field(None, description=(
        "Extension. Reference clip to clone (3-10 s is best): base64 or a data: URL of any common "
        "audio file (mono or stereo, 16 kHz or more), at most max_upload_bytes (default 10 MiB) and "
        "max_ref_audio_s (default 60 s; only the first 20 s are used). http(s) URLs only where the "
        "server allows them, and only to public addresses; never a file path."))
    ref_text: str | None = Field(None, description=(
        "Extension. Transcript of ref_audio; switches to continuation mode (the model continues the clip)."))
    seed: int | None = Field(None, description="Extension. Same seed and settings -> same audio.")
    temperature: float | None = Field(None, description="Extension. Audio sampling temperature, (0, 10]; default 0.8.")
    top_p: float | None = Field(None, description="Extension. Audio nucleus sampling, (0, 1]; default 0.95.")
    top_k: int | None = Field(None, description="Extension. Audio top-k, 0 disables; default 25.")
    repetition_penalty: float | None = Field(None, description="Extension. Audio repetition penalty, [1, 10]; default 1.2.")
    text_temperature: float | None = Field(None, description="Extension. Temperature of the continue/stop decision.")
    text_top_p: float | None = Field(None, description="Extension. Top-p of the continue/stop decision.")
    text_top_k: int | None = Field(None, description="Extension. Top-k of the continue/stop decision.")
    do_sample: bool | None = Field(None, description="Extension. false: argmax everywhere (penalty still applies).")
    greedy: bool = Field(False, description="Extension. Reference greedy decoding: argmax, no repetition penalty.")
    max_frames: int | None = Field(None, description="Extension. Cap on generated frames (80 ms each).")


class VoiceInfo(BaseModel):
    name: str
    language: str | None = None
    gender: str | None = None
    description: str | None = None
    available: bool
    unavailable_reason: str | None = None


class VoiceList(BaseModel):
    object: Literal["list"] = "list"
    default: str = Field(description="The preset used when a request names no voice.")
    data: list[VoiceInfo]


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


_AUDIO_SCHEMA = {"schema": {"type": "string", "format": "binary"}}
_SPEECH_RESPONSES: dict = {
    200: {
        "description": "Audio, 48 kHz stereo. Headers: X-Sample-Rate, X-Channels, X-Voice; "
        "X-Sample-Format (s16le) for pcm and wav.",
        "content": {media: _AUDIO_SCHEMA for media in MEDIA_TYPES.values()},
    },
    400: {"model": ErrorResponse, "description": "Invalid field; `param` names it."},
    404: {"model": ErrorResponse, "description": "Unknown voice or model."},
    413: {"model": ErrorResponse, "description": "Request body, ref_audio or its duration over the server's limit."},
    503: {"model": ErrorResponse, "description": "Busy (queue full) or still loading; see Retry-After."},
}


# ---- request -> SynthesisRequest --------------------------------------------------------------


def _renamed(exc: InvalidRequestError, internal: str, public: str) -> InvalidRequestError:
    message = exc.message.replace(internal, public, 1)
    return type(exc)(message, param=public, code=exc.code)


def _sampling(body: SpeechRequest) -> SamplingParams:
    if body.greedy and body.do_sample:
        raise InvalidRequestError("greedy and do_sample=true contradict each other: send one", param="greedy")
    base = SamplingParams.greedy() if body.greedy else SamplingParams()
    overrides = {SAMPLING_FIELDS[name]: getattr(body, name) for name in SAMPLING_FIELDS if getattr(body, name) is not None}
    try:
        return dataclasses.replace(base, **overrides)
    except InvalidRequestError as exc:
        public = {v: k for k, v in SAMPLING_FIELDS.items()}.get(exc.param or "", exc.param or "")
        raise _renamed(exc, exc.param or "", public) from None


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


def _resolve_preset(synth, voice: str | VoiceId | None) -> str:
    """The preset name to use; OpenAI's voice names fall back to the default preset."""
    name = (voice.id if isinstance(voice, VoiceId) else voice or "").strip()
    if not name:
        return synth.default_voice
    presets = {p.name: p for p in synth.list_voices()}
    preset = presets.get(name) or next((p for p in presets.values() if p.name.lower() == name.lower()), None)
    if preset is None:
        if name.lower() in OPENAI_VOICES:
            return synth.default_voice
        raise VoiceNotFoundError(
            f"unknown voice {name[:80]!r}: choose one of {', '.join(sorted(presets))} "
            "(GET /v1/voices lists them), or send ref_audio to clone a voice",
            param="voice", code="voice_not_found",
        )
    if not preset.available:
        raise VoiceUnavailableError(
            f"voice {preset.name!r} is unavailable ({preset.unavailable_reason or 'no source'}): choose another",
            param="voice",
        )
    return preset.name


async def _build_request(body: SpeechRequest, synth, settings: ServerSettings) -> tuple[SynthesisRequest, str]:
    """Validate every field; returns the request and the label of the voice (for `X-Voice`)."""
    _check_model(body.model, settings)
    if not body.input.strip():
        raise InvalidRequestError("input is empty: send the text to speak", param="input", code="empty_text")
    if len(body.input) > settings.max_text_chars:
        raise InvalidRequestError(
            f"input is {len(body.input)} characters; the limit is {settings.max_text_chars}: split the text",
            param="input", code="string_above_max_length",
        )
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
    if body.ref_text is not None and body.ref_audio is None:
        raise InvalidRequestError("ref_text is the transcript of ref_audio: send ref_audio too", param="ref_text")
    if body.ref_text is not None and len(body.ref_text) > settings.max_text_chars:
        raise InvalidRequestError(
            f"ref_text is {len(body.ref_text)} characters; the limit is {settings.max_text_chars}: it is the "
            "transcript of a short clip", param="ref_text", code="string_above_max_length",
        )
    sampling = _sampling(body)
    if body.ref_audio is not None:
        clip = await read_ref_audio(body.ref_audio, settings)
        voice, label = Voice.from_audio(clip, transcript=body.ref_text), "reference"
        mode = "continuation" if voice.transcript else "voice_clone"
    else:
        label = _resolve_preset(synth, body.voice)
        voice, mode = Voice.preset(label), "voice_clone"
    try:
        request = SynthesisRequest(text=body.input, voice=voice, mode=mode, sampling=sampling,
                                   seed=body.seed, max_frames=body.max_frames)
    except InvalidRequestError as exc:
        raise (_renamed(exc, "text", "input") if exc.param == "text" else exc) from None
    return request, label


# ---- responses --------------------------------------------------------------------------------


def _headers(fmt: str, voice_label: str) -> dict[str, str]:
    # Preset names may be non-ASCII; header values must be latin-1, so the name is percent-encoded.
    headers = {"X-Sample-Rate": str(SAMPLE_RATE_HZ), "X-Channels": str(NUM_CHANNELS),
               "X-Voice": urllib.parse.quote(voice_label, safe=" -_.()"),
               "Content-Disposition": f'inline; filename="speech.{fmt}"'}
    if fmt in STREAMABLE_FORMATS:
        headers["X-Sample-Format"] = "s16le"
    return headers


async def _next_chunk(chunks: Iterator[AudioChunk]) -> AudioChunk | None:
    # Not abandoned on cancellation: the thread finishes its next() before the caller may close().
    return await to_thread.run_sync(next, chunks, None)


async def _audio_bytes(chunks: Iterator[AudioChunk], first: AudioChunk | None, fmt: str) -> AsyncIterator[bytes]:
    """Encoded chunks; closing this (client gone, stream done) closes `chunks`, cancelling synthesis."""
    try:
        if fmt == "wav":
            yield wav_stream_header(SAMPLE_RATE_HZ, NUM_CHANNELS)
        chunk: AudioChunk | None = first
        while chunk is not None:
            if chunk.pcm.shape[1]:
                yield pcm_to_int16_bytes(chunk.pcm)
            chunk = None if chunk.is_last else await _next_chunk(chunks)
    finally:
        chunks.close()


class _AudioStreamResponse(StreamingResponse):
    """Streams `chunks` as pcm/wav bytes and always closes them, even when the client left early
    (or before the body was ever iterated), which cancels the synthesis and frees its slot."""

    def __init__(self, chunks: Iterator[AudioChunk], first: AudioChunk | None, fmt: str, headers: dict):
        super().__init__(_audio_bytes(chunks, first, fmt), media_type=MEDIA_TYPES[fmt], headers=headers)
        self._chunks = chunks

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]
            self._chunks.close()


async def _collect(chunks: Iterator[AudioChunk], first: AudioChunk | None,
                   request: Request) -> np.ndarray | None:
    """All audio as float32 [2, n]; None when the client disconnected (the synthesis is cancelled)."""
    parts: list[np.ndarray] = []
    if first is None:  # the client left before the first chunk (open_stream cancelled it)
        chunks.close()
        return None
    chunk: AudioChunk | None = first
    try:
        while chunk is not None:
            parts.append(chunk.pcm)
            if chunk.is_last:
                break
            if await request.is_disconnected():
                return None
            chunk = await _next_chunk(chunks)
    finally:
        chunks.close()
    return np.concatenate(parts, axis=1) if parts else np.zeros((NUM_CHANNELS, 0), np.float32)


# ---- router -----------------------------------------------------------------------------------


def build_openai_router(service: SynthesizerService, settings: ServerSettings) -> APIRouter:
    """The OpenAI-compatible routes, bound to `service` (the model) and `settings` (limits)."""
    router = APIRouter(tags=["OpenAI-compatible"])
    created = int(time.time())

    @router.post("/v1/audio/speech", response_class=Response, responses=_SPEECH_RESPONSES,
                 summary="Text to speech (OpenAI-compatible)")
    async def create_speech(body: SpeechRequest, request: Request) -> Response:
        synth = service.get()
        synthesis, voice_label = await _build_request(body, synth, settings)
        fmt = body.response_format
        headers = _headers(fmt, voice_label)
        # Errors (bad voice clip, queue full) surface here, before the response starts; a client
        # that leaves while the request is still queued cancels it at once.
        chunks, first = await open_stream(synth, synthesis, request)
        is_streamed = fmt in STREAMABLE_FORMATS and (body.stream or body.stream_format == "audio")
        if is_streamed:
            headers.update({"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
            return _AudioStreamResponse(chunks, first, fmt, headers)
        pcm = await _collect(chunks, first, request)
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
        if _REPO_ID.match(settings.lm_id) and not os.path.exists(settings.lm_id):  # never list a local path
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
